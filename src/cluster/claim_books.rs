//! Replicas that agree at the speed of the watch: each replica keeps its claims
//! ([`super::coordination::Claim`]) in one Lease of its own, its *claim book*, and reads the
//! others' books from a watch.
//!
//! An approval that needs agreement adds its claim to this replica's book; a round
//! ([`super::rounds`], one at a time) writes the book (one write for every claim added since the
//! last round: a group commit) and waits until the book watch brings the write back. The watch
//! delivers the namespace's Lease events in resourceVersion order, so every claim written before
//! this one is then known, each with the resourceVersion it first appeared at. A claim of
//! another replica on the same release written before this one that the decision did not account
//! for is a conflict (the verdict is decided again with it hidden); one written after this one is
//! the other replica's to account for (it will see this one). So two racing approvals are
//! serialised in the order of their writes, and exactly one of two that conflict stands, for one
//! write per round rather than a read and a write per approval. A claim first seen in a
//! (re-)list counts as written before any (its order is unknown).
//!
//! A claim leaves the book `keep_after_deletion` after this replica's watch has brought the
//! deletion it claims (at the latest when it expires): a verdict of another replica that arrives
//! after the deletion sees it in its own view (its fence round began after it arrived), and one
//! that arrived before checks the books within its decision deadline, which
//! `keep_after_deletion` outlasts. So books hold the claims of seconds, not of the whole TTL.
//! Claims expire after `--tombstone-ttl`; a book whose claims have all expired is swept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};

use super::coordination::{
    CLAIMS_ANNOTATION, Claim, Claimed, ClaimedRecord, Claims, CoordinationError, DeleteCoordinator,
    MAX_BOOK_CLAIMS, now_ms,
};
use super::feed::{Feed, IndexSink};
use super::rounds::{self, GroupCommit, Mark, Pacing, RoundFailed, RoundWriter};
use crate::release::ReleaseKey;

/// Labels of every claim book (the sweep lists by them).
pub(crate) const BOOK_LABELS: &str = "app.kubernetes.io/managed-by=helm-guard,helm-guard.io/lease=claim-book";
/// The annotation naming the format of a book's claims (POLICY.md, "Replicas that agree"). A
/// book without it is of format 1, as written before the format was named.
pub(crate) const FORMAT_ANNOTATION: &str = "helm-guard.io/claims-format";
/// The format this version writes and reads.
pub(crate) const FORMAT: &str = "1";

/// One claim in a book, with the release it is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BookClaim {
    /// The release, as `driver namespace/release`.
    release: String,
    #[serde(flatten)]
    claim: Claim,
}

fn release_of(key: &ReleaseKey) -> String {
    format!("{} {}/{}", key.driver, key.namespace, key.release)
}

/// This replica's claim, the resourceVersion of the first write that held it (none yet: not yet
/// agreed), and when this replica's watch was first seen to have brought the deletion.
#[derive(Debug, Clone)]
struct Mine {
    claim: BookClaim,
    key: ReleaseKey,
    written_at: Option<u64>,
    deletion_seen: Option<Instant>,
}

/// Another replica's claim, and the resourceVersion it first appeared at (0: first seen in a
/// list, order unknown).
#[derive(Debug, Clone)]
struct Theirs {
    claim: BookClaim,
    since: u64,
}

#[derive(Debug)]
struct Books {
    leases: Api<Lease>,
    /// This replica's view of the records: where it sees a claimed deletion done.
    index: Arc<super::ReleaseIndex>,
    keep_after_deletion: Duration,
    identity: String,
    book: String,
    /// The other replicas' claims, by book, as the watch last brought them.
    others: Mutex<HashMap<String, Vec<Theirs>>>,
    /// The other replicas' books whose claims this version cannot read: while one is there,
    /// nothing is agreed (its claims could be on the very record).
    unreadable: Mutex<std::collections::BTreeSet<String>>,
    mine: Mutex<Vec<Mine>>,
    rounds: GroupCommit,
    /// The highest resourceVersion of a book event applied to `others`.
    applied: Mark,
}

/// Claims in per-replica books, read from a watch (see the module doc).
pub(crate) struct BookCoordinator {
    books: Arc<Books>,
    ttl: Duration,
}

