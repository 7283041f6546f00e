//! `helm-guard audit`: the guard's decisions as the API server's audit log recorded them.
//!
//! The API server writes a webhook's auditAnnotations into each event's `annotations` as
//! `<webhook name>/<key>`; this command gathers them per request.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::{Exit, NoInput, Output, count, input_name, input_path, print_data, read_input};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  helm-guard audit /var/log/kubernetes/audit.log              every decision the guard made\n  helm-guard audit audit.log --denied -o json                 the refusals, for a script\n  kubectl logs -n kube-system kube-apiserver-node1 | helm-guard audit\n\nExit status: 0 when every decision listed allowed its request, 1 when one was denied or warned, 2 when the input is not an audit log."
)]
pub(crate) struct AuditArgs {
    /// An audit log in JSON lines (the API server's --audit-log-path); `-` for standard input,
    /// which is also read when piped and no FILE is given.
    pub file: Option<PathBuf>,
    /// Only this webhook's decisions (default: every webhook that annotated a `decision`).
    #[arg(long)]
    pub webhook: Option<String>,
    /// Only denied (and warned) requests.
    #[arg(long)]
    pub denied: bool,
    /// Output format: a line per decision with a summary, or a JSON or YAML array (`[]` when
    /// nothing matched).
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: EventUser,
    #[serde(default)]
    object_ref: EventObject,
    #[serde(default)]
    response_status: Option<EventStatus>,
    #[serde(default)]
    stage_timestamp: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
struct EventUser {
    #[serde(default)]
    username: String,
}

#[derive(Debug, Default, Deserialize)]
struct EventObject {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct EventStatus {
    #[serde(default)]
    code: u16,
}

/// One admission decision found in the log.
#[derive(Debug, Serialize)]
pub(crate) struct AuditedDecision {
    pub time: String,
    pub webhook: String,
    pub verb: String,
    pub user: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub code: Option<u16>,
    pub decision: String,
    /// Every other annotation of the webhook (reason, release, revision, status, ...).
    pub annotations: BTreeMap<String, String>,
}

/// Reads the decisions out of an audit log; lines that are not audit events are counted, not fatal.
pub(crate) fn read_decisions(reader: impl BufRead) -> anyhow::Result<(Vec<AuditedDecision>, usize)> {
    let mut decisions = Vec::new();
    let mut unreadable = 0;
    for line in reader.lines() {
        let line = line.context("reading the audit log")?;
        if line.trim().is_empty() {
            continue;
        }
        let Ok(event) = serde_json::from_str::<Event>(&line) else {
            unreadable += 1;
            continue;
        };
        // The annotations are complete once the response is: skip the earlier stages.
        if event.stage != "ResponseComplete" {
            continue;
        }
        let webhooks: Vec<&str> = event
            .annotations
            .keys()
            .filter_map(|key| key.strip_suffix("/decision"))
            // The authorizer annotates `authorization.k8s.io/decision`; built-in plugins use
            // Kubernetes' own domains. Webhooks are the rest.
            .filter(|name| !name.ends_with(".k8s.io") && !name.ends_with(".kubernetes.io"))
            .collect();
        for name in webhooks {
            let prefix = format!("{name}/");
            let mut annotations: BTreeMap<String, String> = event
                .annotations
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_owned(), v.clone())))
                .collect();
            let decision = annotations.remove("decision").unwrap_or_default();
            decisions.push(AuditedDecision {
                time: event.stage_timestamp.clone(),
                webhook: name.to_owned(),
                verb: event.verb.clone(),
                user: event.user.username.clone(),
                resource: event.object_ref.resource.clone(),
                namespace: event.object_ref.namespace.clone(),
                name: event.object_ref.name.clone(),
                code: event.response_status.as_ref().map(|s| s.code),
                decision,
                annotations,
            });
        }
    }
    Ok((decisions, unreadable))
}

pub(super) fn run(args: &AuditArgs) -> anyhow::Result<Exit> {
    let missing = NoInput { what: "audit log", usage: "helm-guard audit [OPTIONS] <FILE>" };
    let path = match input_path(args.file.as_deref(), missing) {
        Ok(path) => path,
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(Exit::BadInput);
        }
    };
    let text = match read_input(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("error: {error:#}");
            return Ok(Exit::BadInput);
        }
    };
    let (mut decisions, unreadable) = read_decisions(text.as_slice())?;
    if unreadable > 0 {
        let verb = if unreadable == 1 { "is not an audit event" } else { "are not audit events" };
        eprintln!("warning: {} of {} {verb}", count(unreadable, "line"), input_name(path));
    }
    if decisions.is_empty() && unreadable > 0 {
        eprintln!("error: {}: no audit events with webhook decisions", input_name(path));
        return Ok(Exit::BadInput);
    }
    if let Some(webhook) = &args.webhook {
        let seen: BTreeSet<String> = decisions.iter().map(|d| d.webhook.clone()).collect();
        decisions.retain(|d| &d.webhook == webhook);
        if decisions.is_empty() {
            let seen: Vec<String> = seen.into_iter().collect();
            match seen.is_empty() {
                true => eprintln!("note: no webhook decisions in {}", input_name(path)),
                false => eprintln!(
                    "note: no decisions of webhook {webhook}; {} has decisions of: {}",
                    input_name(path),
                    seen.join(", ")
                ),
            }
        }
    }
    if args.denied {
        decisions.retain(|d| d.decision != "allowed");
    }
    if !print_data(&decisions, args.output)? {
        for d in &decisions {
            let extra: Vec<String> = d.annotations.iter().map(|(k, v)| format!("{k}={v}")).collect();
            outln!(
                "{}  {:<7} {:<6} {}/{} ({})  by {}  -> {} {}  {}",
                d.time,
                d.decision,
                d.verb,
                d.namespace,
                d.name,
                d.resource,
                d.user,
                d.code.map_or_else(|| "-".into(), |c| c.to_string()),
                d.webhook,
                extra.join(" ")
            )?;
        }
        let with = |what: &str| decisions.iter().filter(|d| d.decision == what).count();
        outln!(
            "\n{}: {} allowed, {} denied, {} warned",
            count(decisions.len(), "decision"),
            with("allowed"),
            with("denied"),
            with("warned")
        )?;
    }
    Ok(if decisions.iter().any(|d| d.decision != "allowed") { Exit::Findings } else { Exit::Ok })
}
