//! manifests/monitoring/ against the guard's real `/metrics`: every metric an alert or a
//! dashboard panel names is one the guard exports, every expression parses as PromQL, and the
//! rule file is a PrometheusRule.

use crate::common;

use std::collections::BTreeSet;

use common::guard::{Guard, Options};
use common::*;
use promql_parser::parser::{Expr, parse};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_json::Value;

fn manifest(name: &str) -> String {
    std::fs::read_to_string(format!("{}/manifests/monitoring/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The metric names an expression selects.
fn selected(expr: &str) -> BTreeSet<String> {
    struct Names(BTreeSet<String>);
    impl ExprVisitor for Names {
        type Error = ();
        fn pre_visit(&mut self, expr: &Expr) -> Result<bool, ()> {
            let selector = match expr {
                Expr::VectorSelector(vs) => Some(vs),
                Expr::MatrixSelector(ms) => Some(&ms.vs),
                _ => None,
            };
            if let Some(name) = selector.and_then(|vs| vs.name.clone()) {
                self.0.insert(name);
            }
            Ok(true)
        }
    }
    let parsed = parse(expr).unwrap_or_else(|e| panic!("not PromQL: {expr}: {e}"));
    let mut names = Names(BTreeSet::new());
    walk_expr(&mut names, &parsed).unwrap();
    names.0
}

/// The sample names of the guard's `/metrics` after it has decided, refused and rejected.
async fn exported() -> BTreeSet<String> {
    served(true).await
}

/// The sample names of `/metrics`, after a few requests (`busy`) or before any.
async fn served(busy: bool) -> BTreeSet<String> {
    let records = history(&helm4_secret(), &[(1, "superseded"), (2, "deployed")]);
    let guard = Guard::start(Options { snapshot: records.clone(), ..Options::default() }).await;
    if busy {
        guard.validate(&delete_review(&records[0])).await;
        guard.validate(&delete_review(&records[1])).await;
        let (status, _) = guard.client.post("/validate", b"not json".to_vec()).await;
        assert_eq!(status, 400);
    }
    let (status, text) = guard.metrics_get("/metrics").await;
    assert_eq!(status, 200);
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| line.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

/// What the alerts on the guard itself read from others: Prometheus, the API server's webhook
/// metrics, kube-state-metrics.
const EXTERNAL: &[&str] = &[
    "up",
    "apiserver_admission_webhook_rejection_count",
    "kube_deployment_status_replicas_available",
    "kube_deployment_spec_replicas",
];

#[tokio::test]
async fn the_prometheus_rule_parses_and_names_only_exported_metrics() {
    let rule: Value = serde_saphyr::from_str(&manifest("prometheusrule.yaml")).unwrap();
    assert_eq!(
        (rule["apiVersion"].as_str(), rule["kind"].as_str()),
        (Some("monitoring.coreos.com/v1"), Some("PrometheusRule"))
    );
    let exported = exported().await;
    let mut alerts = BTreeSet::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        assert!(group["name"].is_string());
        for rule in group["rules"].as_array().unwrap() {
            let alert = rule["alert"].as_str().expect("every rule is an alert");
            assert!(alerts.insert(alert.to_owned()), "{alert} twice");
            assert!(
                ["critical", "warning", "info"].contains(&rule["labels"]["severity"].as_str().unwrap()),
                "{alert}"
            );
            assert!(
                rule["annotations"]["summary"].is_string() && rule["annotations"]["description"].is_string(),
                "{alert}"
            );
            if let Some(duration) = rule.get("for") {
                humantime::parse_duration(duration.as_str().unwrap())
                    .unwrap_or_else(|e| panic!("{alert}: {e}"));
            }
            for name in selected(rule["expr"].as_str().unwrap()) {
                assert!(
                    exported.contains(&name) || EXTERNAL.contains(&name.as_str()),
                    "{alert} names {name}, which the guard does not export: {exported:?}"
                );
            }
        }
    }
    // What the issue asks alerts on.
    for needed in [
        "orphaned-superseded",
        "helm_guard_releases_stuck",
        "multiple-deployed",
        "undecodable-record",
        "decision=\"denied\"",
        "helm_guard_seconds_since_last_sync",
        "helm_guard_tls_reloads_total{result=\"error\"}",
        "helm_guard_decision_deadline_exceeded_total",
        // The guard itself (issue 60): down, unreachable from the API server, short of replicas.
        "absent(up{",
        "apiserver_admission_webhook_rejection_count",
        "kube_deployment_status_replicas_available",
    ] {
        assert!(manifest("prometheusrule.yaml").contains(needed), "no alert on {needed}");
    }
}

#[tokio::test]
async fn every_dashboard_panel_queries_exported_metrics() {
    let dashboard: Value = serde_json::from_str(&manifest("grafana-dashboard.json")).unwrap();
    let exported = exported().await;
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    let mut seen = BTreeSet::new();
    for panel in panels {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for target in targets {
            for name in selected(target["expr"].as_str().unwrap()) {
                assert!(
                    exported.contains(&name) || EXTERNAL.contains(&name.as_str()),
                    "panel {} names {name}, which neither the guard nor the API server exports",
                    panel["title"]
                );
                seen.insert(name);
            }
        }
    }
    // Every metric the guard exports is on the dashboard.
    let missing: Vec<&String> = exported
        .iter()
        .filter(|name| !name.ends_with("_sum") && !name.ends_with("_count") && !seen.contains(*name))
        .collect();
    assert!(missing.is_empty(), "not on the dashboard: {missing:?}");
}

/// A series that appears only with its first sample shows "no data" on a dashboard and escapes
/// `increase()`: what the alerts and the panels read is served from the start, at 0. Decisions
/// are the exception: their labels (webhook, operation, decision, reason) are too many to list.
#[tokio::test]
async fn what_alerts_and_panels_read_is_served_before_the_first_request() {
    let before = served(false).await;
    let rule: Value = serde_saphyr::from_str(&manifest("prometheusrule.yaml")).unwrap();
    let dashboard: Value = serde_json::from_str(&manifest("grafana-dashboard.json")).unwrap();
    let mut read = BTreeSet::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            read.extend(selected(rule["expr"].as_str().unwrap()));
        }
    }
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            read.extend(selected(target["expr"].as_str().unwrap()));
        }
    }
    assert!(read.contains("helm_guard_admission_rejected_requests_total"));
    let missing: Vec<&String> = read
        .iter()
        .filter(|name| *name != "helm_guard_admission_decisions_total" && !EXTERNAL.contains(&name.as_str()))
        .filter(|name| !before.contains(*name))
        .collect();
    assert!(missing.is_empty(), "not served before the first request: {missing:?}");
}

