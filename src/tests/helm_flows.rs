//! Every Helm flow passes, shown generatively and without a cluster: random, seeded sequences of
//! Helm operations become the storage calls Helm 3.17 and 4.1 make for them (modelled from
//! `pkg/action` and `pkg/storage`, POLICY.md "The transitions"), each sent as the API server's
//! AdmissionReview to one of two in-process replicas that agree through their claim books (as
//! shipped, against the stub of the API server's Leases) and read a shared store. Watch events reach each replica late, each replica's watch lagging
//! by its own amount (in order, as the API server's watch sends them). Helm's other writers (Fleet's forget and its failed-rollback
//! cleanup, Flux's unlock, helm-mapkubeapis) write among Helm's flows as their own identities.
//! Every review Helm or those writers send must be allowed; a hand deletion must be refused
//! exactly when POLICY.md's rules, applied to what is really stored, refuse it.
//!
//! A failure prints its seed: `HELM_FLOWS_SEED=<seed> cargo test --test in_process helm_flows::`.

use crate::common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::lease_stub::LeaseServer;
use common::flows::{FLEET_AGENT, FLUX, HelmOp, KLIPPER, deletion_allowed, random_op, seeds};
use common::*;
use helm_guard::admission::{Admission, LiveParts, Settings, Webhook, review as admission_review};
use helm_guard::cluster::feed::RecordFeed;
use helm_guard::cluster::{Fetched, IndexedRecord, Listing, PayloadFetcher, ReleaseIndex, SourceKind};
use helm_guard::policy::PolicyConfig;
use helm_guard::recycle_bin::api::{BinError, RecycleBin};
use helm_guard::recycle_bin::copy::Keeping;
use helm_guard::release::{Driver, ReleaseKey, Status};
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMetaExt;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

const NAMESPACE: &str = "flows";
pub(super) const RELEASES: [&str; 3] = ["app", "web", "db"];

/// The API server's store: the records that exist now, by object name.
#[derive(Debug, Default)]
struct Store {
    objects: BTreeMap<String, Value>,
    next: u64,
}

impl Store {
    fn next(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// What Helm's storage lists for a release: (revision, status, object name), by revision.
    fn history(&self, release: &str) -> Vec<(u32, Status, String)> {
        let mut history: Vec<(u32, Status, String)> = self
            .objects
            .iter()
            .filter(|(_, o)| o["metadata"]["labels"]["name"] == release)
            .map(|(name, o)| {
                let labels = &o["metadata"]["labels"];
                let revision = labels["version"].as_str().unwrap().parse().unwrap();
                (revision, labels["status"].as_str().unwrap().parse().unwrap(), name.clone())
            })
            .collect();
        history.sort_by_key(|(revision, ..)| *revision);
        history
    }
}

/// GETs and lists served from the store, as the API server answers them.
#[derive(Debug)]
struct StoreReader(Arc<Mutex<Store>>);

impl PayloadFetcher for StoreReader {
    fn fetch<'a>(
        &'a self,
        key: &'a ReleaseKey,
        objects: &'a [String],
        _deadline: Instant,
    ) -> BoxFuture<'a, Vec<(String, Fetched)>> {
        let store = self.0.lock().unwrap();
        let read = objects.iter().map(|name| (name.clone(), fetched(store.objects.get(name), key))).collect();
        Box::pin(std::future::ready(read))
    }

    fn list<'a>(
        &'a self,
        key: &'a ReleaseKey,
        _: crate::cluster::Payloads,
        _deadline: Instant,
    ) -> BoxFuture<'a, Option<Listing>> {
        let store = self.0.lock().unwrap();
        let records = store
            .objects
            .values()
            .filter_map(|object| IndexedRecord::from_meta(Driver::Secret, &meta(object)))
            .filter(|record| record.key == *key)
            .collect();
        Box::pin(std::future::ready(Some(Listing {
            records,
            resource_version: Some(store.next.to_string()),
        })))
    }
}

fn meta(object: &Value) -> ObjectMeta {
    serde_json::from_value(object["metadata"].clone()).unwrap()
}

/// A watch event not yet delivered to a replica.
type Pending = Event<kube::core::PartialObjectMeta<Secret>>;

