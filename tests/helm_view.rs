//! For helm-guard a release is exactly what `helm history` shows. Records crafted from a real Helm
//! 4 record, with what real Helm 3.17.3 and Helm 4.1.4 made of each (tests/common/crafted.rs),
//! are read alike by the guard: a record both Helms read counts, with their revision and status;
//! one either Helm skips (or that they read differently) does not.

use crate::common;

use common::crafted::{Case, cases};
use common::*;
use helm_guard::release::scan::{collect_records, report};
use helm_guard::release::{DecodeLimits, DecodedRecord, Record, Status};

/// Helm shows a status it does not know as written; the guard counts it as `unknown`.
fn as_guard_status(helm: &str) -> &str {
    if helm.parse::<Status>().is_ok() { helm } else { "unknown" }
}

fn guard_reading(case: &Case) -> Option<(i64, String)> {
    let record = Record::from_object(&case.secret("crafted"), None).unwrap().unwrap();
    let decoded = DecodedRecord::new(record, DecodeLimits::default());
    let payload = decoded.payload.as_ref().ok()?;
    Some((i64::from(decoded.record.id.revision), payload.info.status.to_string()))
}

#[test]
fn every_crafted_record_is_read_as_both_helms_read_it() {
    let mut wrong = Vec::new();
    for case in cases() {
        let expected =
            case.expected().map(|(revision, status)| (revision, as_guard_status(status).to_owned()));
        let got = guard_reading(&case);
        if got != expected {
            wrong.push(format!(
                "{}: guard {got:?}, Helm 3 {:?}, Helm 4 {:?}",
                case.name, case.helm3, case.helm4
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_record_either_helm_skips_is_named_as_such() {
    for case in cases().into_iter().filter(|c| c.expected().is_none()) {
        let record = Record::from_object(&case.secret("crafted"), None).unwrap().unwrap();
        let error = DecodedRecord::new(record, DecodeLimits::default()).payload.unwrap_err().to_string();
        assert!(!error.is_empty(), "{}", case.name);
        if case.helm3.is_some() != case.helm4.is_some() || case.helm3 != case.helm4 {
            // Only one Helm reads it: the message says why it counts as unreadable.
            assert!(error.contains("Helm"), "{}: {error}", case.name);
        }
    }
}

#[test]
fn scan_of_the_crafted_records_lists_what_helm_history_lists() {
    let objects: Vec<_> = cases().iter().map(|c| c.secret("crafted")).collect();
    let (records, problems) = collect_records(&objects, DecodeLimits::default());
    let reports = report(&records, 0, 900);
    for case in cases() {
        let listed: Vec<(i64, String)> = reports
            .iter()
            .filter(|r| r.release == case.name)
            .flat_map(|r| r.history.iter().map(|h| (i64::from(h.revision), h.status.to_string())))
            .collect();
        let expected: Vec<(i64, String)> =
            case.expected().map(|(r, s)| (r, as_guard_status(s).to_owned())).into_iter().collect();
        assert_eq!(listed, expected, "{}", case.name);
        let skipped =
            problems.iter().any(|p| p.object.contains(&format!("sh.helm.release.v1.{}.v1", case.name)));
        assert_eq!(skipped, expected.is_empty(), "{}: reported as a problem when Helm skips it", case.name);
    }
}

#[test]
fn a_negative_version_counts_as_unreadable() {
    // Helm 3 and 4 list it as revision -1; revisions are 1 and up in every Helm flow, and the
    // guard counts 0..=u32::MAX: skipping the record is the stricter reading (it can only make
    // the guard refuse more).
    let mut release = crafted::base("negative");
    release["version"] = serde_json::json!(-1);
    let record = with_release_json(helm4_secret(), &release);
    let record = Record::from_object(&record, None).unwrap().unwrap();
    let error = DecodedRecord::new(record, DecodeLimits::default()).payload.unwrap_err();
    assert!(error.to_string().contains("`version` is -1"), "{error}");
}

use common::crafted;
