//! Kubernetes Events (events.k8s.io/v1) on records whose DELETE or UPDATE was refused or warned,
//! so that `kubectl describe secret sh.helm.release.v1.web.v3` and `kubectl get events` show
//! them beside the object.
//!
//! A verdict never waits for an Event: it offers a [`Notice`] to a bounded queue and goes on; a
//! full queue drops the notice and counts it. One task writes the Events, each call bounded in
//! time. Repeats on one object (a client retrying) become one Event series, written at most once
//! per [`WRITE_INTERVAL`], not one Event each.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

use crate::tally::Tally;

/// What an Event says about one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    /// The object's namespace.
    pub namespace: String,
    /// The object's API version: `v1` for records, `helm.cattle.io/v1` for HelmCharts.
    pub api_version: String,
    /// `Secret`, `ConfigMap` or `HelmChart`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's uid: `kubectl describe` selects Events by it.
    pub uid: Option<String>,
    /// `Delete` or `Update`.
    pub action: String,
    /// The reason code in the Events' CamelCase (`LastDeployedRevision`).
    pub reason: String,
    /// Who, the decision and the message's first sentence.
    pub note: String,
    /// The watch holds the object under this uid: it is stored as the review said, and no GET
    /// need show it (`is_stored`).
    pub watched: bool,
    /// `Normal` for what a trusted writer does in its normal course (a forgetter forgetting a
    /// release), `Warning` for the rest: refusals, warnings, overrides, opt-outs, rewrites.
    pub type_: &'static str,
}

impl Notice {
    /// The same notice on the HelmChart that manages the object's release, so that `kubectl
    /// describe helmchart` shows it too; the note names the object.
    pub(crate) fn about_chart(&self, chart: &super::helmcharts::HelmChart) -> Notice {
        Notice {
            namespace: chart.namespace.clone(),
            api_version: super::helmcharts::API_VERSION.to_owned(),
            kind: super::helmcharts::KIND.to_owned(),
            name: chart.name.clone(),
            uid: chart.uid.clone(),
            action: self.action.clone(),
            reason: self.reason.clone(),
            note: format!("{} {}/{}: {}", self.kind, self.namespace, self.name, self.note),
            watched: false,
            type_: self.type_,
        }
    }
}

/// The verdicts' end of the queue. Cloning shares the queue.
#[derive(Debug, Clone)]
pub struct EventQueue {
    sender: mpsc::Sender<Notice>,
    dropped: Tally,
}

impl EventQueue {
    /// A queue of `capacity` notices; `dropped` counts those offered to a full queue.
    pub(crate) fn new(capacity: usize, dropped: Tally) -> (EventQueue, mpsc::Receiver<Notice>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        (EventQueue { sender, dropped }, receiver)
    }

    /// Never waits: a full (or closed) queue drops the notice.
    pub(crate) fn offer(&self, notice: Notice) {
        if self.sender.try_send(notice).is_err() {
            self.dropped.inc();
        }
    }
}

/// One object's Events are written at most this often; repeats in between add to the count.
pub(crate) const WRITE_INTERVAL: Duration = Duration::from_secs(10);
/// A series older than this ends; the next repeat starts a new Event (as the API server's own
/// event recorder does, so an old Event's TTL does not hide a new one).
pub(crate) const SERIES_LIFETIME: Duration = Duration::from_secs(30 * 60);
/// Series remembered at once; the oldest is forgotten first.
pub(crate) const MAX_SERIES: usize = 4096;

/// Series are keyed by object (its uid too: a record reinstalled under the same name is another
/// object, with Events of its own) and reason: a different refusal of one object is another Event.
type SeriesKey = (String, String, String, Option<String>, String);

#[derive(Debug, Clone)]
struct Series {
    event: String,
    started: Instant,
    written: Instant,
    /// Occurrences, and how many of them the API server has.
    count: i32,
    written_count: i32,
}

/// What to write for a notice or at a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// A new Event with this name.
    Create {
        /// The Event's name.
        event: String,
    },
    /// The series of an existing Event reached this count.
    Count {
        /// The Event's namespace.
        namespace: String,
        /// The Event's name.
        event: String,
        /// The series' count.
        count: i32,
    },
}

/// The series of every object that recently had an Event: pure bookkeeping, no I/O.
#[derive(Debug, Default)]
pub(crate) struct SeriesBook {
    series: HashMap<SeriesKey, Series>,
}