/// One replica: its own live index, fed by its own (lagging) watch.
struct Guard {
    admission: Admission,
    feed: RecordFeed,
    watch: VecDeque<Pending>,
}

/// The recycle bin both replicas keep copies in: the uid of each record kept.
#[derive(Debug, Default)]
pub(super) struct KeptCopies(Mutex<Vec<String>>);

impl KeptCopies {
    /// Whether a copy of the record of `uid` was kept.
    pub(super) fn holds(&self, uid: &str) -> bool {
        self.0.lock().unwrap().iter().any(|kept| kept == uid)
    }
}

impl RecycleBin for KeptCopies {
    fn keep<'a>(
        &'a self,
        record: &'a helm_guard::release::Record,
        _keeping: &'a Keeping<'a>,
        _deadline: Instant,
    ) -> BoxFuture<'a, Result<(), BinError>> {
        self.0.lock().unwrap().push(record.uid.clone().unwrap_or_default());
        Box::pin(std::future::ready(Ok(())))
    }

    fn namespace(&self) -> &str {
        "helm-guard"
    }
}

/// The cluster, two replicas, and the Helm client's model.
pub(super) struct World {
    pub(super) rng: fastrand::Rng,
    store: Arc<Mutex<Store>>,
    /// The replicas' recycle bin.
    pub(super) bin: Arc<KeptCopies>,
    guards: Vec<Guard>,
    /// Helm 4 (supersedes deployed revisions on `uninstall --keep-history`) or Helm 3.
    helm4: bool,
    /// A base record (a real Helm 4 Secret) per release and its release JSON, re-encoded for
    /// each revision.
    bases: Vec<(Value, Value)>,
    /// Records already encoded, by (release, revision, status): gzip is most of this test's time.
    encoded: std::cell::RefCell<std::collections::HashMap<(usize, u32, Status), Value>>,
    log: Vec<String>,
    seed: u64,
    /// Who writes now: Helm as a person (`None`), or another writer of Helm's storage.
    pub(super) writer: Option<(&'static str, &'static [&'static str])>,
    /// Where the replicas' claim books are kept.
    _books: LeaseServer,
    /// What runs the verdicts, the books' watches and rounds, and the stub (dropped last).
    runtime: tokio::runtime::Runtime,
}

/// How an upgrade ends once its pending revision is stored.
#[derive(Debug, Clone, Copy)]
enum UpgradeEnds {
    Deployed,
    /// `--wait` gave up; `--atomic` (`--rollback-on-failure`) then rolls back.
    Failed {
        atomic: bool,
    },
    /// The Helm process was killed: the revision stays pending.
    Killed,
}

/// Why a Helm operation stopped: the guard refused one of its writes.
pub(super) type Refused = String;

impl World {
    pub(super) fn new(seed: u64) -> World {
        let mut rng = fastrand::Rng::with_seed(seed);
        let store = Arc::new(Mutex::new(Store::default()));
        let bin = Arc::new(KeptCopies::default());
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let books = runtime.block_on(LeaseServer::start(seed, 0, 0));
        let guards = ["a", "b"]
            .into_iter()
            .map(|name| {
                let index =
                    Arc::new(ReleaseIndex::new(SourceKind::Live { tombstone_ttl: Duration::from_secs(30) }));
                index.set_ready(true);
                let tasks = Arc::new(helm_guard::tasks::Tasks::default());
                let coordinator = runtime.block_on(books.book(name, index.clone(), &tasks));
                let live = LiveParts {
                    fetcher: Some(Arc::new(StoreReader(store.clone())) as Arc<dyn PayloadFetcher>),
                    coordinator: Some(coordinator),
                    recycle_bin: Some(bin.clone() as Arc<dyn RecycleBin>),
                    ..LiveParts::default()
                };
                let settings = Settings::new(PolicyConfig::default());
                let admission = Admission::new(index, settings, live, Default::default()).with_tasks(tasks);
                Guard { admission, feed: RecordFeed::new(Driver::Secret), watch: VecDeque::new() }
            })
            .collect();
        let base = helm4_secret();
        let bases = RELEASES
            .iter()
            .map(|release| {
                let mut payload = release_json(&base);
                payload["name"] = json!(release);
                payload["namespace"] = json!(NAMESPACE);
                let mut record = with_release_json(base.clone(), &payload);
                record["metadata"]["namespace"] = json!(NAMESPACE);
                record["metadata"]["labels"]["name"] = json!(release);
                for key in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
                    record["metadata"].as_object_mut().unwrap().remove(key);
                }
                (record, payload)
            })
            .collect();
        let helm4 = rng.bool();
        World {
            rng,
            store,
            bin,
            guards,
            helm4,
            bases,
            encoded: Default::default(),
            log: Vec::new(),
            seed,
            writer: None,
            _books: books,
            runtime,
        }
    }

    pub(super) fn fail(&self, what: &str) -> ! {
        let tail = self.log.iter().rev().take(40).rev().cloned().collect::<Vec<_>>().join("\n");
        panic!(
            "seed {} (HELM_FLOWS_SEED={} cargo test --test in_process helm_flows::), {}: {what}\nlast steps:\n{tail}",
            self.seed,
            self.seed,
            if self.helm4 { "Helm 4" } else { "Helm 3" }
        );
    }

    /// Delivers some of each replica's pending watch events, each replica's watch as far as its
    /// own random lag: in the order they were written, as the API server's watch of one resource
    /// type sends them (its watch cache follows etcd's revisions; the fence and "A view that
    /// lags" rest on it).
    pub(super) fn deliver_some(&mut self) {
        for g in 0..self.guards.len() {
            let count = self.rng.usize(..=self.guards[g].watch.len());
            for _ in 0..count {
                let guard = &mut self.guards[g];
                let pending = guard.watch.pop_front().unwrap();
                guard.feed.apply(guard.admission.index(), pending);
            }
        }
    }

    /// Delivers every pending watch event to every replica: the watches caught up, as they are
    /// by the time a person's next command arrives.
    pub(super) fn deliver_all(&mut self) {
        for guard in &mut self.guards {
            while let Some(pending) = guard.watch.pop_front() {
                guard.feed.apply(guard.admission.index(), pending);
            }
        }
    }

    fn broadcast(&mut self, object: &Value, deleted: bool) {
        for guard in &mut self.guards {
            let partial = meta(object).into_response_partial::<Secret>();
            guard.watch.push_back(if deleted { Event::Delete(partial) } else { Event::Apply(partial) });
        }
    }

    /// Sends a review to a random replica; its verdict (allowed, reason, message).
    pub(super) fn review(&mut self, review: &Value) -> (bool, String, String) {
        if self.rng.bool() {
            self.deliver_some();
        }
        let replica = self.rng.usize(..self.guards.len());
        let review = match self.writer {
            Some((user, groups)) => &as_user(review.clone(), user, groups),
            None => review,
        };
        let body = serde_json::to_vec(review).unwrap();
        let request = admission_review::parse(&body).unwrap();
        let reviewed =
            self.runtime.block_on(self.guards[replica].admission.review(Webhook::Validate, request));
        let response = reviewed.response;
        let reason = response.audit_annotations.get("reason").cloned().unwrap_or_default();
        (response.allowed, reason, response.result.message)
    }

    /// The record Helm writes for this revision and status (payload and labels agree).
    pub(super) fn record(&self, release: usize, revision: u32, status: Status) -> Value {
        let key = (release, revision, status);
        if let Some(record) = self.encoded.borrow().get(&key) {
            return record.clone();
        }
        let (base, payload) = &self.bases[release];
        let mut payload = payload.clone();
        payload["version"] = json!(revision);
        payload["info"]["status"] = json!(status.as_str());
        let mut record = with_release_json(base.clone(), &payload);
        record["metadata"]["name"] = json!(format!("sh.helm.release.v1.{}.v{revision}", RELEASES[release]));
        record["metadata"]["labels"]["version"] = json!(revision.to_string());
        record["metadata"]["labels"]["status"] = json!(status.as_str());
        self.encoded.borrow_mut().insert(key, record.clone());
        record
    }

    pub(super) fn stored(&self, name: &str) -> Value {
        self.store.lock().unwrap().objects[name].clone()
    }

    pub(super) fn history(&self, release: usize) -> Vec<(u32, Status, String)> {
        self.store.lock().unwrap().history(RELEASES[release])
    }

    /// Helm's storage `Create`.
    pub(super) fn create(&mut self, release: usize, revision: u32, status: Status) -> Result<(), Refused> {
        let object = self.record(release, revision, status);
        self.log.push(format!("  CREATE {} {status}", object["metadata"]["name"].as_str().unwrap()));
        self.create_object(object)
    }

    /// A CREATE of `object` as it is (stored when the guard approves it).
    pub(super) fn create_object(&mut self, mut object: Value) -> Result<(), Refused> {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let (allowed, reason, message) = self.review(&create_review(&object));
        if !allowed {
            return Err(format!("CREATE {name}: {reason}: {message}"));
        }
        let n = self.store.lock().unwrap().next();
        object["metadata"]["uid"] = json!(format!("uid-{n}"));
        object["metadata"]["resourceVersion"] = json!(n.to_string());
        let created = jiff::Timestamp::from_second(1_800_000_000 + i64::try_from(n).unwrap()).unwrap();
        object["metadata"]["creationTimestamp"] = json!(created.to_string());
        self.store.lock().unwrap().objects.insert(name, object.clone());
        self.broadcast(&object, false);
        Ok(())
    }

    /// Helm's storage `Update`: the payload status and the `status` label together.
    pub(super) fn update(&mut self, name: &str, status: Status) -> Result<(), Refused> {
        let old = self.stored(name);
        let revision: u32 = old["metadata"]["labels"]["version"].as_str().unwrap().parse().unwrap();
        let release = RELEASES.iter().position(|r| old["metadata"]["labels"]["name"] == *r).unwrap();
        let mut new = self.record(release, revision, status);
        for key in ["uid", "resourceVersion", "creationTimestamp"] {
            new["metadata"][key] = old["metadata"][key].clone();
        }
        let from = old["metadata"]["labels"]["status"].as_str().unwrap().to_owned();
        self.log.push(format!("  UPDATE {name} {from} -> {status}"));
        let (allowed, reason, message) = self.review(&update_review(&old, &new));
        if !allowed {
            return Err(format!("UPDATE {name} {from} -> {status}: {reason}: {message}"));
        }
        let n = self.store.lock().unwrap().next();
        new["metadata"]["resourceVersion"] = json!(n.to_string());
        self.store.lock().unwrap().objects.insert(name.to_owned(), new.clone());
        self.broadcast(&new, false);
        Ok(())
    }

    /// A DELETE (Helm's or a hand's); whether it was allowed, and the reason.
    pub(super) fn delete(&mut self, name: &str) -> (bool, String, String) {
        let old = self.stored(name);
        let verdict = self.review(&delete_review(&old));
        self.log.push(format!(
            "  DELETE {name}: {} {}",
            if verdict.0 { "allowed" } else { "refused" },
            verdict.1
        ));
        if verdict.0 {
            self.store.lock().unwrap().objects.remove(name);
            self.broadcast(&old, true);
        }
        verdict
    }

    /// Helm's storage `Delete`, which must pass.
    fn helm_delete(&mut self, name: &str) -> Result<(), Refused> {
        match self.delete(name) {
            (true, ..) => Ok(()),
            (false, reason, message) => Err(format!("DELETE {name}: {reason}: {message}")),
        }
    }
}

/// Helm's actions as storage calls: `pkg/action/{install,upgrade,rollback,uninstall}.go` and
/// `pkg/storage/storage.go` of Helm 3.17.3 and 4.1.4. A step Helm refuses before writing
/// anything (its own preconditions) writes nothing.
impl World {
    pub(super) fn latest(&self, release: usize) -> Option<(u32, Status, String)> {
        self.history(release).last().cloned()
    }

