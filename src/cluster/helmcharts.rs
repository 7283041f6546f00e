//! The K3s/RKE2 HelmCharts (`helm.cattle.io/v1`) the guard knows: which chart manages a release
//! (so that Events land where `kubectl describe helmchart` shows them) and which charts ask for
//! `helm-guard.io/protect`. Optional: without the CRD the map stays empty and nothing else
//! changes.

use std::collections::HashMap;
use std::sync::RwLock;

use kube::api::DynamicObject;
use serde_json::Value;

use crate::policy::pod::PROTECT_LABEL;

/// The API group and version of K3s's HelmChart.
pub(crate) const API_VERSION: &str = "helm.cattle.io/v1";
/// Its kind.
pub(crate) const KIND: &str = "HelmChart";

/// What the guard keeps of one HelmChart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HelmChart {
    /// The chart's namespace (where its jobs run).
    pub namespace: String,
    /// The chart's name: the release's name.
    pub name: String,
    /// Its uid: Events are found by it.
    pub uid: Option<String>,
    /// The release's namespace: `spec.targetNamespace`, else the chart's.
    pub target_namespace: String,
    /// `helm-guard.io/protect=true` as a label or an annotation.
    pub protect: bool,
    /// `spec.failurePolicy` (helm-controller's default, `reinstall`, when unset).
    pub failure_policy: Option<String>,
}

impl HelmChart {
    /// From a HelmChart as the watch delivers it; `None` without a name.
    pub(crate) fn from_object(object: &DynamicObject) -> Option<HelmChart> {
        let metadata = &object.metadata;
        let namespace =
            metadata.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".to_owned());
        let marked = |map: &Option<std::collections::BTreeMap<String, String>>| {
            map.as_ref().and_then(|map| map.get(PROTECT_LABEL)).map(String::as_str) == Some("true")
        };
        let target =
            object.data.pointer("/spec/targetNamespace").and_then(Value::as_str).filter(|t| !t.is_empty());
        Some(HelmChart {
            name: metadata.name.clone().filter(|n| !n.is_empty())?,
            uid: metadata.uid.clone(),
            target_namespace: target.map_or_else(|| namespace.clone(), str::to_owned),
            protect: marked(&metadata.labels) || marked(&metadata.annotations),
            failure_policy: object
                .data
                .pointer("/spec/failurePolicy")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
            namespace,
        })
    }

    /// What protects this chart's release from a reinstall (`helm-guard.io/protect` on it or on
    /// its namespace, `namespace_protects`; its name in `--protected-chart`), said as the
    /// annotation and the Event say it; `None`: nothing does.
    pub(crate) fn protected_by(
        &self,
        namespace_protects: bool,
        protected_charts: &[String],
    ) -> Option<String> {
        protection(&self.namespace, &self.name, self.protect, namespace_protects, protected_charts)
    }

    /// Whether a failed release of this chart is uninstalled and installed afresh by its job:
    /// the failure policy `reinstall` (helm-controller's default) and nothing protecting it.
    pub(crate) fn reinstalls_on_failure(
        &self,
        namespace_protects: bool,
        protected_charts: &[String],
    ) -> bool {
        self.failure_policy.as_deref().is_none_or(|p| p == "reinstall")
            && self.protected_by(namespace_protects, protected_charts).is_none()
    }
}

/// What protects the release of chart `namespace/name` from a reinstall: `helm-guard.io/protect`
/// on the chart (`labelled`) or its namespace (`namespace_protects`), or its name in
/// `--protected-chart`; said as the annotation and the Event say it. A chart the guard has not
/// seen (no HelmChart watch yet) is judged by its namespace and name alone.
pub(crate) fn protection(
    namespace: &str,
    name: &str,
    labelled: bool,
    namespace_protects: bool,
    protected_charts: &[String],
) -> Option<String> {
    let by_name = format!("{namespace}/{name}");
    if labelled {
        Some(format!("helmchart {by_name}"))
    } else if namespace_protects {
        Some(format!("namespace {namespace}"))
    } else if protected_charts.contains(&by_name) {
        Some(format!("helmchart {by_name}, a chart the cluster cannot lose: --protected-chart"))
    } else {
        None
    }
}

