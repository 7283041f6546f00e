//! The documentation as a user reads it: every `console` block of README.md and the book
//! (`docs/`) is run and its output compared (trycmd: `$ helm-guard ...`, `? N` for an exit
//! status other than 0); those that need a cluster are `sh` blocks, run by the end-to-end
//! suites. And every link between the book's pages, and from README.md into it, leads to a file
//! that exists and, with `#anchor`, to a heading in it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of the book, recursively.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut pages);
    pages.sort();
    pages
}

#[test]
fn every_console_block_runs_as_shown() {
    let cases = trycmd::TestCases::new();
    cases.register_bin("helm-guard", trycmd::cargo::cargo_bin!("helm-guard"));
    for page in pages() {
        cases.case(page);
    }
}

/// A heading's anchor as mdBook and GitHub make it: lower case, letters, digits, `-` and `_`
/// kept, spaces to `-`, the rest dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A page's lines outside fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    prose_lines(text)
        .filter(|line| line.starts_with('#'))
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect()
}

/// The targets of a page's inline links `[text](target)`, outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        // Drop code spans: a `[x](y)` inside backticks is not a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_link_of_the_book_and_readme_leads_somewhere() {
    let docs = root().join("docs");
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            let Ok(resolved) = resolved.canonicalize() else {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            };
            // The book's pages may link only within the book (mdBook copies nothing else).
            if page.starts_with(&docs) && !resolved.starts_with(docs.canonicalize().unwrap()) {
                broken.push(format!("{}: {target}: outside the book (docs/)", page.display()));
                continue;
            }
            if !fragment.is_empty() {
                let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&target_text).contains(fragment) {
                    broken.push(format!("{}: {target}: no heading with that anchor", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let docs = root().join("docs");
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&docs))
        .map(|p| p.strip_prefix(&docs).unwrap().to_string_lossy().into_owned())
        .filter(|p| p != "SUMMARY.md" && !listed.contains(p))
        .collect();
    assert!(missing.is_empty(), "pages docs/SUMMARY.md does not list: {missing:?}");
}

#[test]
fn the_readme_stays_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines < 200, "README.md has {lines} lines: what it does not need belongs in the book");
    // Its first two commands: the guard on the snapshot, and the test command .ci/run runs.
    let first_block: Vec<&str> = readme.split("```sh\n").nth(1).unwrap().lines().take(2).collect();
    assert!(first_block[0].starts_with("cargo run -- serve --snapshot examples/cluster-snapshot.json"));
    assert_eq!(first_block[1], "cargo test --locked");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("cargo test --locked"), ".ci/run runs README's test command");
}

/// BENCHMARKS.md is a report of today's figures, each with its command and date; the runs they
/// replaced are git's (issue 60: it had grown to 1,269 lines of history, included whole in the
/// book).
#[test]
fn the_benchmarks_are_todays_figures_not_their_history() {
    let text = std::fs::read_to_string(root().join("BENCHMARKS.md")).unwrap();
    let lines = text.lines().count();
    assert!(lines < 500, "BENCHMARKS.md has {lines} lines: keep today's figures, git keeps the rest");
    // The gate's baseline is the one the report gives.
    let baseline = std::fs::read_to_string(root().join("benches/instructions.baseline")).unwrap();
    for line in baseline.lines().filter(|l| !l.starts_with('#')) {
        let (kind, count) = line.split_once(' ').unwrap();
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| {kind} ")))
            .unwrap_or_else(|| panic!("no row for {kind}"));
        assert!(
            row.contains(&format!("**{}**", group_thousands(count))),
            "{row} does not show the baseline {count}"
        );
    }
}

fn group_thousands(digits: &str) -> String {
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The fenced block of `lang` that follows `after` in `text`.
fn block_after<'a>(text: &'a str, after: &str, lang: &str) -> &'a str {
    let from = text.find(after).unwrap_or_else(|| panic!("no {after:?}"));
    let open = format!("```{lang}\n");
    let start = from + text[from..].find(&open).unwrap() + open.len();
    let end = start + text[start..].find("```").unwrap();
    &text[start..end]
}

/// README's two minutes without a cluster, as a user runs them: its first command (on ports of
/// the test's own), then its `curl`, whose answer, cut as its `jq` cuts it, is README's.
#[test]
fn the_readmes_demo_answers_as_shown() {
    use std::io::{BufRead, BufReader};
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let first = block_after(&readme, "# helm-guard", "sh").lines().next().unwrap();
    let args: Vec<&str> = first.strip_prefix("cargo run -- ").unwrap().split_whitespace().collect();
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("dev-certs");
    let mut argv: Vec<String> = Vec::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        match *word {
            // Ports of the test's own, certificates in its directory.
            "--listen" | "--metrics-listen" => argv.extend([(*word).to_owned(), "127.0.0.1:0".into()]),
            "--dev-certs" => argv.extend([(*word).to_owned(), certs.to_string_lossy().into_owned()]),
            other => {
                argv.push(other.to_owned());
                continue;
            }
        }
        words.next();
    }
    let mut guard = std::process::Command::new(env!("CARGO_BIN_EXE_helm-guard"))
        .args(&argv)
        .current_dir(root())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let serving: serde_json::Value = BufReader::new(guard.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(&line).ok())
        .find(|event| event["message"] == "serving")
        .expect("the guard serves");
    let port = serving["addr"].as_str().unwrap().rsplit(':').next().unwrap().to_owned();

    // README's curl, on that port, with the certificates in the test's directory.
    let curl = block_after(&readme, "## Two minutes, no cluster", "sh");
    let curl = curl.split(" | jq").next().unwrap().replace("\\\n", " ");
    let curl = curl
        .replace("target/dev-certs", &certs.to_string_lossy())
        .replace("localhost:8443", &format!("localhost:{port}"));
    let answer = std::process::Command::new("bash").args(["-c", &curl]).current_dir(root()).output();
    let _ = guard.kill();
    let _ = guard.wait();
    let answer = answer.expect("curl, as README runs it");
    let review: serde_json::Value = serde_json::from_slice(&answer.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&answer.stderr)));
    // README's jq: .response | {allowed, reason: .auditAnnotations.reason, message: .status.message}
    let response = &review["response"];
    let cut = serde_json::json!({
        "allowed": response["allowed"],
        "reason": response["auditAnnotations"]["reason"],
        "message": response["status"]["message"],
    });
    let shown: serde_json::Value =
        serde_json::from_str(block_after(&readme, "## Two minutes, no cluster", "json")).unwrap();
    assert_eq!(cut, shown);
}
