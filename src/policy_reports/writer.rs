//! The live writer: one replica at a time (the holder of a Lease) keeps a report per namespace
//! in step with the index, in every report API the cluster serves.
//!
//! Each round (every `debounce`) classifies only the namespaces whose records changed since the
//! last one (the index notes them in its [`crate::cluster::changes::ChangedNamespaces`]) and those holding a pending
//! release that may have become stuck since, and writes a report only when its content differs
//! from what was written: a result keeps the time it was first seen, so an unchanged release
//! costs no write. A full round (on taking the Lease, when an API appears, and every `resync`)
//! lists what is written, rewrites what differs (a report edited or deleted by hand) and deletes
//! reports of namespaces without releases. Writes are server-side applies by the field manager
//! `helm-guard`, so they are idempotent and two writers briefly overlapping (a Lease changing
//! hands) write the same thing.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::build::{self, POLICY, ReportApi};
use crate::cluster::changes::NAMESPACES_CHANGED;
use crate::cluster::{ReleaseIndex, helmcharts};
use crate::policy::Mode;
use crate::release::Status;
use crate::release::scan::from_facts;
use crate::tally::Tally;

/// The Lease whose holder writes the reports.
pub(crate) const LEASE_NAME: &str = "helm-guard-policy-reports";
/// Selects the reports the guard wrote.
pub(crate) const MANAGED_BY: &str = "app.kubernetes.io/managed-by=helm-guard";
/// How long the Lease holds without renewal (seconds); the holder renews well before.
const LEASE_SECONDS: u64 = 15;
/// Writes under way at once.
const WRITES_AT_ONCE: usize = 8;
/// How long after a failed Lease setup it is tried again.
const RETRY_LEASE: Duration = Duration::from_secs(10);

/// Which report APIs the guard writes (`--policy-reports`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum ApiChoice {
    /// Every API the cluster serves (both when both CRDs are installed); none: no reports.
    #[default]
    Auto,
    /// `wgpolicyk8s.io/v1alpha2` PolicyReports only.
    Wgpolicyk8s,
    /// `openreports.io/v1alpha1` Reports only.
    Openreports,
    /// No reports.
    Off,
}

impl ApiChoice {
    /// The APIs this choice would write, if served.
    pub(crate) fn wanted(self) -> &'static [ReportApi] {
        match self {
            ApiChoice::Auto => &ReportApi::ALL,
            ApiChoice::Wgpolicyk8s => &[ReportApi::WgPolicy],
            ApiChoice::Openreports => &[ReportApi::OpenReports],
            ApiChoice::Off => &[],
        }
    }
}

/// How the writer runs.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Which APIs.
    pub apis: ApiChoice,
    /// How often changes are written (a report lags the index by at most this and one write).
    pub debounce: Duration,
    /// How often every report is read back and put right (hand edits and deletions).
    pub resync: Duration,
    /// How often the report APIs are looked for (a CRD installed later is picked up).
    pub rediscover: Duration,
    /// Where the writer's Lease lives (the guard's namespace).
    pub lease_namespace: String,
    /// This replica.
    pub identity: String,
    /// A pending revision older than this is stuck.
    pub stuck_after_secs: i64,
    /// The guard's global mode: namespaces labelled weaker are reported.
    pub default_mode: Mode,
    /// The HelmCharts protected by name (`--protected-chart`): the others that would reinstall
    /// their release on failure are reported.
    pub protected_charts: Vec<String>,
    /// The recycle bin's namespace, when copies are kept.
    pub bin_namespace: Option<String>,
    /// The most namespace reports written (past it, namespaces in name order are left out).
    pub max_reports: usize,
}

/// What the writer did, for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct WriterStats {
    /// Reports written (created or changed).
    pub written: Tally,
    /// Reports deleted (their namespace has no release left).
    pub deleted: Tally,
    /// API calls that failed (retried next round).
    pub failed: Tally,
}

