//! The reference pages of the book that are generated from the code (`docs/reference/`): the
//! command line from the clap definitions, the chart's values from `values.yaml`, the metrics
//! from the registry, the reason codes from [`crate::policy::Reason`]. Each test fails when its
//! page and the code disagree; `HELM_GUARD_BLESS=1 cargo test --lib reference` writes the pages.

use std::fmt::Write as _;
use std::path::Path;

/// The first line of every generated page.
const GENERATED: &str = "<!-- Generated from the code by `src/reference.rs`: `HELM_GUARD_BLESS=1 cargo test --lib reference` rewrites it; `cargo test` fails when it is stale. -->";

/// Compares `page` with the file at `path` (from the repository root), or writes it when
/// HELM_GUARD_BLESS is set.
fn agree(path: &str, page: &str) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("HELM_GUARD_BLESS").is_some() {
        std::fs::write(&file, page).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        on_disk == page,
        "{path} is stale: `HELM_GUARD_BLESS=1 cargo test --lib reference` rewrites it (and review the diff)"
    );
}

/// Every subcommand's `--help`, as a user sees it (100 columns, no colour).
fn cli_page() -> String {
    let mut cli = <crate::cli::Cli as clap::CommandFactory>::command().term_width(100);
    cli.build();
    let mut page = format!(
        "{GENERATED}\n\n# Command line\n\nEvery command's `--help`, as this version prints it. Exit statuses, output \
         formats and the release states are in [Conventions](commands.md).\n\n## helm-guard\n\n```text\n{}```\n",
        cli.render_long_help()
    );
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let mut sub = sub.clone().term_width(100);
        let name = sub.get_name().to_owned();
        let help = sub.render_long_help().to_string();
        let _ = write!(page, "\n## helm-guard {name}\n\n```text\n{}\n```\n", help.trim_end());
    }
    page
}

/// The metrics the guard exports, from the registry: name, type, help.
fn metrics_page() -> String {
    let metrics = crate::server::metrics::Metrics::new();
    let index = crate::cluster::index::ReleaseIndex::new(crate::cluster::index::SourceKind::Snapshot);
    // A family without a series is not rendered: one decision and one opted-out namespace.
    metrics.decision(
        crate::server::metrics::DecisionLabels {
            webhook: crate::admission::Webhook::Validate,
            operation: "DELETE",
            decision: crate::policy::Decision::Denied,
            reason: crate::policy::Reason::LastDeployedRevision,
        },
        std::time::Duration::ZERO,
    );
    let ignored = crate::cluster::NamespaceInfo { ignored: true, ..Default::default() };
    index.namespaces().set("ignored", ignored);
    let text = metrics.render(
        &index,
        &|_, _| crate::release::writer::Liveness::Unknown,
        900,
        crate::policy::Mode::Enforce,
        0.0,
    );
    let mut rows: Vec<(String, String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            rows.push((name.to_owned(), String::new(), help.to_owned()));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Some(row) = rows.iter_mut().find(|r| r.0 == name) {
                row.1 = kind.to_owned();
            }
        }
    }
    let mut page = format!(
        "{GENERATED}\n\n# Metrics\n\nServed on `--metrics-listen` at `/metrics` (Prometheus text format), with \
         `/healthz` and `/readyz`. [Monitoring](../operate/monitoring.md) says what to watch; \
         `manifests/monitoring/` has the alerts and the dashboard built on these.\n\n\
         | metric | type | what it counts |\n|---|---|---|\n"
    );
    for (name, kind, help) in rows {
        // The names the samples are served under, which queries use.
        let name = match kind.as_str() {
            "counter" => format!("{name}_total"),
            "info" => format!("{name}_info"),
            _ => name,
        };
        let _ = writeln!(page, "| `{name}` | {kind} | {} |", help.replace('|', "\\|"));
    }
    page
}

