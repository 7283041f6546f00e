//! The record of each decision: audit annotations for the API server's audit log, and one
//! structured log line (target `helm_guard::ledger`) so that the logs form a ledger of every
//! release change.

use std::collections::HashMap;

use crate::cluster::events::Notice;
use crate::object::ReviewObject;
use crate::policy::{Decision, Mode, Reason, echoed};
use crate::release::Status;
use kube::core::admission::AdmissionRequest;

/// One decision, as logged and as annotated: who asked about which object, what it was about,
/// and what was decided. Built once, from the decision.
#[derive(Debug, Clone)]
pub struct LedgerEntry {
    /// Who asked to do what to which object.
    pub asked: Asked,
    /// What the request was about: the release, the record, what changed.
    pub about: About,
    /// What was decided, mode included.
    pub decision: Decision,
    /// The rule that decided.
    pub reason: Reason,
    /// The mode that applied.
    pub mode: Mode,
    /// The denial or warning, in full.
    pub message: Option<String>,
    /// The break-glass reason, the exempt identity or the forgetter's.
    pub detail: Option<String>,
}

/// Who asked to do what to which object, as the request says (read before the request's objects
/// are taken apart).
#[derive(Debug, Clone)]
pub struct Asked {
    /// Which webhook decided (`validate`, `mutate`).
    pub webhook: &'static str,
    /// The request's uid (the audit log's `auditID` ties it to the user's request).
    pub uid: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`, as the API server names it.
    pub operation: &'static str,
    /// Who asked.
    pub requester: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub object: String,
    /// The object's kind (`Secret`, `ConfigMap`, `Pod`) and uid, for the Event about it.
    pub kind: String,
    /// The object's uid.
    pub object_uid: Option<String>,
    /// Whether the request was a dry run (nothing was changed).
    pub dry_run: bool,
}

/// What a decision was about, as the webhook that decided found it: returned by the decision
/// with its verdict, and put in the entry once.
#[derive(Debug, Clone, Default)]
pub struct About {
    /// `namespace/name` of the release, when the object belongs to one.
    pub release: Option<String>,
    /// The record's revision, or the pod's release's latest.
    pub revision: Option<u32>,
    /// Its status as Helm reads it.
    pub status: Option<Status>,
    /// e.g. `pending-upgrade -> deployed`, `deployed -> (deleted)`.
    pub transition: Option<String>,
    /// The chart, `name-version`.
    pub chart: Option<String>,
    /// Mutations only: the release state and what the pod will do.
    pub release_state: Option<String>,
    /// The pod's action, as the action annotation says it.
    pub action: Option<String>,
    /// Mutations only: the HelmChart that made the pod, `namespace/name`.
    pub helm_chart: Option<(String, String)>,
    /// A deletion let go: its copy in the recycle bin, `namespace/name`.
    pub recycled: Option<String>,
}

/// The verdict's part of an entry: what was decided, by which rule, in which mode.
#[derive(Debug, Clone)]
pub(crate) struct Judged {
    pub(crate) decision: Decision,
    pub(crate) reason: Reason,
    pub(crate) mode: Mode,
    pub(crate) message: Option<String>,
    pub(crate) detail: Option<String>,
}

impl Asked {
    /// What `request`, to `webhook`, asks.
    pub(crate) fn of(webhook: super::Webhook, request: &AdmissionRequest<ReviewObject>) -> Asked {
        Asked {
            webhook: webhook.as_str(),
            // A forged request can put anything here; the API server's own are far shorter.
            uid: echoed(&request.uid).into_owned(),
            operation: operation_name(&request.operation),
            requester: echoed(request.user_info.username.as_deref().unwrap_or_default()).into_owned(),
            namespace: echoed(request.namespace.as_deref().unwrap_or_default()).into_owned(),
            object: echoed(&request.name).into_owned(),
            kind: echoed(&request.kind.kind).into_owned(),
            object_uid: request
                .old_object
                .as_ref()
                .or(request.object.as_ref())
                .and_then(|o| o.metadata.uid.as_deref())
                .map(|uid| echoed(uid).into_owned()),
            dry_run: request.dry_run,
        }
    }
}

impl LedgerEntry {
    /// The entry of a decision: what was `asked`, what it was `about`, and what was `judged`.
    pub(crate) fn new(asked: Asked, about: About, judged: Judged) -> LedgerEntry {
        let Judged { decision, reason, mode, message, detail } = judged;
        LedgerEntry { asked, about, decision, reason, mode, message, detail }
    }

    /// The `auditAnnotations` of the response; the API server prefixes each key with the webhook
    /// name.
    pub(crate) fn audit_annotations(&self) -> HashMap<String, String> {
        let mut annotations = HashMap::from([
            ("decision".to_owned(), self.decision.as_str().to_owned()),
            ("reason".to_owned(), self.reason.as_str().to_owned()),
        ]);
        let mut put = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                annotations.insert(key.to_owned(), value);
            }
        };
        put("release", self.about.release.clone());
        put("revision", self.about.revision.map(|r| r.to_string()));
        put("status", self.about.status.map(|s| s.to_string()));
        put("mode", (self.mode != Mode::Enforce).then(|| self.mode.to_string()));
        put("release-state", self.about.release_state.clone());
        put("action", self.about.action.clone());
        put("recycle-bin-copy", self.about.recycled.clone());
        match self.reason {
            Reason::BreakGlass => put("break-glass-reason", self.detail.clone()),
            Reason::Exempt => put("exempt-identity", self.detail.clone()),
            // D10, and T6: Fleet's agent writing back the revision a failed rollback superseded.
            Reason::ReleaseForget | Reason::HelmUpdate => put("forgetter-identity", self.detail.clone()),
            _ => {}
        }
        annotations
    }

    /// The Event this decision calls for: a DELETE or UPDATE of a record (not a dry run) that was
    /// refused, or let through with a warning or as a would-be refusal, or whose record was kept
    /// in the recycle bin.
    pub(crate) fn notice(&self) -> Option<Notice> {
        let refused_or_warned = self.decision != Decision::Allowed || self.message.is_some();
        let action = match self.asked.operation {
            "DELETE" => "Delete",
            "UPDATE" => "Update",
            "CREATE" if self.asked.kind == "Namespace" => "Create",
            _ => return None,
        };
        // An allowed opt-out is an Event too: the namespace is no longer (fully) guarded.
        let opted_out = self.reason == Reason::OptOut && self.about.transition.is_some();
        if self.asked.webhook != super::Webhook::Validate.as_str()
            || self.asked.dry_run
            || !(refused_or_warned || opted_out || self.about.recycled.is_some())
            || self.reason == Reason::NotAReleaseRecord
        {
            return None;
        }
        let message = self.message.as_deref().unwrap_or_default();
        let message = message.strip_prefix("helm-guard: ").unwrap_or(message);
        let first_sentence =
            message.split_once(". ").map_or(message, |(first, _)| first).trim_end_matches('.');
        let kept = self.about.recycled.as_deref().map(|copy| {
            let (namespace, release) =
                self.about.release.as_deref().and_then(|r| r.split_once('/')).unwrap_or_default();
            let bin = copy.split_once('/').map_or(copy, |(bin, _)| bin);
            let restore = crate::recycle_bin::restore_command(release, namespace, self.about.revision, bin);
            format!("; a copy is kept in helm-guard's recycle bin as Secret {copy} (`{restore}`)")
        });
        let note = match (opted_out, self.about.transition.as_deref()) {
            (true, Some(change)) => format!(
                "allowed opt-out ({change}) by {} ({}): the guard's protection of this namespace's Helm releases is {}",
                self.asked.requester,
                self.detail.as_deref().unwrap_or_default(),
                if change.ends_with("ignored") { "off" } else { "weaker" }
            ),
            _ => format!(
                "{} {} by {} ({}){}{}",
                self.decision,
                self.asked.operation,
                self.asked.requester,
                self.reason.as_str(),
                if first_sentence.is_empty() { String::new() } else { format!(": {first_sentence}") },
                kept.unwrap_or_default()
            ),
        };
        Some(Notice {
            // Events about a cluster-scoped object live in `default`, as the API server wants.
            namespace: if self.asked.kind == "Namespace" {
                "default".to_owned()
            } else {
                self.asked.namespace.clone()
            },
            api_version: "v1".to_owned(),
            kind: self.asked.kind.clone(),
            name: self.asked.object.clone(),
            uid: self.asked.object_uid.clone(),
            action: action.to_owned(),
            reason: camel_case(self.reason.as_str()),
            note,
            type_: if self.reason == Reason::ReleaseForget { "Normal" } else { "Warning" },
            watched: false,
        })
    }

    /// The Event a mutation calls for: a helm-install pod (not a dry run) whose command or
    /// failure policy the guard changed, on the HelmChart that made it.
    pub(crate) fn pod_notice(&self, chart: &crate::cluster::helmcharts::HelmChart) -> Option<Notice> {
        let changed = self.about.transition.as_deref()?;
        if self.asked.webhook != super::Webhook::Mutate.as_str() || self.asked.dry_run {
            return None;
        }
        Some(Notice {
            namespace: chart.namespace.clone(),
            api_version: crate::cluster::helmcharts::API_VERSION.to_owned(),
            kind: crate::cluster::helmcharts::KIND.to_owned(),
            name: chart.name.clone(),
            uid: chart.uid.clone(),
            action: "Mutate".to_owned(),
            reason: "HelmInstallPodRewritten".to_owned(),
            type_: "Warning",
            watched: false,
            note: format!(
                "rewrote the helm-install pod of release {}: {changed} (release {}, revision {}); the entry script will now: {}",
                self.about.release.as_deref().unwrap_or_default(),
                self.about.release_state.as_deref().unwrap_or("unknown"),
                self.about.revision.map_or_else(|| "none".to_owned(), |r| r.to_string()),
                self.about.action.as_deref().unwrap_or_default(),
            ),
        })
    }

    /// Writes the ledger line.
    pub(crate) fn emit(&self) {
        macro_rules! ledger_event {
            ($level:expr) => {
                tracing::event!(
                    target: "helm_guard::ledger",
                    $level,
                    webhook = self.asked.webhook,
                    uid = self.asked.uid.as_str(),
                    operation = self.asked.operation,
                    requester = self.asked.requester.as_str(),
                    namespace = self.asked.namespace.as_str(),
                    object = self.asked.object.as_str(),
                    dry_run = self.asked.dry_run,
                    release = self.about.release.as_deref(),
                    revision = self.about.revision,
                    status = self.about.status.map(Status::as_str),
                    transition = self.about.transition.as_deref(),
                    chart = self.about.chart.as_deref(),
                    decision = self.decision.as_str(),
                    reason = self.reason.as_str(),
                    mode = self.mode.as_str(),
                    detail = self.detail.as_deref(),
                    release_state = self.about.release_state.as_deref(),
                    action = self.about.action.as_deref(),
                    recycled = self.about.recycled.as_deref(),
                    // The event's message: the verdict's when it has one, so that a line has one
                    // `message` key (a format string beside a `message` field wrote two).
                    message = self.message.as_deref().unwrap_or("admission decision"),
                )
            };
        }
        if self.decision == Decision::Allowed {
            ledger_event!(tracing::Level::INFO);
        } else {
            ledger_event!(tracing::Level::WARN);
        }
    }
}

/// The operation as the API server names it (kube's `Operation` spells its variants in Rust).
fn operation_name(operation: &kube::core::admission::Operation) -> &'static str {
    use kube::core::admission::Operation;
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// `last-deployed-revision` as Events spell reasons: `LastDeployedRevision`.
fn camel_case(code: &str) -> String {
    code.split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::log_format::Captured;

    fn entry(decision: Decision, message: Option<&str>) -> LedgerEntry {
        LedgerEntry {
            asked: Asked {
                webhook: "validate",
                uid: "u".into(),
                operation: "DELETE",
                requester: "admin".into(),
                namespace: "demo".into(),
                object: "sh.helm.release.v1.web.v3".into(),
                kind: "Secret".into(),
                object_uid: None,
                dry_run: false,
            },
            about: About {
                release: Some("demo/web".into()),
                revision: Some(3),
                status: Some(Status::Deployed),
                ..About::default()
            },
            decision,
            reason: Reason::LatestDeployedRevision,
            mode: Mode::Enforce,
            message: message.map(str::to_owned),
            detail: None,
        }
    }

    /// The ledger line as `serve --log-format json` writes it.
    fn json_line(entry: &LedgerEntry) -> String {
        let out = Captured::default();
        let subscriber = crate::server::log_format::json_subscriber(out.clone()).finish();
        tracing::subscriber::with_default(subscriber, || entry.emit());
        out.text()
    }

    #[test]
    fn the_ledger_line_has_one_message_the_verdicts_when_there_is_one() {
        let denied = json_line(&entry(Decision::Denied, Some("helm-guard: revision 3 is the latest")));
        assert_eq!(denied.matches("\"message\":").count(), 1, "{denied}");
        let line: serde_json::Value = serde_json::from_str(&denied).unwrap();
        assert_eq!(line["message"], "helm-guard: revision 3 is the latest");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["reason"], "latest-deployed-revision");

        let allowed = json_line(&entry(Decision::Allowed, None));
        assert_eq!(allowed.matches("\"message\":").count(), 1, "{allowed}");
        let line: serde_json::Value = serde_json::from_str(&allowed).unwrap();
        assert_eq!(line["message"], "admission decision");
        assert_eq!(line["level"], "INFO");
    }

    #[test]
    fn a_deletion_whose_record_was_kept_is_an_event_that_says_where_and_how_to_restore() {
        let mut glass = entry(Decision::Allowed, None);
        glass.reason = Reason::BreakGlass;
        assert_eq!(glass.notice(), None, "an allowance without a copy is no Event");
        glass.about.recycled = Some("helm-guard/helm-guard-recycled-0123".into());
        let notice = glass.notice().unwrap();
        assert_eq!(
            (notice.reason.as_str(), notice.name.as_str()),
            ("BreakGlass", "sh.helm.release.v1.web.v3")
        );
        assert_eq!(
            notice.note,
            "allowed DELETE by admin (break-glass); a copy is kept in helm-guard's recycle bin as Secret \
             helm-guard/helm-guard-recycled-0123 (`helm-guard restore web -n demo --revision 3`)"
        );
        let mut warned = entry(Decision::Warned, Some("helm-guard: revision 3 is the latest. Instead: x"));
        warned.about.recycled = glass.about.recycled.clone();
        let note = warned.notice().unwrap().note;
        assert!(
            note.starts_with(
                "warned DELETE by admin (latest-deployed-revision): revision 3 is the latest; a copy is kept"
            ),
            "{note}"
        );
    }

    /// A forgetter forgetting a release is its normal course: a Normal Event naming it, the
    /// identity in the audit annotations; an override or a refusal is a Warning.
    #[test]
    fn a_forgetters_forget_is_a_normal_event_and_names_the_forgetter() {
        let mut forget = entry(Decision::Allowed, None);
        forget.reason = Reason::ReleaseForget;
        forget.detail = Some("group:system:serviceaccounts:cattle-fleet-system".into());
        forget.about.recycled = Some("helm-guard/helm-guard-recycled-0123".into());
        let notice = forget.notice().unwrap();
        assert_eq!((notice.reason.as_str(), notice.type_), ("ReleaseForget", "Normal"));
        assert_eq!(
            forget.audit_annotations().get("forgetter-identity").map(String::as_str),
            Some("group:system:serviceaccounts:cattle-fleet-system")
        );
        forget.reason = Reason::BreakGlass;
        assert_eq!(forget.notice().unwrap().type_, "Warning");
        assert_eq!(entry(Decision::Denied, Some("refused")).notice().unwrap().type_, "Warning");
    }

    #[test]
    fn reasons_read_as_event_reasons() {
        assert_eq!(super::camel_case("last-deployed-revision"), "LastDeployedRevision");
        assert_eq!(super::camel_case("exempt"), "Exempt");
    }
}