/// Keeps the reports while this replica holds the Lease; runs until the runtime stops.
pub(crate) async fn run(
    client: kube::Client,
    index: Arc<ReleaseIndex>,
    writers: Option<Arc<crate::cluster::writers::Writers>>,
    options: WriterOptions,
    stats: WriterStats,
) {
    if options.apis == ApiChoice::Off {
        return;
    }
    index.changes().track();
    let manager = loop {
        let built = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
            .with_namespace(options.lease_namespace.clone())
            .with_identity(options.identity.clone())
            .with_duration(LEASE_SECONDS)
            .with_grace(LEASE_SECONDS / 3)
            .with_field_manager(POLICY)
            .build()
            .await;
        match built {
            Ok(manager) => break manager,
            Err(error) => {
                tracing::warn!(%error, lease = LEASE_NAME, "cannot take part in electing the PolicyReport writer; retrying");
                tokio::time::sleep(RETRY_LEASE).await;
            }
        }
    };
    let (mut leading, _task) = manager.watch().await;
    loop {
        if !*leading.borrow_and_update() {
            if leading.changed().await.is_err() {
                return;
            }
            continue;
        }
        tracing::info!(lease = LEASE_NAME, "this replica writes the PolicyReports");
        let mut writer = Writer::new(client.clone(), index.clone(), options.clone(), stats.clone());
        writer.writers.clone_from(&writers);
        tokio::select! {
            _ = leading.changed() => {}
            _ = writer.keep() => {}
        }
        tracing::info!(lease = LEASE_NAME, "this replica no longer writes the PolicyReports");
    }
}

/// A result as written: its content (without its timestamp) and since when it has been so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    content: u64,
    since: i64,
}

/// The writer's memory while it holds the Lease: a few words per release, not the reports.
struct Writer {
    client: kube::Client,
    index: Arc<ReleaseIndex>,
    /// Who wrote each release's pending revision, and whether it runs (`cluster::writers`).
    writers: Option<Arc<crate::cluster::writers::Writers>>,
    options: WriterOptions,
    stats: WriterStats,
    /// The APIs served, as last discovered.
    served: Vec<ReportApi>,
    /// Per namespace (`""`: the cluster report), per release (or cluster result), what was seen.
    seen: BTreeMap<String, BTreeMap<String, Seen>>,
    /// The content of each report as last written or read back, by API and namespace.
    written: BTreeMap<(ReportApi, String), u64>,
    /// Namespaces holding a pending release not yet stuck: classified again every round.
    pending: BTreeSet<String>,
    /// Whether the bound on reports was met (said once).
    capped: bool,
}

impl Writer {
    fn new(
        client: kube::Client,
        index: Arc<ReleaseIndex>,
        options: WriterOptions,
        stats: WriterStats,
    ) -> Writer {
        Writer {
            client,
            index,
            writers: None,
            options,
            stats,
            served: Vec::new(),
            seen: BTreeMap::new(),
            written: BTreeMap::new(),
            pending: BTreeSet::new(),
            capped: false,
        }
    }

    /// Rounds, until the task is dropped (the Lease lost).
    async fn keep(&mut self) {
        let mut discovered: Option<Instant> = None;
        let mut synced: Option<Instant> = None;
        let mut absent_logged = false;
        loop {
            let mut full = synced.is_none_or(|at| at.elapsed() >= self.options.resync);
            if discovered.is_none_or(|at| at.elapsed() >= self.options.rediscover) {
                let served = self.discover().await;
                discovered = Some(Instant::now());
                if served.iter().any(|api| !self.served.contains(api)) {
                    tracing::info!(apis = ?served.iter().map(|a| a.as_str()).collect::<Vec<_>>(), "writing release health as PolicyReports");
                    full = true;
                }
                if served.is_empty() && !absent_logged {
                    tracing::info!(wanted = %self.options.apis, "no PolicyReport CRD installed (wgpolicyk8s.io or openreports.io): no reports until one is");
                }
                absent_logged = served.is_empty();
                self.served = served;
            }
            // A view still being listed would delete the reports of namespaces not yet seen.
            if !self.served.is_empty() && self.index.is_ready() {
                if full {
                    synced = Some(Instant::now());
                }
                self.round(full).await;
            }
            tokio::time::sleep(self.options.debounce).await;
        }
    }