impl std::fmt::Debug for BookCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BookCoordinator").field("book", &self.books.book).finish_non_exhaustive()
    }
}

/// A book's name: the replica's identity, made a valid object name.
pub(crate) fn book_name(identity: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(identity.as_bytes());
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("helm-guard-claims-{hex}")
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl BookCoordinator {
    /// Books in the namespace of `leases`, claims dropped `keep_after_deletion` after `index`
    /// shows their deletion; starts the book watch and the round writer in `tasks`.
    pub(crate) fn start(
        leases: Api<Lease>,
        identity: String,
        ttl: Duration,
        index: Arc<super::ReleaseIndex>,
        keep_after_deletion: Duration,
        tasks: &crate::tasks::Tasks,
    ) -> BookCoordinator {
        let books = Arc::new(Books {
            leases,
            index,
            keep_after_deletion,
            book: book_name(&identity),
            identity,
            others: Mutex::default(),
            unreadable: Mutex::default(),
            mine: Mutex::default(),
            rounds: GroupCommit::default(),
            applied: Mark::default(),
        });
        tasks.spawn(watch_books(books.clone()));
        tasks.spawn({
            let books = books.clone();
            async move { rounds::run(&books.rounds, &*books, &books.applied, PACING).await }
        });
        BookCoordinator { books, ttl }
    }

    /// The other replicas' unexpired claims on `release` that first appeared before
    /// `before` (a resourceVersion).
    fn others_on(&self, release: &str, before: u64) -> Vec<Claim> {
        let now = now_ms();
        lock(&self.books.others)
            .values()
            .flatten()
            .filter(|t| t.claim.release == release && t.claim.claim.until > now && t.since < before)
            .map(|t| t.claim.claim.clone())
            .collect()
    }
}

impl DeleteCoordinator for BookCoordinator {
    fn claims<'a>(
        &'a self,
        key: &'a ReleaseKey,
        _deadline: Instant,
    ) -> BoxFuture<'a, Result<Claims, CoordinationError>> {
        let claims = Claims { claims: self.others_on(&release_of(key), u64::MAX) };
        Box::pin(std::future::ready(Ok(claims)))
    }

    fn claim<'a>(
        &'a self,
        key: &'a ReleaseKey,
        record: &'a ClaimedRecord<'a>,
        seen: &'a Claims,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Claimed, CoordinationError>> {
        Box::pin(self.claim_by(key, record, seen, deadline))
    }
}

impl BookCoordinator {
    async fn claim_by(
        &self,
        key: &ReleaseKey,
        record: &ClaimedRecord<'_>,
        seen: &Claims,
        deadline: Instant,
    ) -> Result<Claimed, CoordinationError> {
        let release = release_of(key);
        let now = now_ms();
        let ttl_ms = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        let books = &self.books;
        if let Some(book) = lock(&books.unreadable).iter().next() {
            return Err(CoordinationError::Unreadable(book.clone()));
        }
        let written_at = |mine: &[Mine]| {
            mine.iter()
                .find(|m| m.claim.release == release && m.claim.claim.is(record))
                .and_then(|m| m.written_at)
        };
        let mut at = {
            let mut mine = lock(&books.mine);
            mine.retain(|m| m.claim.claim.until > now);
            let held = mine.iter().any(|m| m.claim.release == release && m.claim.claim.is(record));
            if !held {
                if mine.len() >= MAX_BOOK_CLAIMS {
                    return Err(CoordinationError::Full);
                }
                let claim = Claim {
                    object: record.object.to_owned(),
                    uid: record.uid.map(str::to_owned),
                    until: now.saturating_add(ttl_ms),
                    by: books.identity.clone(),
                };
                let claim = BookClaim { release: release.clone(), claim };
                mine.push(Mine { claim, key: key.clone(), written_at: None, deletion_seen: None });
            }
            written_at(&mine)
        };
        if at.is_none() {
            let need = books.rounds.join();
            let deadline = tokio::time::Instant::from_std(deadline);
            if !books.rounds.done_by(need, deadline).await {
                return Err(CoordinationError::Deadline);
            }
            at = written_at(&lock(&books.mine));
        }
        // Written, and the watch has come past the write: every claim written before it is known.
        let Some(at) = at else { return Err(CoordinationError::Deadline) };
        if let Some(book) = lock(&books.unreadable).iter().next() {
            return Err(CoordinationError::Unreadable(book.clone()));
        }
        let unseen = self.others_on(&release, at).into_iter().any(|claim| !seen.claims.contains(&claim));
        Ok(if unseen { Claimed::Conflict } else { Claimed::Yes })
    }
}

