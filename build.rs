//! Stamps the binary with the commit it was built from and the build date, for `--version` and
//! the `helm_guard_build_info` metric. Outside a git checkout (a crate tarball) both still exist:
//! the commit reads "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    // Reproducible builds set SOURCE_DATE_EPOCH; others get the time of the build.
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|epoch| epoch.parse::<i64>().ok())
        .and_then(|epoch| jiff::Timestamp::from_second(epoch).ok())
        .unwrap_or_else(jiff::Timestamp::now)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    println!("cargo:rustc-env=HELM_GUARD_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=HELM_GUARD_BUILD_DATE={date}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit moves HEAD or the branch it names. Only files that exist are watched: cargo
    // takes a missing one (a fresh clone has no packed-refs) as changed, and would rebuild the
    // crate on every build.
    // In a worktree HEAD is its own, the branches are the common directory's.
    let dirs = [git(&["rev-parse", "--git-dir"]), git(&["rev-parse", "--git-common-dir"])];
    for dir in dirs.iter().flatten() {
        for path in ["HEAD", "refs/heads", "packed-refs"] {
            let watched = std::path::Path::new(dir).join(path);
            if watched.exists() {
                println!("cargo:rerun-if-changed={}", watched.display());
            }
        }
    }
}