    /// The wanted APIs the cluster serves now.
    async fn discover(&self) -> Vec<ReportApi> {
        let mut served = Vec::new();
        for &api in self.options.apis.wanted() {
            let group_version = format!("{}/{}", api.group(), api.version());
            match self.client.list_api_group_resources(&group_version).await {
                Ok(list) if list.resources.iter().any(|r| r.name == api.plural(false)) => served.push(api),
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    // Unknown: keep writing what was served, rather than stop on a blip.
                    tracing::warn!(%error, api = api.as_str(), "cannot tell whether the report API is served");
                    if self.served.contains(&api) {
                        served.push(api);
                    }
                }
            }
        }
        served
    }

    /// One round: what changed (everything when `full`) is classified and written, a chunk of
    /// namespaces at a time with [`WRITES_AT_ONCE`] writes under way.
    async fn round(&mut self, full: bool) {
        let touched = self.index.changes().take();
        if full {
            for api in self.served.clone() {
                self.read_back(api).await;
            }
        }
        let wanted: Option<BTreeSet<String>> =
            (!full).then(|| touched.iter().chain(&self.pending).cloned().collect());
        let now = jiff::Timestamp::now().as_second();
        let releases = crate::cluster::census::releases_in(&self.index, wanted.as_ref());
        let mut namespaces: BTreeSet<String> = releases.keys().cloned().collect();
        namespaces.extend(wanted.unwrap_or_else(|| self.written.keys().map(|(_, ns)| ns.clone()).collect()));
        namespaces.remove(NAMESPACES_CHANGED);
        let mut kept = 0usize;
        let mut jobs = Vec::new();
        for namespace in namespaces {
            let mut results = Vec::new();
            self.pending.remove(&namespace);
            for (key, facts) in releases.get(&namespace).into_iter().flatten() {
                if facts.is_empty() {
                    continue;
                }
                let latest = crate::release::History::new(facts).latest();
                let writer = latest.filter(|(_, status)| status.is_pending()).and_then(|(revision, _)| {
                    let writers = self.writers.as_ref()?;
                    let writer = writers.writer_of(&key.namespace, &key.release, revision)?;
                    Some((writer, writers.judged(key, revision)))
                });
                let report = from_facts(key, facts, now, self.options.stuck_after_secs, writer.as_ref());
                // Only a pending status can become stuck (the classifier's rule).
                if report.status.is_some_and(Status::is_pending) && !report.stuck {
                    self.pending.insert(namespace.clone());
                }
                let mut result = build::release_result(&report);
                if let Some(chart) = self.index.charts().managing(&key.namespace, &key.release) {
                    let chart = json!({"apiVersion": helmcharts::API_VERSION, "kind": helmcharts::KIND,
                        "namespace": chart.namespace, "name": chart.name, "uid": chart.uid});
                    build::add_resource(&mut result, chart);
                }
                results.push((format!("{}/{}", key.release, key.driver.as_str()), result));
            }
            if !results.is_empty() {
                kept += 1;
            }
            if results.is_empty() || kept > self.options.max_reports {
                if kept == self.options.max_reports + 1 && !self.capped {
                    tracing::warn!(max = self.options.max_reports, from = %namespace, "more namespaces with releases than --policy-report-max-reports: the rest (in name order) get no report");
                    self.capped = true;
                }
                jobs.extend(self.removal(&namespace));
            } else {
                jobs.extend(self.writes(Some(&namespace), results, now));
            }
            if jobs.len() >= WRITES_AT_ONCE * 4 {
                self.run(std::mem::take(&mut jobs)).await;
            }
        }
        if full || !touched.is_empty() {
            let results = self.cluster_results().await;
            jobs.extend(self.writes(None, results, now));
        }
        self.run(jobs).await;
    }

    /// What each report of `api` holds now, read back: a report edited by hand no longer
    /// matches what the writer would write and is rewritten; timestamps carry over a restart.
    async fn read_back(&mut self, api: ReportApi) {
        for cluster in [false, true] {
            let listed = match reports_api(self.client.clone(), api, None, cluster)
                .list(&ListParams::default().labels(MANAGED_BY))
                .await
            {
                Ok(listed) => listed,
                Err(error) => {
                    self.stats.failed.inc();
                    tracing::warn!(%error, api = api.as_str(), "cannot list the PolicyReports written");
                    continue;
                }
            };
            self.written
                .retain(|(written_api, namespace), _| *written_api != api || namespace.is_empty() != cluster);
            for report in listed.items {
                let namespace = report.metadata.namespace.clone().unwrap_or_default();
                let results =
                    report.data.get("results").and_then(Value::as_array).cloned().unwrap_or_default();
                let seen = self.seen.entry(namespace.clone()).or_default();
                for result in &results {
                    if let (Some(subject), Some(since)) =
                        (subject(result), result.pointer("/timestamp/seconds").and_then(Value::as_i64))
                    {
                        seen.entry(subject).or_insert(Seen { content: content(result), since });
                    }
                }
                self.written.insert((api, namespace), report_content(&report.data));
            }
        }
    }

    /// The writes that make the report of `namespace` (`None`: the cluster's) say `results`, in
    /// every API served: none where it already does.
    fn writes(&mut self, namespace: Option<&str>, results: Vec<(String, Value)>, now: i64) -> Vec<Job> {
        let slot = namespace.unwrap_or_default().to_owned();
        let seen = self.seen.entry(slot.clone()).or_default();
        let mut next = BTreeMap::new();
        let mut stamped = Vec::with_capacity(results.len());
        for (subject, mut result) in results {
            let content = content(&result);
            let since = seen.get(&subject).filter(|s| s.content == content).map_or(now, |s| s.since);
            next.insert(subject, Seen { content, since });
            build::stamp(&mut result, since);
            stamped.push(result);
        }
        *seen = next;
        let mut jobs = Vec::new();
        for &api in &self.served {
            let report = build::report(api, namespace, stamped.clone());
            let content = report_content(&report);
            if self.written.get(&(api, slot.clone())) != Some(&content) {
                jobs.push(Job { api, slot: slot.clone(), write: Some((report, content)) });
            }
        }
        jobs
    }

    /// The deletions of the reports of a namespace without releases, in every API served.
    fn removal(&mut self, namespace: &str) -> Vec<Job> {
        self.seen.remove(namespace);
        let served = self.served.clone();
        served
            .into_iter()
            .filter(|&api| self.written.remove(&(api, namespace.to_owned())).is_some())
            .map(|api| Job { api, slot: namespace.to_owned(), write: None })
            .collect()
    }

    /// Runs `jobs`, [`WRITES_AT_ONCE`] at a time, and notes what each did; one that failed is
    /// tried again next round.
    async fn run(&mut self, jobs: Vec<Job>) {
        let client = self.client.clone();
        let done: Vec<(Job, Result<(), kube::Error>)> = futures::stream::iter(jobs)
            .map(|job| {
                let client = client.clone();
                async move {
                    let outcome = job.run(client).await;
                    (job, outcome)
                }
            })
            .buffer_unordered(WRITES_AT_ONCE)
            .collect()
            .await;
        for (job, outcome) in done {
            let key = (job.api, job.slot.clone());
            match (outcome, job.write) {
                (Ok(()), Some((_, content))) => {
                    self.stats.written.inc();
                    self.written.insert(key, content);
                }
                (Ok(()), None) => self.stats.deleted.inc(),
                (Err(error), write) => {
                    self.stats.failed.inc();
                    tracing::warn!(%error, api = job.api.as_str(), namespace = %job.slot, "cannot write the PolicyReport; retrying next round");
                    match write {
                        Some(_) => self.written.remove(&key),
                        // Still there: deleted again next round.
                        None => self.written.insert(key, 0),
                    };
                    if !job.slot.is_empty() {
                        self.pending.insert(job.slot);
                    }
                }
            }
        }
    }

    /// The cluster report's results: opted-out namespaces, the recycle bin's copies, and the
    /// HelmCharts that would reinstall their release on failure.
    async fn cluster_results(&mut self) -> Vec<(String, Value)> {
        let opted_out = self.index.namespaces().opted_out(self.options.default_mode);
        let bin = match &self.options.bin_namespace {
            Some(namespace) => {
                match crate::recycle_bin::api::list_bin(&self.client, namespace, None, None).await {
                    Ok(entries) => entries,
                    Err(error) => {
                        self.stats.failed.inc();
                        tracing::warn!(%error, "cannot list the recycle bin for the cluster PolicyReport");
                        Vec::new()
                    }
                }
            }
            None => Vec::new(),
        };
        let guard_namespace = self.options.bin_namespace.as_deref().unwrap_or(&self.options.lease_namespace);
        let reinstalling: Vec<helmcharts::HelmChart> = self
            .index
            .charts()
            .all()
            .into_iter()
            .filter(|chart| {
                let namespace_protects = self.index.namespaces().get(&chart.namespace).protect;
                chart.reinstalls_on_failure(namespace_protects, &self.options.protected_charts)
            })
            .collect();
        build::cluster_results(&opted_out, &bin, &reinstalling, guard_namespace)
            .into_iter()
            .map(|result| (subject(&result).unwrap_or_default(), result))
            .collect()
    }
}