    /// `Storage.Deployed`: the highest revision labelled deployed.
    fn deployed(&self, release: usize) -> Option<(u32, Status, String)> {
        self.history(release).into_iter().rev().find(|(_, status, _)| *status == Status::Deployed)
    }

    /// `Storage.removeLeastRecent(name, max)`, which `Create` calls with `--history-max` - 1.
    fn prune(&mut self, release: usize, history_max: Option<u32>) -> Result<(), Refused> {
        let Some(max) = history_max.map(|m| m as usize - 1) else { return Ok(()) };
        let history = self.history(release);
        if history.len() <= max {
            return Ok(());
        }
        let last_deployed = self.deployed(release).map(|(revision, ..)| revision);
        let mut doomed = Vec::new();
        for (revision, _, name) in &history {
            if history.len() - doomed.len() == max {
                break;
            }
            if last_deployed != Some(*revision) {
                doomed.push(name.clone());
            }
        }
        doomed.iter().try_for_each(|name| self.helm_delete(name))
    }

    /// `Install.Run`: `availableName`, `replaceRelease`, then the new revision.
    fn install(&mut self, release: usize, replace: bool, fail: bool) -> Result<(), Refused> {
        let latest = self.latest(release);
        if let Some((_, status, name)) = &latest {
            let reusable = replace && matches!(status, Status::Uninstalled | Status::Failed);
            if !reusable {
                return Ok(()); // "cannot re-use a name that is still in use"
            }
            if *status != Status::Failed {
                self.update(name, Status::Superseded)?;
            }
        }
        let revision = latest.map_or(1, |(revision, ..)| revision + 1);
        self.create(release, revision, Status::PendingInstall)?;
        let name = format!("sh.helm.release.v1.{}.v{revision}", RELEASES[release]);
        self.update(&name, if fail { Status::Failed } else { Status::Deployed })
    }