/// One round at a time: each writes the whole book (every claim added since the last round
/// rides on one write), so a round under way holds back the next.
const PACING: Pacing = Pacing { in_flight: 1, max_gather: Duration::ZERO };

/// This replica's book, as a round writer: each round writes the claims held (dropping the
/// expired, and those whose deletion this replica's watch has shown for `keep_after_deletion`),
/// and marks the claims it held written once the book watch brings it back.
impl RoundWriter for Books {
    type Written = Vec<(String, Claim)>;

    async fn write(&self, _round: u64) -> Result<(u64, Self::Written), kube::Error> {
        let (now, instant) = (now_ms(), Instant::now());
        let (written, claims): (Vec<(String, Claim)>, Vec<BookClaim>) = {
            let mut mine = lock(&self.mine);
            for m in mine.iter_mut().filter(|m| m.written_at.is_some() && m.deletion_seen.is_none()) {
                let claim = &m.claim.claim;
                if !self.index.holds(&m.key, &claim.object, claim.uid.as_deref()) {
                    m.deletion_seen = Some(instant);
                }
            }
            mine.retain(|m| {
                m.claim.claim.until > now
                    && m.deletion_seen.is_none_or(|seen| instant < seen + self.keep_after_deletion)
            });
            let claims: Vec<BookClaim> = mine.iter().map(|m| m.claim.clone()).collect();
            (claims.iter().map(|c| (c.release.clone(), c.claim.clone())).collect(), claims)
        };
        Ok((write_book(self, &claims).await?, written))
    }

    fn back(&self, written: Self::Written, version: u64) {
        for m in lock(&self.mine).iter_mut() {
            if m.written_at.is_none()
                && written.iter().any(|(r, c)| *r == m.claim.release && *c == m.claim.claim)
            {
                m.written_at = Some(version);
            }
        }
    }

    /// As the fence's: the round's waiters stop waiting at once (their approvals are refused,
    /// "retry") rather than for a later round that may come too late.
    fn failed(&self, failure: &RoundFailed) {
        match failure {
            RoundFailed::Write(error) => {
                tracing::warn!(%error, "could not write this replica's claim book; the approvals waiting on it are refused");
            }
            RoundFailed::NotBack => {
                tracing::warn!("the claim books' watch did not bring this replica's write back in time");
            }
        }
    }
}

/// Writes the book (creating it the first time, or again after a sweep removed it); its new
/// resourceVersion.
async fn write_book(books: &Books, claims: &[BookClaim]) -> Result<u64, kube::Error> {
    let text = serde_json::to_string(claims).map_err(kube::Error::SerdeError)?;
    let labels: serde_json::Map<String, serde_json::Value> = BOOK_LABELS
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), serde_json::Value::from(v)))
        .collect();
    let object = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": books.book, "labels": labels, "annotations": {CLAIMS_ANNOTATION: text, FORMAT_ANNOTATION: FORMAT}},
        "spec": {"holderIdentity": books.identity},
    });
    rounds::apply(&books.leases, &books.book, &object).await
}

/// Keeps `others` as the books are, and how far the watch has come: the watch's events through a
/// [`Feed`] (a relist swapped in whole), as the index's watches do.
async fn watch_books(books: Arc<Books>) {
    let config = watcher::Config::default().labels(BOOK_LABELS).any_semantic();
    let stream = watcher::watcher(books.leases.clone(), config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut feed = Feed::with_sink(BookSink { own: books.book.clone() });
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                feed.apply(&*books, event);
            }
            Err(error) => tracing::warn!(%error, "the claim books' watch failed; retrying with backoff"),
        }
    }
}

/// Another replica's book as the watch brought it: its name, its claims (`None`: a format this
/// version cannot read), and the resourceVersion it was written at.
type BookItem = (String, Option<Vec<BookClaim>>, u64);

