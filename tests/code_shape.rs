//! The shape README's code map promises, kept by tests: no file of a thousand lines, no two
//! modules of one directory that import each other, directly or round a longer circle (issue 61:
//! `admission/delete.rs` and `validating.rs`, `cluster/claim_books.rs` and `coordination.rs` did),
//! and the walk of one live DELETE in at most ten files that hold what it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn source_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_file_of_a_thousand_lines() {
    let mut files = Vec::new();
    source_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .map(|f| (f, std::fs::read_to_string(f).unwrap().lines().count()))
        .filter(|(_, lines)| *lines >= 1000)
        .map(|(f, lines)| format!("{} ({lines})", f.display()))
        .collect();
    assert!(long.is_empty(), "split by concept: {long:?}");
}

/// The first segments of the paths that follow `prefix` (`super::`, `crate::cluster::`), a use
/// group's (`super::{a::X, b}`) included.
fn first_segments(text: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices(prefix) {
        let rest = &text[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split at commas outside nested braces.
            let (mut depth, mut start) = (0usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(group[start..i].trim_start()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(group[start..i].trim_start()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found
}

#[test]
fn no_two_modules_of_a_directory_import_each_other() {
    let mut files = Vec::new();
    source_files(&src(), &mut files);
    let mut by_dir: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for file in files.into_iter().filter(|f| f.file_name().is_some_and(|n| n != "mod.rs" && n != "lib.rs")) {
        by_dir.entry(file.parent().unwrap().to_owned()).or_default().push(file);
    }
    let mut circles = Vec::new();
    for (dir, files) in &by_dir {
        let stem = |f: &PathBuf| f.file_stem().unwrap().to_string_lossy().into_owned();
        let siblings: BTreeSet<String> = files.iter().map(stem).collect();
        let crate_path = dir.strip_prefix(src()).unwrap().to_string_lossy().replace('/', "::");
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            // The code, not its tests or its comments.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let code: String =
                code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
            let mut named = first_segments(&code, "super::");
            if !crate_path.is_empty() {
                named.extend(first_segments(&code, &format!("crate::{crate_path}::")));
            }
            named.retain(|n| siblings.contains(n) && *n != stem(file));
            edges.insert(stem(file), named);
        }
        // Every module's reach: a circle is a module that reaches itself.
        for start in edges.keys() {
            let (mut stack, mut seen) = (vec![(start.clone(), vec![start.clone()])], BTreeSet::new());
            while let Some((at, path)) = stack.pop() {
                for next in &edges[&at] {
                    if next == start {
                        circles.push(format!("{}: {} -> {next}", dir.display(), path.join(" -> ")));
                    } else if seen.insert(next.clone()) {
                        stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
                    }
                }
            }
        }
    }
    assert!(circles.is_empty(), "modules that import each other: {circles:#?}");
}

#[test]
fn the_import_reader_sees_groups_and_paths() {
    let code = "use super::{decided::{Decided, requester}, Admission};\nuse super::ledger::About;\nlet x = crate::cluster::fence::Fence::new();";
    assert_eq!(
        first_segments(code, "super::"),
        ["Admission", "decided", "ledger"].map(str::to_owned).into_iter().collect()
    );
    assert_eq!(first_segments(code, "crate::cluster::"), ["fence".to_owned()].into_iter().collect());
}

/// README's code map follows one live DELETE in at most ten files: each listed file exists, once,
/// and holds what its step names (each `name` or `Type::name` a word of that file or of another
/// file the step names), so a rename or a move shows here before the map misleads a reader.
#[test]
fn the_code_map_walks_one_delete_in_ten_files_that_hold_what_it_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let map = readme.split("## Code map: one live DELETE").nth(1).unwrap().split("\n## ").next().unwrap();
    // The numbered steps, each with the lines that continue it.
    let mut steps: Vec<String> = Vec::new();
    for line in map.lines() {
        let numbered = line
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if numbered {
            steps.push(line.to_owned());
        } else if let Some(step) = steps.last_mut().filter(|_| line.starts_with("   ")) {
            step.push_str(line);
        }
    }
    assert!((2..=10).contains(&steps.len()), "{} steps: {steps:#?}", steps.len());
    let mut all = Vec::new();
    source_files(&src(), &mut all);
    // A file named by its path, or by its name alone where one file of src/ has it.
    let resolve = |name: &str| -> Option<PathBuf> {
        if name.starts_with("src/") {
            return Some(root.join(name));
        }
        let mut found = all.iter().filter(|f| f.file_name().is_some_and(|n| n == name));
        let file = found.next()?.clone();
        found.next().is_none().then_some(file)
    };
    let mut walked = BTreeSet::new();
    for step in &steps {
        let quoted: Vec<&str> = step.split('`').skip(1).step_by(2).collect();
        let files: Vec<PathBuf> =
            quoted.iter().filter(|q| q.ends_with(".rs")).filter_map(|q| resolve(q)).collect();
        let first = files.first().unwrap_or_else(|| panic!("a step without a file: {step}"));
        assert!(first.is_file(), "{} is listed and not there", first.display());
        assert!(walked.insert(first.clone()), "{} is walked twice", first.display());
        let text: String = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
        let is_word = |word: &str| {
            text.match_indices(word).any(|(at, _)| {
                let before =
                    text[..at].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                let after =
                    text[at + word.len()..].chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                before && after
            })
        };
        for name in quoted.iter().filter(|q| !q.ends_with(".rs") && !q.contains(' ') && !q.contains('-')) {
            let last = name.rsplit("::").next().unwrap();
            assert!(is_word(last), "`{name}`, named in the step of {}, is not in it", first.display());
        }
    }
}
