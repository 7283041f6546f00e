//! The record codec and classifier on the real fixtures.

use crate::common;

use common::*;
use helm_guard::release::objects::parse_objects;
use helm_guard::release::scan::{collect_records, report};
use helm_guard::release::{Anomaly, DecodeLimits, Driver, Record, ReleaseState, Status};
use serde_json::{Value, json};

const NOW: i64 = 1_795_968_500; // a few minutes after the snapshot was taken
const STUCK_AFTER: i64 = 15 * 60;

fn records_of(objects: &[Value]) -> Vec<helm_guard::release::record::DecodedRecord> {
    let (records, problems) = collect_records(objects, DecodeLimits::default());
    assert!(problems.is_empty(), "{problems:?}");
    records
}

#[test]
fn every_record_in_the_admission_fixtures_decodes_and_matches_its_labels() {
    let mut seen = (0, 0);
    for path in admission_fixtures() {
        let text = std::fs::read(&path).unwrap();
        let objects = parse_objects(&text).unwrap();
        for object in &objects {
            let Some(record) = Record::from_object(object, None).unwrap() else {
                continue;
            };
            let payload =
                record.decode(DecodeLimits::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(payload.version, record.id.revision, "{}", path.display());
            assert_eq!(payload.name, record.id.key.release);
            assert_eq!(Some(payload.info.status), record.status_label());
            assert!(record.identity_agrees);
            match record.id.key.driver {
                Driver::Secret => seen.0 += 1,
                Driver::ConfigMap => seen.1 += 1,
            }
        }
    }
    assert!(seen.0 >= 30 && seen.1 >= 5, "secrets and configmaps both read: {seen:?}");
}

#[test]
fn helm3_and_helm4_payloads_both_summarise() {
    let helm4 = Record::from_object(&helm4_secret(), None).unwrap().unwrap();
    let payload = helm4.decode(DecodeLimits::default()).unwrap();
    let summary = helm_guard::release::Summary::new(&helm4, &payload);
    assert_eq!((summary.namespace.as_str(), summary.release.as_str(), summary.revision), ("demo", "web", 3));
    assert_eq!(summary.status, Status::Deployed);
    assert_eq!(summary.chart_ref().as_deref(), Some("demo-0.1.0"));
    assert_eq!(summary.app_version.as_deref(), Some("1.16.0"));
    assert_eq!(summary.description.as_deref(), Some("Upgrade complete"));

    let helm3 = Record::from_object(&helm3_configmap(), None).unwrap().unwrap();
    assert_eq!(helm3.id.key.driver, Driver::ConfigMap);
    let payload = helm3.decode(DecodeLimits::default()).unwrap();
    assert_eq!(payload.info.status, Status::Deployed);
    let json = helm3.decode_json(DecodeLimits::default()).unwrap();
    let release: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert!(release["manifest"].as_str().unwrap().contains("kind: Service"));
}

fn snapshot_reports() -> Vec<helm_guard::release::scan::ReleaseReport> {
    let text = std::fs::read(fixture_path("snapshot/cluster-snapshot.json")).unwrap();
    let objects = parse_objects(&text).unwrap();
    report(&records_of(&objects), NOW, STUCK_AFTER)
}

#[test]
fn scan_of_the_snapshot_agrees_with_helm_ls_all() {
    let reports = snapshot_reports();
    let helm_ls = fixture("snapshot/helm-ls-all.json");
    let helm_ls = helm_ls.as_array().unwrap();
    assert_eq!(reports.len(), helm_ls.len());
    for entry in helm_ls {
        let report = reports
            .iter()
            .find(|r| r.namespace == entry["namespace"] && r.release == entry["name"])
            .unwrap_or_else(|| panic!("no report for {entry}"));
        assert_eq!(report.revision.map(|r| r.to_string()).as_deref(), entry["revision"].as_str(), "{entry}");
        assert_eq!(report.status.map(|s| s.to_string()).as_deref(), entry["status"].as_str(), "{entry}");
        assert_eq!(report.chart.as_deref(), entry["chart"].as_str());
    }
}

#[test]
fn scan_of_the_snapshot_agrees_with_helm_history_revision_by_revision() {
    let text = std::fs::read(fixture_path("snapshot/cluster-snapshot.json")).unwrap();
    let records = records_of(&parse_objects(&text).unwrap());
    for report in snapshot_reports() {
        let history = fixture(&format!("snapshot/history-{}-{}.json", report.namespace, report.release));
        for entry in history.as_array().unwrap() {
            let revision = entry["revision"].as_u64().unwrap() as u32;
            let record = records
                .iter()
                .find(|r| r.record.id.key.release == report.release && r.record.id.revision == revision)
                .unwrap();
            let summary = helm_guard::release::Summary::of(record).unwrap();
            assert_eq!(summary.status.as_str(), entry["status"], "{} r{revision}", report.release);
            assert_eq!(summary.description.as_deref(), entry["description"].as_str());
        }
    }
}

#[test]
fn the_snapshot_releases_have_the_states_the_fixture_readme_gives() {
    let states: Vec<(String, ReleaseState, bool)> = snapshot_reports()
        .into_iter()
        .map(|r| (format!("{}/{}", r.namespace, r.release), r.state, r.stuck))
        .collect();
    let expected = [
        ("demo/web", ReleaseState::Failed, false),
        ("orphan/app", ReleaseState::OrphanedSuperseded, false),
        ("pending/first", ReleaseState::PendingInstall, false),
        ("pending/gone", ReleaseState::Uninstalled, false),
        ("pending/rb", ReleaseState::Healthy, false),
        ("stuck/job", ReleaseState::Healthy, false),
    ];
    for (name, state, stuck) in expected {
        assert!(states.contains(&(name.to_owned(), state, stuck)), "{name}: {states:?}");
    }
    let web = snapshot_reports().into_iter().find(|r| r.release == "web").unwrap();
    assert_eq!(web.deployed_revisions, vec![3], "the failed release notes its deployed revision");
}

#[test]
fn a_pending_install_becomes_stuck_after_the_threshold() {
    let text = std::fs::read(fixture_path("snapshot/cluster-snapshot.json")).unwrap();
    let records = records_of(&parse_objects(&text).unwrap());
    let first = |now| report(&records, now, STUCK_AFTER).into_iter().find(|r| r.release == "first").unwrap();
    // pending/first was stored (creationTimestamp) at 2026-11-29T16:07:19Z, 1795968439.
    assert!(!first(1_795_968_439 + STUCK_AFTER).stuck);
    let later = first(1_795_968_439 + STUCK_AFTER + 1);
    assert!(later.stuck && later.state == ReleaseState::PendingInstall);
    assert!(later.hint.contains("stuck"));
}

fn classify_history(items: Vec<Value>) -> helm_guard::release::scan::ReleaseReport {
    let mut reports = report(&collect_records(&items, DecodeLimits::default()).0, NOW, STUCK_AFTER);
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

#[test]
fn every_state_from_real_records() {
    let base = helm4_secret();
    let table: [(&[(u32, &str)], ReleaseState); 9] = [
        (&[(1, "superseded"), (2, "deployed")], ReleaseState::Healthy),
        (&[(3, "deployed"), (4, "failed")], ReleaseState::Failed),
        (&[(1, "pending-install")], ReleaseState::PendingInstall),
        (&[(1, "deployed"), (2, "pending-upgrade")], ReleaseState::PendingUpgrade),
        (&[(2, "deployed"), (3, "pending-rollback")], ReleaseState::PendingRollback),
        (&[(1, "superseded"), (2, "uninstalling")], ReleaseState::Uninstalling),
        (&[(1, "uninstalled")], ReleaseState::Uninstalled),
        (&[(1, "superseded"), (2, "superseded")], ReleaseState::OrphanedSuperseded),
        (&[(1, "unknown")], ReleaseState::Unknown),
    ];
    for (revisions, state) in table {
        let report = classify_history(history(&base, revisions));
        assert_eq!(report.state, state, "{revisions:?}");
        assert!(report.anomalies.is_empty(), "{revisions:?}: {:?}", report.anomalies);
    }
    // Configmap driver, too.
    let report = classify_history(history(&helm3_configmap(), &[(1, "superseded")]));
    assert_eq!((report.driver, report.state), (Driver::ConfigMap, ReleaseState::OrphanedSuperseded));
}

#[test]
fn anomalies_from_real_records() {
    let base = helm4_secret();
    let two_deployed = classify_history(history(&base, &[(1, "deployed"), (2, "deployed")]));
    assert_eq!(two_deployed.anomalies, vec![Anomaly::MultipleDeployed.as_str()]);

    let mut edited = history(&base, &[(1, "deployed"), (2, "superseded")]);
    edited[1]["metadata"]["labels"]["status"] = json!("deployed");
    let mismatch = classify_history(edited);
    assert_eq!(mismatch.anomalies, vec![Anomaly::StatusLabelMismatch.as_str()]);
    assert_eq!(mismatch.status, Some(Status::Superseded), "Helm reads the payload, not the label");

    let mut corrupt = history(&base, &[(1, "superseded"), (2, "deployed")]);
    corrupt[1]["data"]["release"] = json!("bm90IGEgcmVsZWFzZQ=="); // base64 of base64-less junk
    let (records, problems) = collect_records(&corrupt, DecodeLimits::default());
    assert_eq!(problems.len(), 1);
    assert!(problems[0].object.contains("sh.helm.release.v1.web.v2"), "{problems:?}");
    let undecodable = &report(&records, NOW, STUCK_AFTER)[0];
    assert_eq!(undecodable.anomalies, vec![Anomaly::UndecodableRecord.as_str()]);
    assert_eq!((undecodable.state, undecodable.revision), (ReleaseState::OrphanedSuperseded, Some(1)));
}

/// The 1 MiB wall (issue 58): a release whose latest record is past 80% of what one object holds
/// is named by scan (`near-size-limit`), a smaller one is not.
#[test]
fn scan_names_a_release_whose_latest_record_nears_the_size_limit() {
    let scanned = |padding: usize| {
        let mut records = web(&[(1, "superseded"), (2, "deployed")]);
        records[1]["data"]["padding"] = serde_json::json!(base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            vec![b'x'; padding]
        ));
        report(&records_of(&records), NOW, STUCK_AFTER).remove(0)
    };
    let near = scanned(900 * 1024);
    assert!(near.anomalies.iter().any(|a| a.contains("size")), "{near:?}");
    assert!(near.broken && near.hint.contains("sh.helm.release.v1.web.v2 holds"), "{}", near.hint);
    let small = scanned(10 * 1024);
    assert!(small.anomalies.is_empty() && !small.broken, "{small:?}");
}