/// The other replicas' books, for a [`Feed`] (this replica's own book only moves the watch on).
struct BookSink {
    own: String,
}

impl BookSink {
    fn unreadable(books: &Books, name: &str) {
        tracing::warn!(book = %name, "a claim book this version cannot read: deletions that need agreement are refused until it can");
        lock(&books.unreadable).insert(name.to_owned());
    }
}

/// The books' freshness is their own watch's progress, not the time it was last heard.
impl super::feed::Heard for Books {}

impl IndexSink<Lease> for BookSink {
    type Item = BookItem;
    type Target = Books;

    fn read(&self, lease: &Lease) -> Option<BookItem> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        (name != self.own).then(|| (name, read_book(lease), self.version(lease).unwrap_or(0)))
    }

    /// A claim first seen in a (re-)list counts as written before any (its order is unknown).
    fn replace(&self, books: &Books, items: Vec<BookItem>, _: u64) {
        lock(&books.unreadable).clear();
        let mut others = HashMap::new();
        for (name, claims, _) in items {
            let claims = claims.unwrap_or_else(|| {
                BookSink::unreadable(books, &name);
                Vec::new()
            });
            others.insert(name, claims.into_iter().map(|claim| Theirs { claim, since: 0 }).collect());
        }
        *lock(&books.others) = others;
    }

    /// A claim the book held before keeps the version it first appeared at.
    fn upsert(&self, books: &Books, (name, claims, version): BookItem) {
        let claims = match claims {
            Some(claims) => {
                lock(&books.unreadable).remove(&name);
                claims
            }
            None => {
                BookSink::unreadable(books, &name);
                Vec::new()
            }
        };
        let mut others = lock(&books.others);
        let before = others.remove(&name).unwrap_or_default();
        let now = claims
            .into_iter()
            .map(|claim| {
                let since = before.iter().find(|t| t.claim == claim).map_or(version, |t| t.since);
                Theirs { claim, since }
            })
            .collect();
        others.insert(name, now);
    }

    fn remove(&self, books: &Books, lease: &Lease) {
        let name = lease.metadata.name.clone().unwrap_or_default();
        lock(&books.others).remove(&name);
        lock(&books.unreadable).remove(&name);
    }

    fn version(&self, lease: &Lease) -> Option<u64> {
        rounds::revision(lease.metadata.resource_version.as_deref())
    }

    fn progressed(&self, books: &Books, version: u64) {
        books.applied.raise(version);
    }
}