/// The alerts on the guard itself fire on the series that mean them and stay quiet on a healthy
/// guard, as Prometheus evaluates them (`promtool test rules` over the shipped rules, their
/// annotations set aside): down, not reached by the API server (its own probe, and the API
/// server's failed calls), short of replicas, its certificate about to expire. Needs promtool
/// (Debian's `prometheus` package): `.ci/run` installs it and runs this test.
#[test]
#[ignore = "needs promtool (Debian: prometheus): cargo test --test in_process -- --ignored monitoring::"]
fn the_alerts_on_the_guard_itself_fire_when_they_should_and_only_then() {
    let rule: Value = serde_saphyr::from_str(&manifest("prometheusrule.yaml")).unwrap();
    let mut groups = rule["spec"]["groups"].clone();
    for group in groups.as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            rule.as_object_mut().unwrap().remove("annotations");
        }
    }
    let labels_of = |alert: &str| -> Value {
        let rules = groups.as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap());
        rules.clone().find(|r| r["alert"] == alert).unwrap_or_else(|| panic!("no alert {alert}"))["labels"]
            .clone()
    };
    let firing = |alert: &str, extra: Value| -> Value {
        let mut labels = labels_of(alert);
        for (key, value) in extra.as_object().unwrap() {
            labels[key] = value.clone();
        }
        serde_json::json!({"eval_time": "20m", "alertname": alert, "exp_alerts": [{"exp_labels": labels}]})
    };
    let quiet = |alert: &str| serde_json::json!({"eval_time": "20m", "alertname": alert, "exp_alerts": []});
    let series = |pairs: &[(&str, &str)]| -> Value {
        pairs.iter().map(|(series, values)| serde_json::json!({"series": series, "values": values})).collect()
    };
    const ALERTS: [&str; 5] = [
        "HelmGuardDown",
        "HelmGuardNotReachedByAPIServer",
        "HelmGuardUnreachableFromAPIServer",
        "HelmGuardReplicasUnavailable",
        "HelmGuardCertificateExpiresSoon",
    ];
    let tests = serde_json::json!({
        "rule_files": ["rules.json"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series(&[
                    // The guard's target is gone; another job's stays up.
                    ("up{job=\"node-exporter\"}", "1x30"),
                    ("helm_guard_apiserver_reachable{pod=\"helm-guard-0\"}", "0x30"),
                    ("apiserver_admission_webhook_rejection_count{name=\"records.helm-guard.io\",error_type=\"calling_webhook_error\"}", "0+3x30"),
                    ("kube_deployment_status_replicas_available{deployment=\"helm-guard\"}", "1x30"),
                    ("kube_deployment_spec_replicas{deployment=\"helm-guard\"}", "2x30"),
                    // Expires a day after the start.
                    ("helm_guard_tls_certificate_expiry_seconds{pod=\"helm-guard-0\"}", "86400x30"),
                ]),
                "alert_rule_test": [
                    firing("HelmGuardDown", serde_json::json!({})),
                    firing("HelmGuardNotReachedByAPIServer", serde_json::json!({})),
                    firing("HelmGuardUnreachableFromAPIServer", serde_json::json!({})),
                    firing("HelmGuardReplicasUnavailable", serde_json::json!({"deployment": "helm-guard"})),
                    firing("HelmGuardCertificateExpiresSoon", serde_json::json!({})),
                ],
            },
            {
                "interval": "1m",
                "input_series": series(&[
                    ("up{job=\"helm-guard-metrics\"}", "1x30"),
                    ("helm_guard_apiserver_reachable{pod=\"helm-guard-0\"}", "1x30"),
                    ("apiserver_admission_webhook_rejection_count{name=\"records.helm-guard.io\",error_type=\"calling_webhook_error\"}", "7x30"),
                    ("kube_deployment_status_replicas_available{deployment=\"helm-guard\"}", "2x30"),
                    ("kube_deployment_spec_replicas{deployment=\"helm-guard\"}", "2x30"),
                    ("helm_guard_tls_certificate_expiry_seconds{pod=\"helm-guard-0\"}", "31536000x30"),
                ]),
                "alert_rule_test": ALERTS.iter().map(|alert| quiet(alert)).collect::<Vec<_>>(),
            },
        ],
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.json"), serde_json::json!({"groups": groups}).to_string()).unwrap();
    std::fs::write(dir.path().join("tests.json"), tests.to_string()).unwrap();
    let done = std::process::Command::new("promtool")
        .args(["test", "rules", "tests.json"])
        .current_dir(dir.path())
        .output()
        .expect("promtool on PATH (Debian: prometheus)");
    assert!(
        done.status.success(),
        "{}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
}
