//! The real AdmissionReviews of tests/fixtures/admission, replayed in order over HTTPS against a
//! guard that starts from a snapshot holding the one record that existed before them.

use crate::common;

use common::guard::{Guard, Options};
use common::*;
use serde_json::Value;

/// (fixture, allowed, reason, revision, status)
type Step = (&'static str, bool, &'static str, &'static str, &'static str);

async fn replay(guard: &Guard, steps: &[Step]) -> Vec<Value> {
    let mut responses = Vec::new();
    for &(fixture, allowed, reason, revision, status) in steps {
        let request = review(&format!("admission/{fixture}"));
        let response = guard.validate(&request).await;
        let audit = &response["auditAnnotations"];
        assert_eq!(response["allowed"], allowed, "{fixture}: {response}");
        assert_eq!(audit["reason"], reason, "{fixture}: {response}");
        assert_eq!(audit["decision"], if allowed { "allowed" } else { "denied" }, "{fixture}");
        assert_eq!(audit["revision"], revision, "{fixture}");
        assert_eq!(audit["status"], status, "{fixture}");
        let namespace = request["request"]["namespace"].as_str().unwrap();
        let release = request["request"]["name"].as_str().unwrap().split('.').nth(4).unwrap();
        assert_eq!(audit["release"], format!("{namespace}/{release}"), "{fixture}");
        if !allowed {
            assert_eq!(response["status"]["code"], 403, "{fixture}");
            assert_eq!(response["status"]["reason"], "Forbidden", "{fixture}");
        }
        responses.push(response);
    }
    responses
}