/// A book's claims, when this version can read them: format 1 (named, or unnamed as before it
/// was), claims that parse. `None` otherwise: a refusal is safer than claims ignored.
fn read_book(lease: &Lease) -> Option<Vec<BookClaim>> {
    let annotations = lease.metadata.annotations.as_ref();
    let format = annotations.and_then(|a| a.get(FORMAT_ANNOTATION)).map_or(FORMAT, String::as_str);
    if format != FORMAT {
        return None;
    }
    match annotations.and_then(|a| a.get(CLAIMS_ANNOTATION)) {
        None => Some(Vec::new()),
        Some(text) => serde_json::from_str(text).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire format (POLICY.md): format 1 named or not, claims that parse; a book of another
    /// format, or whose claims do not parse, is unreadable (and refuses), never read as empty.
    #[test]
    fn a_book_is_read_only_in_the_format_this_version_knows() {
        let book = |annotations: &[(&str, &str)]| Lease {
            metadata: kube::api::ObjectMeta {
                annotations: Some(
                    annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
                ),
                ..Default::default()
            },
            spec: None,
        };
        let claims =
            r#"[{"release":"secret demo/web","object":"sh.helm.release.v1.web.v1","until":5,"by":"a"}]"#;
        assert_eq!(read_book(&book(&[(CLAIMS_ANNOTATION, claims)])).map(|c| c.len()), Some(1), "unnamed: 1");
        assert_eq!(
            read_book(&book(&[(CLAIMS_ANNOTATION, claims), (FORMAT_ANNOTATION, "1")])).map(|c| c.len()),
            Some(1)
        );
        assert_eq!(read_book(&book(&[(CLAIMS_ANNOTATION, claims), (FORMAT_ANNOTATION, "2")])), None);
        assert_eq!(read_book(&book(&[(CLAIMS_ANNOTATION, "{not claims")])), None);
        assert_eq!(read_book(&book(&[])), Some(Vec::new()), "a book with no claims");
    }

    #[test]
    fn book_names_are_valid_object_names_and_differ_by_replica() {
        let name = book_name(&"x".repeat(300));
        assert!(
            name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        assert_ne!(book_name("helm-guard-abc"), book_name("helm-guard-abd"));
    }

    #[test]
    fn a_book_claim_reads_back_with_its_release() {
        let claim = BookClaim {
            release: "secret demo/web".into(),
            claim: Claim {
                object: "sh.helm.release.v1.web.v1".into(),
                uid: Some("u".into()),
                until: 5,
                by: "a".into(),
            },
        };
        let text = serde_json::to_string(std::slice::from_ref(&claim)).unwrap();
        assert_eq!(serde_json::from_str::<Vec<BookClaim>>(&text).unwrap(), vec![claim]);
    }

    fn lease(name: &str, version: u64, claims: Option<&[BookClaim]>) -> Lease {
        let annotations = match claims {
            Some(claims) => [(CLAIMS_ANNOTATION.to_owned(), serde_json::to_string(claims).unwrap())],
            None => [(FORMAT_ANNOTATION.to_owned(), "2".to_owned())],
        };
        Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                resource_version: Some(version.to_string()),
                annotations: Some(annotations.into_iter().collect()),
                ..Default::default()
            },
            spec: None,
        }
    }

    fn claim(object: &str) -> BookClaim {
        BookClaim {
            release: "secret demo/web".into(),
            claim: Claim { object: object.into(), uid: None, until: i64::MAX, by: "b".into() },
        }
    }

    /// The books' watch through the shared feed: a relist swapped in whole (its claims of unknown
    /// order), a claim keeping the version it first appeared at, an unreadable book refusing
    /// until it is gone, this replica's own book only moving the watch on.
    #[tokio::test]
    async fn the_books_watch_keeps_each_claim_with_the_version_it_first_appeared_at() {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let books = Books {
            leases: Api::namespaced(client, "guard"),
            index: Arc::new(super::super::ReleaseIndex::new(super::super::SourceKind::Snapshot)),
            keep_after_deletion: Duration::from_secs(1),
            identity: "a".into(),
            book: "mine".into(),
            others: Mutex::default(),
            unreadable: Mutex::default(),
            mine: Mutex::default(),
            rounds: GroupCommit::default(),
            applied: Mark::default(),
        };
        let since = |book: &str, object: &str| {
            lock(&books.others)[book].iter().find(|t| t.claim.claim.object == object).map(|t| t.since)
        };
        let mut feed = Feed::with_sink(BookSink { own: "mine".into() });
        feed.apply(&books, watcher::Event::Init);
        feed.apply(&books, watcher::Event::InitApply(lease("b", 5, Some(&[claim("v1")]))));
        feed.apply(&books, watcher::Event::InitApply(lease("mine", 9, Some(&[claim("v9")]))));
        assert!(lock(&books.others).is_empty(), "half a relist is not seen");
        feed.apply(&books, watcher::Event::InitDone);
        assert_eq!(since("b", "v1"), Some(0), "order unknown: written before any");
        assert!(!lock(&books.others).contains_key("mine"));
        assert_eq!(books.applied.through(), 9);

        feed.apply(&books, watcher::Event::Apply(lease("b", 12, Some(&[claim("v1"), claim("v2")]))));
        assert_eq!((since("b", "v1"), since("b", "v2")), (Some(0), Some(12)));
        feed.apply(&books, watcher::Event::Apply(lease("c", 13, None)));
        assert!(lock(&books.unreadable).contains("c"));
        feed.apply(&books, watcher::Event::Delete(lease("c", 14, None)));
        assert!(lock(&books.unreadable).is_empty(), "gone: it no longer refuses");
        feed.apply(&books, watcher::Event::Apply(lease("mine", 15, Some(&[]))));
        assert_eq!(books.applied.through(), 15);
    }
}