/// The reason codes, from the enum, with their documentation.
fn reasons_page() -> String {
    use strum::{EnumMessage, VariantArray};
    let mut page = format!(
        "{GENERATED}\n\n# Reason codes\n\nThe `reason` of every verdict: the audit annotation, the ledger line's \
         field, the label of `helm_guard_admission_decisions_total`. The rules they name (D, U, N) are \
         [POLICY.md](../POLICY.md)'s.\n\n| reason | when |\n|---|---|\n"
    );
    for reason in crate::policy::Reason::VARIANTS {
        let doc =
            reason.get_documentation().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = writeln!(page, "| `{}` | {} |", reason.as_str(), doc.replace('|', "\\|"));
    }
    page
}

/// The chart's values, from `values.yaml`: each key's path, its default, and the comment above
/// it (a comment followed by a blank line speaks for the group below and is left out).
fn values_page() -> String {
    let yaml =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/helm-guard/values.yaml"))
            .unwrap();
    let mut page = format!(
        "{GENERATED}\n\n# Chart values\n\nEvery value of `charts/helm-guard/values.yaml`, its default and what it does \
         (the comment above it there). `values.schema.json` rejects any other key and a mistyped \
         value at `helm lint`, `install` and `upgrade`.\n\n| value | default | what it does |\n|---|---|---|\n"
    );
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let lines: Vec<&str> = yaml.lines().collect();
    // The indent of a list's items, while inside one: their keys are the list's default.
    let mut in_list: Option<usize> = None;
    for (at, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            comment.clear();
            continue;
        }
        if trimmed.starts_with("- ") {
            in_list = Some(indent);
            continue;
        }
        if in_list.is_some_and(|items| indent > items) {
            continue;
        }
        in_list = None;
        if let Some(text) = trimmed.strip_prefix('#') {
            comment.push(text.trim().to_owned());
            continue;
        }
        let Some((key, value)) =
            trimmed.split_once(':').filter(|(k, _)| !k.starts_with('-') && !k.contains(' '))
        else {
            continue;
        };
        while path.last().is_some_and(|(i, _)| *i >= indent) {
            path.pop();
        }
        path.push((indent, key.to_owned()));
        let value = value.trim();
        // A mapping or a list below: a row only when it is a list (its items are its default).
        let next = lines.get(at + 1).map(|l| l.trim_start()).unwrap_or_default();
        let default = if !value.is_empty() {
            format!("`{value}`")
        } else if next.starts_with("- ") {
            "a list (values.yaml)".to_owned()
        } else if !comment.is_empty() {
            "the keys below".to_owned()
        } else {
            continue;
        };
        let name = path.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>().join(".");
        let _ = writeln!(
            page,
            "| `{name}` | {} | {} |",
            default.replace('|', "\\|"),
            comment.join(" ").replace('|', "\\|")
        );
        comment.clear();
    }
    page
}

#[test]
fn the_cli_reference_is_the_help() {
    agree("docs/reference/cli.md", &cli_page());
}

#[test]
fn the_metrics_reference_is_the_registry() {
    let page = metrics_page();
    assert!(page.contains("| `helm_guard_admission_decisions_total` | counter |"), "{page}");
    agree("docs/reference/metrics.md", &page);
}

#[test]
fn the_reason_codes_are_the_policys() {
    let page = reasons_page();
    assert!(page.contains("| `last-deployed-revision` | D4: "), "{page}");
    agree("docs/reference/reasons.md", &page);
}

#[test]
fn the_values_reference_is_values_yaml() {
    let page = values_page();
    assert!(page.contains("| `recycleBin.namespace` | `\"\"` | Where the copies are kept"), "{page}");
    let undocumented: Vec<&str> =
        page.lines().filter(|row| row.starts_with("| `") && row.ends_with("|  |")).collect();
    assert!(undocumented.is_empty(), "every value has a comment in values.yaml: {undocumented:#?}");
    agree("docs/reference/values.md", &page);
}