/// A report to write (`write`: it and its content) or delete (`None`), in one API, of a namespace
/// (`slot`; `""`: the cluster's).
struct Job {
    api: ReportApi,
    slot: String,
    write: Option<(Value, u64)>,
}

impl Job {
    async fn run(&self, client: kube::Client) -> Result<(), kube::Error> {
        let namespace = (!self.slot.is_empty()).then_some(self.slot.as_str());
        let reports = reports_api(client, self.api, namespace, namespace.is_none());
        match &self.write {
            Some((report, _)) => {
                reports.patch(POLICY, &PatchParams::apply(POLICY).force(), &Patch::Apply(report)).await?;
            }
            None => match reports.delete(POLICY, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            },
        }
        Ok(())
    }
}

/// The reports of `api` in `namespace` (all namespaces when `None`), or the cluster reports.
fn reports_api(
    client: kube::Client,
    api: ReportApi,
    namespace: Option<&str>,
    cluster: bool,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(api.group(), api.version(), api.kind(cluster));
    let resource = ApiResource::from_gvk_with_plural(&gvk, api.plural(cluster));
    match namespace {
        Some(namespace) if !cluster => Api::namespaced_with(client, namespace, &resource),
        _ => Api::all_with(client, &resource),
    }
}

/// What a result is about: the release (and driver), or the namespace or bin entry of the
/// cluster report; read from its properties so that a report read back maps the same way.
fn subject(result: &Value) -> Option<String> {
    let properties = &result["properties"];
    match (properties["release"].as_str(), properties["namespace"].as_str()) {
        (Some(release), None) => {
            let driver = match result.pointer("/resources/0/kind").and_then(Value::as_str) {
                Some("ConfigMap") => "configmap",
                _ => "secret",
            };
            Some(format!("{release}/{driver}"))
        }
        (Some(release), Some(namespace)) => Some(format!("bin:{namespace}/{release}")),
        (None, Some(namespace)) => Some(format!("namespace:{namespace}")),
        (None, None) => None,
    }
}