impl SeriesBook {
    /// Records an occurrence; what to write now, if anything.
    pub(crate) fn note(&mut self, notice: &Notice, now: Instant, stamp: u128) -> Option<Write> {
        let key = (
            notice.namespace.clone(),
            notice.kind.clone(),
            notice.name.clone(),
            notice.uid.clone(),
            notice.reason.clone(),
        );
        match self.series.get_mut(&key) {
            Some(series) if now.duration_since(series.started) < SERIES_LIFETIME => {
                series.count = series.count.saturating_add(1);
                if now.duration_since(series.written) < WRITE_INTERVAL {
                    return None;
                }
                series.written = now;
                series.written_count = series.count;
                Some(Write::Count {
                    namespace: notice.namespace.clone(),
                    event: series.event.clone(),
                    count: series.count,
                })
            }
            _ => {
                if self.series.len() >= MAX_SERIES && !self.series.contains_key(&key) {
                    let oldest = self.series.iter().min_by_key(|(_, s)| s.written).map(|(k, _)| k.clone());
                    if let Some(oldest) = oldest {
                        self.series.remove(&oldest);
                    }
                }
                // As the API server's recorder names Events: the object, then a unique suffix.
                let object: String = notice.name.chars().take(200).collect();
                let event = format!("{object}.{stamp:x}");
                let series =
                    Series { event: event.clone(), started: now, written: now, count: 1, written_count: 1 };
                self.series.insert(key, series);
                Some(Write::Create { event })
            }
        }
    }

    /// Counts not yet written whose interval has passed; forgets ended series.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Write> {
        self.series.retain(|_, s| now.duration_since(s.started) < SERIES_LIFETIME);
        let mut writes = Vec::new();
        for ((namespace, ..), series) in self.series.iter_mut() {
            if series.count > series.written_count && now.duration_since(series.written) >= WRITE_INTERVAL {
                series.written = now;
                series.written_count = series.count;
                writes.push(Write::Count {
                    namespace: namespace.clone(),
                    event: series.event.clone(),
                    count: series.count,
                });
            }
        }
        writes
    }
}

/// Writes Events until the queue closes. `failed` counts Events the API did not take.
pub(crate) async fn write_events(
    client: kube::Client,
    mut notices: mpsc::Receiver<Notice>,
    instance: String,
    failed: Tally,
) {
    const CALL_TIMEOUT: Duration = Duration::from_secs(5);
    let mut book = SeriesBook::default();
    let mut ticker = tokio::time::interval(WRITE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (writes, notice) = tokio::select! {
            notice = notices.recv() => {
                let Some(notice) = notice else { return };
                let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
                (book.note(&notice, Instant::now(), stamp).into_iter().collect::<Vec<_>>(), Some(notice))
            }
            _ = ticker.tick() => (book.due(Instant::now()), None),
        };
        for write in writes {
            let call = async {
                match &write {
                    Write::Create { event } => {
                        let Some(notice) = &notice else { return Ok(()) };
                        if !is_stored(&client, notice).await {
                            tracing::info!(object = %notice.name, namespace = %notice.namespace, "no Event: the object it is about is not stored as the review said");
                            return Ok(());
                        }
                        let api = Api::<Event>::namespaced(client.clone(), &notice.namespace);
                        api.create(&PostParams::default(), &new_event(notice, event, &instance))
                            .await
                            .map(drop)
                    }
                    Write::Count { namespace, event, count } => {
                        let api = Api::<Event>::namespaced(client.clone(), namespace);
                        let series = serde_json::json!({"series": {
                            "count": count,
                            "lastObservedTime": MicroTime(jiff::Timestamp::now()),
                        }});
                        api.patch(event, &PatchParams::default(), &Patch::Merge(&series)).await.map(drop)
                    }
                }
            };
            match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    failed.inc();
                    tracing::warn!(%error, "could not write an Event");
                }
                Err(_) => {
                    failed.inc();
                    tracing::warn!("writing an Event timed out");
                }
            }
        }
    }
}

/// Whether the object an Event would be about is stored, with the uid the review gave it: an
/// Event is written about what the cluster holds only, so that a review the API server never
/// sent (anyone on the pod network can POST one) about an object it names writes none. A
/// HelmChart is one the watch brought; a creation's object is not stored yet, and is let be.
async fn is_stored(client: &kube::Client, notice: &Notice) -> bool {
    // A creation's object is not stored yet when it is judged.
    if notice.action == "Create" || notice.watched {
        return true;
    }
    let Some(uid) = notice.uid.as_deref() else { return notice.kind == "HelmChart" };
    if !matches!(notice.kind.as_str(), "Secret" | "ConfigMap" | "Namespace") {
        return true;
    }
    let stored = super::stored_identity(client, &notice.kind, &notice.namespace, &notice.name).await;
    matches!(stored, Ok(Some((Some(stored), _))) if stored == uid)
}