#[tokio::test]
async fn the_captured_helm_and_kubectl_traffic_in_order() {
    // Before the capture: revision 1 of demo/web, deployed.
    let web_v1 = record_from_review(
        "admission/01-helm4-install-upgrade/002-validate-update-secret-sh.helm.release.v1.web.v1.json",
        "oldObject",
    );
    let guard = Guard::start(Options { snapshot: vec![web_v1], ..Options::default() }).await;

    // Helm 4 install and two upgrades: CREATE and UPDATE of records, all Helm's own.
    replay(
        &guard,
        &[
            (
                "01-helm4-install-upgrade/001-validate-create-secret-sh.helm.release.v1.web.v2.json",
                true,
                "helm-create",
                "2",
                "pending-upgrade",
            ),
            (
                "01-helm4-install-upgrade/002-validate-update-secret-sh.helm.release.v1.web.v1.json",
                true,
                "helm-update",
                "1",
                "superseded",
            ),
            (
                "01-helm4-install-upgrade/003-validate-update-secret-sh.helm.release.v1.web.v2.json",
                true,
                "helm-update",
                "2",
                "deployed",
            ),
            (
                "01-helm4-install-upgrade/004-validate-create-secret-sh.helm.release.v1.web.v3.json",
                true,
                "helm-create",
                "3",
                "pending-upgrade",
            ),
            (
                "01-helm4-install-upgrade/005-validate-update-secret-sh.helm.release.v1.web.v2.json",
                true,
                "helm-update",
                "2",
                "superseded",
            ),
            (
                "01-helm4-install-upgrade/006-validate-update-secret-sh.helm.release.v1.web.v3.json",
                true,
                "helm-update",
                "3",
                "deployed",
            ),
        ],
    )
    .await;

    // Deleting the oldest is pruning; the dry-run and the real deletion of the latest deployed
    // revision (the seed bug) are refused alike.
    let responses = replay(
        &guard,
        &[
            ("02-delete-oldest-and-dryrun-latest/001-validate-delete-secret-sh.helm.release.v1.web.v1.json", true, "history-pruning", "1", "superseded"),
            ("02-delete-oldest-and-dryrun-latest/002-validate-delete-secret-sh.helm.release.v1.web.v3.json", false, "latest-deployed-revision", "3", "deployed"),
            ("03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json", false, "latest-deployed-revision", "3", "deployed"),
        ],
    )
    .await;
    let message = responses[2]["status"]["message"].as_str().unwrap();
    for needle in [
        "revision 3 is the latest, deployed revision of release demo/web",
        "revision 2 would become the latest and it is superseded",
        "cannot re-use a name that is still in use",
        "helm uninstall web -n demo",
        "helm rollback web 2 -n demo",
        "helm-guard.io/allow-delete",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }
    assert_eq!(
        responses[1]["status"]["message"], responses[2]["status"]["message"],
        "dry-run gets the same verdict"
    );

    // A failed upgrade: revision 4 failed, 3 still deployed. Now 3 is the only deployed revision.
    replay(
        &guard,
        &[
            (
                "12-failed-upgrade/030-validate-create-secret-sh.helm.release.v1.web.v4.json",
                true,
                "helm-create",
                "4",
                "pending-upgrade",
            ),
            (
                "12-failed-upgrade/031-validate-update-secret-sh.helm.release.v1.web.v3.json",
                true,
                "helm-update",
                "3",
                "deployed",
            ),
            (
                "12-failed-upgrade/032-validate-update-secret-sh.helm.release.v1.web.v4.json",
                true,
                "helm-update",
                "4",
                "failed",
            ),
            (
                "03-delete-latest-deployed-seed/003-validate-delete-secret-sh.helm.release.v1.web.v3.json",
                false,
                "last-deployed-revision",
                "3",
                "deployed",
            ),
        ],
    )
    .await;

    // Helm 3 install, upgrade and uninstall of cache: everything Helm does is let through.
    replay(
        &guard,
        &[
            (
                "05-helm3-install-upgrade/007-validate-create-secret-sh.helm.release.v1.cache.v1.json",
                true,
                "helm-create",
                "1",
                "pending-install",
            ),
            (
                "05-helm3-install-upgrade/008-validate-update-secret-sh.helm.release.v1.cache.v1.json",
                true,
                "helm-update",
                "1",
                "deployed",
            ),
            (
                "05-helm3-install-upgrade/009-validate-create-secret-sh.helm.release.v1.cache.v2.json",
                true,
                "helm-create",
                "2",
                "pending-upgrade",
            ),
            (
                "05-helm3-install-upgrade/010-validate-update-secret-sh.helm.release.v1.cache.v1.json",
                true,
                "helm-update",
                "1",
                "superseded",
            ),
            (
                "05-helm3-install-upgrade/011-validate-update-secret-sh.helm.release.v1.cache.v2.json",
                true,
                "helm-update",
                "2",
                "deployed",
            ),
            (
                "06-helm3-uninstall-purge/012-validate-update-secret-sh.helm.release.v1.cache.v2.json",
                true,
                "helm-update",
                "2",
                "uninstalling",
            ),
            (
                "06-helm3-uninstall-purge/013-validate-delete-secret-sh.helm.release.v1.cache.v1.json",
                true,
                // D4a: the purge of an uninstall, approved without agreement between replicas.
                "uninstall-purge",
                "1",
                "superseded",
            ),
            (
                "06-helm3-uninstall-purge/014-validate-delete-secret-sh.helm.release.v1.cache.v2.json",
                true,
                "uninstall",
                "2",
                "uninstalling",
            ),
        ],
    )
    .await;

    // The configmap driver, and an upgrade killed in a hook.
    replay(
        &guard,
        &[
            ("07-configmap-driver-install-upgrade/015-validate-create-configmap-sh.helm.release.v1.api.v1.json", true, "helm-create", "1", "pending-install"),
            ("07-configmap-driver-install-upgrade/016-validate-update-configmap-sh.helm.release.v1.api.v1.json", true, "helm-update", "1", "deployed"),
            ("07-configmap-driver-install-upgrade/017-validate-create-configmap-sh.helm.release.v1.api.v2.json", true, "helm-create", "2", "pending-upgrade"),
            ("07-configmap-driver-install-upgrade/018-validate-update-configmap-sh.helm.release.v1.api.v1.json", true, "helm-update", "1", "superseded"),
            ("07-configmap-driver-install-upgrade/019-validate-update-configmap-sh.helm.release.v1.api.v2.json", true, "helm-update", "2", "deployed"),
            ("09-stuck-pending-upgrade/021-validate-create-secret-sh.helm.release.v1.job.v1.json", true, "helm-create", "1", "pending-install"),
            ("09-stuck-pending-upgrade/022-validate-update-secret-sh.helm.release.v1.job.v1.json", true, "helm-update", "1", "deployed"),
            ("09-stuck-pending-upgrade/023-validate-create-secret-sh.helm.release.v1.job.v2.json", true, "helm-create", "2", "pending-upgrade"),
            ("09-stuck-pending-upgrade/024-validate-update-secret-sh.helm.release.v1.job.v2.json", true, "helm-update", "2", "pending-upgrade"),
        ],
    )
    .await;

    // The usual manual recovery of the stuck upgrade: delete the pending revision.
    let stuck = record_from_review(
        "admission/09-stuck-pending-upgrade/024-validate-update-secret-sh.helm.release.v1.job.v2.json",
        "object",
    );
    let response = guard.validate(&delete_review(&stuck)).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(response["auditAnnotations"]["reason"], "stuck-revision-recovery");
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(warning.contains("revision 1 would become the latest and it is deployed"), "{warning}");
}