    /// `Upgrade.prepareUpgrade` and `performUpgrade`, ending as `ends` says.
    fn upgrade(
        &mut self,
        release: usize,
        ends: UpgradeEnds,
        history_max: Option<u32>,
    ) -> Result<(), Refused> {
        let Some((last, last_status, last_name)) = self.latest(release) else { return Ok(()) };
        if last_status.is_pending() {
            return Ok(()); // "another operation is in progress"
        }
        let (current, current_status) = if last_status == Status::Deployed {
            (last_name, last_status)
        } else if let Some((_, status, deployed)) = self.deployed(release) {
            (deployed, status)
        } else if matches!(last_status, Status::Failed | Status::Superseded) {
            (last_name, last_status)
        } else {
            return Ok(()); // "has no deployed releases"
        };
        self.prune(release, history_max)?;
        let revision = last + 1;
        self.create(release, revision, Status::PendingUpgrade)?;
        let name = format!("sh.helm.release.v1.{}.v{revision}", RELEASES[release]);
        match ends {
            UpgradeEnds::Deployed => {
                self.update(&current, Status::Superseded)?;
                self.update(&name, Status::Deployed)
            }
            UpgradeEnds::Failed { atomic } => {
                // `--wait` gave up: `recordRelease(originalRelease)`, unchanged, then
                // `failRelease`.
                self.update(&current, current_status)?;
                self.update(&name, Status::Failed)?;
                if atomic {
                    return self.rollback(release, revision - 1, false, history_max);
                }
                Ok(())
            }
            UpgradeEnds::Killed => Ok(()),
        }
    }