/// A result's content without its timestamp.
fn content(result: &Value) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    hash_value(result, Some("timestamp"), &mut hasher);
    hasher.finish()
}

/// A report's content: its kind, summary, source and results without their timestamps (what
/// the API server adds, metadata, does not count).
fn report_content(report: &Value) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    for field in ["kind", "summary", "source"] {
        hash_value(&report[field], None, &mut hasher);
    }
    for result in report["results"].as_array().into_iter().flatten() {
        hash_value(result, Some("timestamp"), &mut hasher);
    }
    hasher.finish()
}

/// Hashes a JSON value with its object keys in order (a report read back from the API server
/// may order them differently), leaving out the key `skip` at the top.
fn hash_value(value: &Value, skip: Option<&str>, hasher: &mut impl Hasher) {
    match value {
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().filter(|k| Some(k.as_str()) != skip).collect();
            keys.sort();
            for key in keys {
                key.hash(hasher);
                hash_value(&fields[key], None, hasher);
            }
        }
        Value::Array(items) => {
            items.len().hash(hasher);
            items.iter().for_each(|item| hash_value(item, None, hasher));
        }
        Value::String(text) => text.hash(hasher),
        Value::Number(number) => number.to_string().hash(hasher),
        Value::Bool(flag) => flag.hash(hasher),
        Value::Null => 0u8.hash(hasher),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_read_back_is_the_same_content_whatever_its_key_order_and_timestamp() {
        let written = json!({"rule": "healthy", "result": "pass", "properties": {"release": "web", "revision": "3"},
            "timestamp": {"seconds": 1, "nanos": 0}});
        let read: Value = serde_json::from_str(
            r#"{"timestamp": {"nanos": 0, "seconds": 99}, "properties": {"revision": "3", "release": "web"}, "result": "pass", "rule": "healthy"}"#,
        )
        .unwrap();
        assert_eq!(content(&written), content(&read));
        let changed =
            json!({"rule": "failed", "result": "pass", "properties": {"release": "web", "revision": "3"}});
        assert_ne!(content(&written), content(&changed));
        let report = |results: Value, pass: u64| {
            json!({"kind": "PolicyReport", "summary": {"pass": pass}, "results": results,
            "metadata": {"resourceVersion": "7"}})
        };
        assert_eq!(
            report_content(&report(json!([written]), 1)),
            report_content(&report(json!([read.clone()]), 1))
        );
        assert_ne!(
            report_content(&report(json!([read.clone()]), 1)),
            report_content(&report(json!([read]), 2)),
            "a summary edited by hand"
        );
    }

    #[test]
    fn results_map_back_to_what_they_are_about() {
        let secret = json!({"properties": {"release": "web"}, "resources": [{"kind": "Secret"}]});
        let config_map = json!({"properties": {"release": "web"}, "resources": [{"kind": "ConfigMap"}]});
        let namespace = json!({"properties": {"namespace": "lab", "protection": "ignored"}});
        let copy = json!({"properties": {"namespace": "demo", "release": "web"}});
        let subjects: Vec<Option<String>> =
            [secret, config_map, namespace, copy, json!({})].iter().map(subject).collect();
        assert_eq!(
            subjects,
            [
                Some("web/secret".into()),
                Some("web/configmap".into()),
                Some("namespace:lab".into()),
                Some("bin:demo/web".into()),
                None
            ]
        );
    }

    #[test]
    fn auto_wants_both_apis_and_off_none() {
        assert_eq!(ApiChoice::Auto.wanted(), ReportApi::ALL);
        assert_eq!(ApiChoice::Openreports.wanted(), [ReportApi::OpenReports]);
        assert!(ApiChoice::Off.wanted().is_empty());
    }
}