/// The HelmCharts of the cluster, by namespace and name.
#[derive(Debug, Default)]
pub(crate) struct HelmCharts {
    charts: RwLock<HashMap<(String, String), HelmChart>>,
}

impl HelmCharts {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<(String, String), HelmChart>> {
        self.charts.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<(String, String), HelmChart>> {
        self.charts.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A completed list: these charts and no others.
    pub(crate) fn replace(&self, charts: Vec<HelmChart>) {
        *self.write() = charts.into_iter().map(|c| ((c.namespace.clone(), c.name.clone()), c)).collect();
    }

    /// One chart added or changed.
    pub(crate) fn upsert(&self, chart: HelmChart) {
        self.write().insert((chart.namespace.clone(), chart.name.clone()), chart);
    }

    /// Every chart, by namespace and name.
    pub(crate) fn all(&self) -> Vec<HelmChart> {
        let mut charts: Vec<HelmChart> = self.read().values().cloned().collect();
        charts.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        charts
    }

    /// One chart gone.
    pub(crate) fn remove(&self, namespace: &str, name: &str) {
        self.write().remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// The chart `namespace/name`.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<HelmChart> {
        self.read().get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// The chart that manages the release `release` in `namespace`: named as the release, with
    /// the release's namespace as its target. Two such charts (in different namespaces, a
    /// misconfiguration helm-controller itself fights over) give none.
    pub(crate) fn managing(&self, namespace: &str, release: &str) -> Option<HelmChart> {
        let charts = self.read();
        let mut found = charts.values().filter(|c| c.name == release && c.target_namespace == namespace);
        let first = found.next()?;
        found.next().is_none().then(|| first.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(object: Value) -> Option<HelmChart> {
        HelmChart::from_object(&serde_json::from_value(object).unwrap())
    }

    fn chart(namespace: &str, name: &str, target: Option<&str>) -> HelmChart {
        let mut object = json!({"metadata": {"namespace": namespace, "name": name, "uid": format!("{name}-uid")}, "spec": {}});
        if let Some(target) = target {
            object["spec"]["targetNamespace"] = json!(target);
        }
        read(object).unwrap()
    }

    #[test]
    fn a_chart_is_read_with_its_target_and_protection() {
        let traefik = chart("kube-system", "traefik", None);
        assert_eq!((traefik.target_namespace.as_str(), traefik.protect), ("kube-system", false));
        let protected = read(json!({
            "metadata": {"namespace": "kube-system", "name": "cilium", "annotations": {PROTECT_LABEL: "true"}},
            "spec": {"targetNamespace": "cilium"}
        }))
        .unwrap();
        assert_eq!((protected.target_namespace.as_str(), protected.protect), ("cilium", true));
        let not_true = json!({"metadata": {"name": "x", "labels": {PROTECT_LABEL: "yes"}}});
        assert!(!read(not_true).unwrap().protect);
        assert!(read(json!({"metadata": {}})).is_none());
    }

    #[test]
    fn the_chart_managing_a_release_is_named_as_it_and_targets_its_namespace() {
        let charts = HelmCharts::default();
        charts
            .replace(vec![chart("kube-system", "traefik", None), chart("kube-system", "web", Some("demo"))]);
        assert_eq!(charts.managing("kube-system", "traefik").unwrap().uid.as_deref(), Some("traefik-uid"));
        assert_eq!(charts.managing("demo", "web").unwrap().namespace, "kube-system");
        assert!(charts.managing("kube-system", "web").is_none());
        charts.upsert(chart("tenant", "web", Some("demo")));
        assert!(charts.managing("demo", "web").is_none(), "two charts claim the release");
        charts.remove("tenant", "web");
        assert!(charts.managing("demo", "web").is_some());
    }
}