    /// `Rollback.Run` to `target`.
    fn rollback(
        &mut self,
        release: usize,
        target: u32,
        fail: bool,
        history_max: Option<u32>,
    ) -> Result<(), Refused> {
        let Some((last, current_status, current)) = self.latest(release) else { return Ok(()) };
        if !self.history(release).iter().any(|(revision, ..)| *revision == target) {
            return Ok(()); // "release has no N version"
        }
        self.prune(release, history_max)?;
        let revision = last + 1;
        self.create(release, revision, Status::PendingRollback)?;
        let name = format!("sh.helm.release.v1.{}.v{revision}", RELEASES[release]);
        if fail {
            // `--wait` gave up: the current release recorded unchanged, the target failed.
            self.update(&current, current_status)?;
            return self.update(&name, Status::Failed);
        }
        for (_, status, deployed) in self.history(release) {
            if status == Status::Deployed {
                self.update(&deployed, Status::Superseded)?;
            }
        }
        self.update(&name, Status::Deployed)
    }

    /// `Uninstall.Run`: mark the latest, purge every record from the oldest up, or keep them.
    fn uninstall(&mut self, release: usize, keep_history: bool) -> Result<(), Refused> {
        let history = self.history(release);
        let Some((_, status, latest)) = history.last().cloned() else { return Ok(()) };
        if status != Status::Uninstalled {
            self.update(&latest, Status::Uninstalling)?;
        } else if keep_history {
            return Ok(()); // "already deleted"
        }
        if !keep_history {
            return history.iter().try_for_each(|(_, _, name)| self.helm_delete(name));
        }
        self.update(&latest, Status::Uninstalled)?;
        if self.helm4 {
            for (_, status, deployed) in self.history(release) {
                if status == Status::Deployed {
                    self.update(&deployed, Status::Superseded)?;
                }
            }
        }
        Ok(())
    }