fn new_event(notice: &Notice, name: &str, instance: &str) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(notice.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(jiff::Timestamp::now())),
        action: Some(notice.action.clone()),
        reason: Some(notice.reason.clone()),
        note: Some(notice.note.chars().take(1000).collect()),
        type_: Some(notice.type_.to_owned()),
        reporting_controller: Some("helm-guard.io/helm-guard".to_owned()),
        reporting_instance: Some(instance.chars().take(128).collect()),
        regarding: Some(ObjectReference {
            api_version: Some(notice.api_version.clone()),
            kind: Some(notice.kind.clone()),
            // A cluster-scoped object has no namespace of its own.
            namespace: (notice.kind != "Namespace").then(|| notice.namespace.clone()),
            name: Some(notice.name.clone()),
            uid: notice.uid.clone(),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(name: &str, reason: &str) -> Notice {
        Notice {
            namespace: "demo".into(),
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: name.into(),
            uid: None,
            action: "Delete".into(),
            reason: reason.into(),
            note: "denied".into(),
            watched: false,
            type_: "Warning",
        }
    }

    #[test]
    fn retries_become_one_series_written_at_most_once_per_interval() {
        let mut book = SeriesBook::default();
        let t0 = Instant::now();
        let first = book.note(&notice("v3", "LastDeployedRevision"), t0, 0x10);
        assert_eq!(first, Some(Write::Create { event: "v3.10".into() }));
        for i in 1..=5 {
            assert_eq!(
                book.note(&notice("v3", "LastDeployedRevision"), t0 + Duration::from_secs(i), 0x11),
                None
            );
        }
        assert_eq!(book.due(t0 + Duration::from_secs(5)), vec![], "not before the interval");
        let due = book.due(t0 + WRITE_INTERVAL);
        assert_eq!(due, vec![Write::Count { namespace: "demo".into(), event: "v3.10".into(), count: 6 }]);
        assert_eq!(book.due(t0 + WRITE_INTERVAL * 3), vec![], "nothing new, nothing written");
        let later = book.note(&notice("v3", "LastDeployedRevision"), t0 + WRITE_INTERVAL * 3, 0x12);
        assert_eq!(later, Some(Write::Count { namespace: "demo".into(), event: "v3.10".into(), count: 7 }));
    }

    #[test]
    fn another_object_or_reason_is_another_event_and_old_series_end() {
        let mut book = SeriesBook::default();
        let t0 = Instant::now();
        assert!(matches!(book.note(&notice("v3", "A"), t0, 1), Some(Write::Create { .. })));
        assert!(matches!(book.note(&notice("v2", "A"), t0, 2), Some(Write::Create { .. })));
        assert!(matches!(book.note(&notice("v3", "B"), t0, 3), Some(Write::Create { .. })));
        // The same name reused by a new object (a reinstall): its own Event, not the old one's count.
        let reinstalled = Notice { uid: Some("new-uid".into()), ..notice("v3", "A") };
        assert_eq!(book.note(&reinstalled, t0, 5), Some(Write::Create { event: "v3.5".into() }));
        let after = t0 + SERIES_LIFETIME;
        assert_eq!(book.note(&notice("v3", "A"), after, 4), Some(Write::Create { event: "v3.4".into() }));
    }

    #[test]
    fn the_book_is_bounded_and_forgets_the_longest_unwritten_first() {
        let mut book = SeriesBook::default();
        let t0 = Instant::now();
        let at = |i: usize| t0 + Duration::from_millis(i as u64);
        for i in 0..MAX_SERIES {
            book.note(&notice(&format!("r{i}"), "A"), at(i), i as u128);
        }
        // r0, the oldest, occurs again within the write interval: counted, not written, so it is
        // still the series written longest ago (what is evicted is what the API server has had
        // longest, not what was seen last).
        assert_eq!(book.note(&notice("r0", "A"), at(MAX_SERIES), 0), None);
        for i in MAX_SERIES..MAX_SERIES + 10 {
            book.note(&notice(&format!("r{i}"), "A"), at(i), i as u128);
        }
        assert_eq!(book.series.len(), MAX_SERIES);
        let known = |name: &str| book.series.keys().any(|(_, _, object, ..)| object == name);
        // The ten oldest by their last write went: r0 to r9, the newest stayed.
        assert!((0..10).all(|i| !known(&format!("r{i}"))), "the oldest are forgotten");
        assert!(known("r10") && known(&format!("r{}", MAX_SERIES + 9)), "the newer are kept");
        // A forgotten series that occurs again starts a new Event instead of counting the old one.
        let again = book.note(&notice("r1", "A"), at(MAX_SERIES + 20), 0xff);
        assert_eq!(again, Some(Write::Create { event: "r1.ff".into() }));
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let dropped = Tally::default();
        let (queue, _receiver) = EventQueue::new(1, dropped.clone());
        queue.offer(notice("a", "A"));
        queue.offer(notice("b", "A"));
        queue.offer(notice("c", "A"));
        assert_eq!(dropped.get(), 2);
    }
}