    /// Runs one step; a refusal of Helm's own write fails the test, a hand deletion is checked
    /// against the rules.
    pub(super) fn step(&mut self, op: &HelmOp) {
        self.log.push(format!("{op:?}"));
        let outcome = match *op {
            HelmOp::Install { release, replace, fail } => self.install(release, replace, fail),
            HelmOp::Upgrade { release, install, fail, atomic, history_max } => {
                let absent_or_uninstalled =
                    self.latest(release).is_none_or(|(_, status, _)| status == Status::Uninstalled);
                let ends = if fail { UpgradeEnds::Failed { atomic } } else { UpgradeEnds::Deployed };
                if install && absent_or_uninstalled {
                    self.install(release, true, fail)
                } else {
                    self.upgrade(release, ends, history_max)
                }
            }
            HelmOp::Rollback { release, pick, fail } => {
                let history = self.history(release);
                match history.get(pick % history.len().max(1)) {
                    Some(&(target, ..)) => self.rollback(release, target, fail, Some(10)),
                    None => Ok(()),
                }
            }
            HelmOp::Uninstall { release, keep_history } => self.uninstall(release, keep_history),
            HelmOp::Reinstall { release } => {
                self.uninstall(release, false).and_then(|()| self.install(release, false, false))
            }
            HelmOp::KilledUpgrade { release } => self.upgrade(release, UpgradeEnds::Killed, None),
            HelmOp::Repair { release, delete } => self.repair(release, delete),
            HelmOp::HandDelete { release, pick } => {
                self.hand_delete(release, pick);
                Ok(())
            }
            HelmOp::FleetForget { release } => self.as_writer(FLEET_AGENT, |w| w.fleet_forget(release)),
            HelmOp::FleetFailedRollback { release } => {
                self.as_writer(FLEET_AGENT, |w| w.fleet_failed_rollback(release))
            }
            HelmOp::FluxUnlock { release } => self.as_writer(FLUX, |w| w.unlock(release)),
            HelmOp::MapKubeApis { release } => self.as_writer(KLIPPER, |w| w.map_kube_apis(release)),
        };
        if let Err(refused) = outcome {
            self.fail(&format!("the guard refused a write of Helm's own: {refused}"));
        }
    }

    /// Runs `writes` as `writer`.
    fn as_writer(
        &mut self,
        writer: (&'static str, &'static [&'static str]),
        writes: impl FnOnce(&mut World) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        self.writer = Some(writer);
        let outcome = writes(self);
        self.writer = None;
        outcome
    }

    /// Fleet's `deleteHistory`: `Releases.Delete` of every record in the order the API lists
    /// them (by object name: `v1`, `v10`, `v2`, ...).
    fn fleet_forget(&mut self, release: usize) -> Result<(), Refused> {
        let mut names: Vec<String> = self.history(release).into_iter().map(|(.., name)| name).collect();
        names.sort();
        names.iter().try_for_each(|name| self.helm_delete(name))
    }

    /// Fleet's drift correction of a deployed release whose rollback fails applying its manifest
    /// (Helm 4.1 `rollback.go` 227-241, Fleet's `MaxHelmHistory` 2), then `removeFailedRollback`.
    fn fleet_failed_rollback(&mut self, release: usize) -> Result<(), Refused> {
        let Some((last, Status::Deployed, current)) = self.latest(release) else { return Ok(()) };
        self.prune(release, Some(2))?;
        self.create(release, last + 1, Status::PendingRollback)?;
        let failed = format!("sh.helm.release.v1.{}.v{}", RELEASES[release], last + 1);
        self.update(&current, Status::Superseded)?;
        self.update(&failed, Status::Failed)?;
        self.helm_delete(&failed)?;
        self.update(&current, Status::Deployed)
    }

    /// Flux's unlock of a pending latest: marked failed.
    fn unlock(&mut self, release: usize) -> Result<(), Refused> {
        match self.latest(release) {
            Some((_, status, name)) if status.is_pending() => self.update(&name, Status::Failed),
            _ => Ok(()),
        }
    }

    /// helm-mapkubeapis (`pkg/v3/release.go` `updateRelease`): the latest, whatever its status,
    /// superseded, then the mapped revision stored deployed.
    fn map_kube_apis(&mut self, release: usize) -> Result<(), Refused> {
        let Some((last, _, name)) = self.latest(release) else { return Ok(()) };
        self.update(&name, Status::Superseded)?;
        self.create(release, last + 1, Status::Deployed)
    }

    /// A stuck pending latest: marked failed (`helm set-status`), or deleted when that leaves a
    /// deployed revision (or nothing) as the latest.
    fn repair(&mut self, release: usize, delete: bool) -> Result<(), Refused> {
        let history = self.history(release);
        let Some((_, status, name)) = history.last().cloned() else { return Ok(()) };
        if !status.is_pending() {
            return Ok(());
        }
        let previous = history.iter().rev().nth(1).map(|(_, status, _)| *status);
        if delete && matches!(previous, None | Some(Status::Deployed)) {
            return self.helm_delete(&name);
        }
        self.update(&name, Status::Failed)
    }

    fn hand_delete(&mut self, release: usize, pick: usize) {
        let history = self.history(release);
        let Some((revision, status, name)) = history.get(pick % history.len().max(1)).cloned() else {
            return;
        };
        let expected = deletion_allowed(&history, revision);
        let (allowed, reason, message) = self.delete(&name);
        if allowed != expected {
            let statuses: Vec<String> = history.iter().map(|(r, s, _)| format!("v{r} {s}")).collect();
            self.fail(&format!(
                "deleting v{revision} ({status}) of [{}] by hand: the rules say {}, the guard {} it ({reason}: {message})",
                statuses.join(", "),
                if expected { "allow" } else { "refuse" },
                if allowed { "allowed" } else { "refused" },
            ));
        }
    }
}

fn run(seed: u64, steps: usize) {
    let mut world = World::new(seed);
    for _ in 0..steps {
        let op = random_op(&mut world.rng, RELEASES.len());
        world.step(&op);
        // Between steps the watches catch up a little, or not at all.
        if world.rng.u8(..4) == 0 {
            world.deliver_some();
        }
    }
}

#[test]
fn every_helm_flow_passes_through_two_replicas_with_lagging_watches() {
    for seed in seeds(1, 48) {
        run(seed, 160);
    }
}

/// Helm's writes as the model makes them and as real Helm made them (the AdmissionReviews of
/// tests/fixtures/admission, recorded from a real API server): (operation, revision, status
/// before, status after).
type Write = (String, u32, String, String);

fn recorded_writes(scenario: &str) -> Vec<Write> {
    let mut files: Vec<_> = std::fs::read_dir(fixture_path(&format!("admission/{scenario}")))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let status = |object: &Value| {
        if object.is_null() {
            String::new()
        } else {
            release_json(object)["info"]["status"].as_str().unwrap().to_owned()
        }
    };
    files
        .iter()
        .map(|path| {
            let review: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            let request = &review["request"];
            let name = request["name"].as_str().unwrap();
            let revision = name.rsplit_once(".v").unwrap().1.parse().unwrap();
            let operation = request["operation"].as_str().unwrap().to_owned();
            let (before, after) = match operation.as_str() {
                "DELETE" => (String::new(), String::new()),
                _ => (status(&request["oldObject"]), status(&request["object"])),
            };
            (operation, revision, before, after)
        })
        .collect()
}

/// The writes the model logged since `from`.
fn model_writes(world: &World, from: usize) -> Vec<Write> {
    world.log[from..]
        .iter()
        .filter_map(|line| line.strip_prefix("  "))
        .map(|line| {
            let words: Vec<&str> = line.split([' ', ':']).filter(|w| !w.is_empty()).collect();
            let revision = words[1].rsplit_once(".v").unwrap().1.parse().unwrap();
            let (before, after) = match words[0] {
                "CREATE" => (String::new(), words[2].to_owned()),
                "UPDATE" => (words[2].to_owned(), words[4].to_owned()),
                _ => (String::new(), String::new()),
            };
            (words[0].to_owned(), revision, before, after)
        })
        .collect()
}

/// The model is held to what real Helm 3 and 4 sent: the same writes in the same order for an
/// install, upgrades, an uninstall's purge and an upgrade whose `--wait` gave up (which records
/// the deployed revision unchanged before failing the new one).
#[test]
fn the_model_writes_what_real_helm_wrote() {
    let install = HelmOp::Install { release: 0, replace: false, fail: false };
    let upgrade =
        |fail| HelmOp::Upgrade { release: 0, install: false, fail, atomic: false, history_max: None };
    let uninstall = HelmOp::Uninstall { release: 0, keep_history: false };
    // (scenario, Helm 4, the steps before the recording began, the steps recorded)
    let scenarios: [(&str, bool, Vec<HelmOp>, Vec<HelmOp>); 5] = [
        ("05-helm3-install-upgrade", false, vec![], vec![install.clone(), upgrade(false)]),
        ("07-configmap-driver-install-upgrade", false, vec![], vec![install.clone(), upgrade(false)]),
        ("01-helm4-install-upgrade", true, vec![install.clone()], vec![upgrade(false), upgrade(false)]),
        ("06-helm3-uninstall-purge", false, vec![install.clone(), upgrade(false)], vec![uninstall]),
        (
            "12-failed-upgrade",
            false,
            vec![install.clone(), upgrade(false), upgrade(false)],
            vec![upgrade(true)],
        ),
    ];
    for (scenario, helm4, before, recorded) in scenarios {
        let mut world = World::new(1);
        world.helm4 = helm4;
        for op in &before {
            world.step(op);
        }
        let from = world.log.len();
        for op in &recorded {
            world.step(op);
        }
        assert_eq!(model_writes(&world, from), recorded_writes(scenario), "{scenario}");
    }
}

/// The flows the issue found broken, as fixed sequences (each a regression on its own).
#[test]
fn the_reproductions_of_the_flows_that_broke() {
    let flows: [&[HelmOp]; 3] = [
        // Uninstall soon after a reinstall (the first incarnation's claims hid the second's
        // records of the same names).
        &[
            HelmOp::Install { release: 0, replace: false, fail: false },
            HelmOp::Upgrade { release: 0, install: false, fail: false, atomic: false, history_max: Some(2) },
            HelmOp::Upgrade { release: 0, install: false, fail: false, atomic: false, history_max: Some(2) },
            HelmOp::Upgrade { release: 0, install: false, fail: false, atomic: false, history_max: Some(2) },
            HelmOp::Uninstall { release: 0, keep_history: false },
            HelmOp::Install { release: 0, replace: false, fail: false },
            HelmOp::Upgrade { release: 0, install: false, fail: false, atomic: false, history_max: Some(2) },
            HelmOp::Upgrade { release: 0, install: false, fail: false, atomic: false, history_max: Some(2) },
            HelmOp::Uninstall { release: 0, keep_history: false },
        ],
        // `install --replace` after `uninstall --keep-history`.
        &[
            HelmOp::Install { release: 1, replace: false, fail: false },
            HelmOp::Uninstall { release: 1, keep_history: true },
            HelmOp::Install { release: 1, replace: true, fail: false },
        ],
        // `upgrade --install` after `uninstall --keep-history`.
        &[
            HelmOp::Install { release: 2, replace: false, fail: false },
            HelmOp::Upgrade { release: 2, install: false, fail: false, atomic: false, history_max: None },
            HelmOp::Uninstall { release: 2, keep_history: true },
            HelmOp::Upgrade { release: 2, install: true, fail: false, atomic: false, history_max: None },
        ],
    ];
    for seed in 0..16 {
        for flow in flows {
            let mut world = World::new(seed);
            for op in flow {
                world.step(op);
            }
            let release = flow[0].release();
            let latest = world.latest(release).map(|(_, status, _)| status);
            assert!(matches!(latest, None | Some(Status::Deployed)), "seed {seed}: {flow:?} ends {latest:?}");
        }
    }
}
