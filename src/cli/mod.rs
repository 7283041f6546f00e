//! The command line: one file per subcommand; each returns the process exit code.

/// Writes a line to standard output, as `println!` does but returning the error: a reader that
/// went away (`helm-guard scan | head -1`) then ends the command quietly, as kubectl does,
/// instead of a panic.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_line(format_args!($($arg)*))
    };
}

mod audit;
mod certs;
mod check;
mod forget;
mod inspect;
mod prune;
mod repair;
mod restore;
mod scan;
mod serve;

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use bytesize::ByteSize;
use clap::{Parser, Subcommand, ValueEnum};

use crate::release::DecodeLimits;

#[derive(Debug, Parser)]
#[command(
    name = "helm-guard",
    version = crate::build::LONG_VERSION,
    about = "Keeps Helm release records from being broken, and repairs K3s/RKE2 helm-install jobs"
)]
/// The command line.
pub(crate) struct Cli {
    #[command(subcommand)]
    /// The subcommand.
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
/// helm-guard's subcommands.
pub(crate) enum Command {
    /// Run the admission webhook.
    Serve(Box<serve::ServeArgs>),
    /// Decode Helm release records (from a file, a captured AdmissionReview, or the cluster) and show what Helm reads.
    Inspect(inspect::InspectArgs),
    /// Classify every release in the cluster (or in a dump) and report the ones that need attention.
    Scan(scan::ScanArgs),
    /// Put a broken release back into a state Helm can work with, by the edits Helm itself makes.
    Repair(repair::RepairArgs),
    /// Cut a release's history to its newest revisions, as Helm's --history-max does.
    Prune(prune::PruneArgs),
    /// Bring back records of a release from the guard's recycle bin.
    Restore(restore::RestoreArgs),
    /// Delete a release's whole history and keep its resources, every record kept in the recycle bin.
    Forget(forget::ForgetArgs),
    /// Review the guard's decisions in a kube-apiserver audit log.
    Audit(audit::AuditArgs),
    /// Make a CA and a serving certificate for the webhook Service.
    Certs(certs::CertsArgs),
    /// Check that the guard in the cluster works: its webhooks, CA, endpoints, a real verdict, RBAC.
    Check(check::CheckArgs),
    /// Print a shell completion script: `source <(helm-guard completion bash)`.
    #[command(
        after_help = "Examples:\n  source <(helm-guard completion bash)\n  helm-guard completion zsh > \"${fpath[1]}/_helm-guard\"\n  helm-guard completion fish > ~/.config/fish/completions/helm-guard.fish\n\nExit status: 0 printed, 2 bad input (a shell it does not know)."
    )]
    Completion {
        #[arg(value_enum)]
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (helm-guard.1 and one per command) into a directory.
    #[command(
        after_help = "Examples:\n  helm-guard man ~/.local/share/man/man1 && man helm-guard-scan\n  sudo helm-guard man /usr/local/share/man/man1\n\nExit status: 0 written, 2 bad input, 3 the directory could not be written."
    )]
    Man {
        /// The directory (created if missing); existing pages of these names are replaced.
        dir: std::path::PathBuf,
    },
}

/// How a command prints its results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    /// For people: a table or a summary per item.
    #[default]
    Text,
    /// A JSON array, `[]` when nothing matched.
    Json,
    /// The same data as YAML, `[]` when nothing matched.
    Yaml,
}

/// Prints command results as a JSON or YAML array and returns true; returns false for text
/// output, which each command prints its own way.
pub(crate) fn print_data<T: serde::Serialize>(items: &[T], output: Output) -> anyhow::Result<bool> {
    match output {
        Output::Text => return Ok(false),
        Output::Json => outln!("{}", serde_json::to_string_pretty(items)?)?,
        Output::Yaml if items.is_empty() => outln!("[]")?,
        Output::Yaml => outln!("{}", serde_saphyr::to_string(&items)?.trim_end())?,
    }
    Ok(true)
}

/// Prints [`table_lines`].
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    for line in table_lines(headers, rows) {
        outln!("{line}")?;
    }
    Ok(())
}

/// Columns padded to their widest cell, as wide as a terminal shows them (`é` one column, `漢`
/// two, not their bytes); the last one is not padded.
fn table_lines(headers: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    use unicode_width::UnicodeWidthStr as _;
    let mut widths: Vec<usize> = headers.iter().map(|h| h.width()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.width());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, width))| {
                let pad = if i == last { 0 } else { width.saturating_sub(cell.width()) };
                format!("{cell}{}", " ".repeat(pad))
            })
            .collect();
        padded.join("  ")
    };
    std::iter::once(line(headers.to_vec()))
        .chain(rows.iter().map(|row| line(row.iter().map(String::as_str).collect())))
        .collect()
}

/// A command's plan and whether its writes were made (`repair`, `restore`).
#[derive(serde::Serialize)]
pub(crate) struct Applied<P> {
    #[serde(flatten)]
    pub(crate) plan: P,
    pub(crate) applied: bool,
}

/// How a command's writes are named in its errors: `updating`/`changed`, `creating`/`created`.
pub(crate) struct Writes {
    pub(crate) doing: &'static str,
    pub(crate) done: &'static str,
}

/// Makes `items`' writes, each first as a server-side dry run: the API server (and the guard,
/// if installed) judges every one before any is made. An error names the item and says what
/// was (not) done.
pub(crate) async fn dry_run_then_write<T>(
    items: &[T],
    writes: Writes,
    name: impl Fn(&T) -> String,
    write: impl AsyncFn(&T, bool) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for dry_run in [true, false] {
        for item in items {
            write(item, dry_run).await.with_context(|| {
                format!(
                    "{} {} (nothing {}{}; run again)",
                    if dry_run { "checking" } else { writes.doing },
                    name(item),
                    if dry_run { "" } else { "more " },
                    writes.done
                )
            })?;
        }
    }
    Ok(())
}

/// "1 release", "2 releases".
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// Where to find the cluster, for every command that reads it.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ClusterArgs {
    /// Path to a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, env = "HELM_GUARD_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, env = "HELM_GUARD_CONTEXT")]
    pub context: Option<String>,
}

impl ClusterArgs {
    /// How to reach the cluster, as the flags say.
    pub(crate) fn access(&self) -> crate::cluster::connect::ClusterAccess {
        crate::cluster::connect::ClusterAccess {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }

    /// The cluster, and the namespace a command works in: `namespace`, else the kubeconfig
    /// context's. A cluster that cannot be reached is said on stderr; `Err` is the exit code.
    pub(crate) async fn connect_in(&self, namespace: Option<&str>) -> Result<(kube::Client, String), Exit> {
        match crate::cluster::connect::connect(&self.access()).await {
            Ok(client) => {
                let namespace =
                    namespace.map_or_else(|| client.default_namespace().to_owned(), str::to_owned);
                Ok((client, namespace))
            }
            Err(error) => {
                eprintln!("error: {error:#}");
                Err(Exit::Failure)
            }
        }
    }
}

/// Where the guard keeps its recycle bin, for the commands that read or fill it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BinArgs {
    /// The guard's namespace: its recycle bin is there unless --recycle-bin-namespace says
    /// otherwise.
    #[arg(long, env = "HELM_GUARD_NAMESPACE", default_value = crate::recycle_bin::DEFAULT_NAMESPACE)]
    pub guard_namespace: String,
    /// The namespace of the guard's recycle bin, when the guard keeps it outside its own (chart
    /// value recycleBin.namespace).
    #[arg(long, env = "HELM_GUARD_RECYCLE_BIN_NAMESPACE", value_name = "NAMESPACE")]
    pub recycle_bin_namespace: Option<String>,
}

impl BinArgs {
    /// The recycle bin's namespace.
    pub(crate) fn namespace(&self) -> &str {
        self.recycle_bin_namespace.as_deref().unwrap_or(&self.guard_namespace)
    }
}

/// The cluster could not be reached or read (no kubeconfig, a dead address, a refusal): a failure
/// at run time, exit 1, not bad input.
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub(crate) struct ClusterUnavailable(pub anyhow::Error);

/// The exit code a command's error means: [`Exit::Failure`] for the cluster's, [`Exit::BadInput`]
/// for the rest (a file, a usage error).
pub(crate) fn exit_code_of(error: &anyhow::Error) -> Exit {
    if error.downcast_ref::<ClusterUnavailable>().is_some() { Exit::Failure } else { Exit::BadInput }
}

/// Limits shared by every command that decodes payloads.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DecodeArgs {
    /// Largest decompressed payload accepted (gzip-bomb guard): bytes, or with a unit (64KiB,
    /// 32MiB, 1GiB).
    #[arg(long, env = "HELM_GUARD_MAX_DECODED_BYTES", value_name = "SIZE",
          default_value_t = ByteSize::b(crate::release::decode::DEFAULT_MAX_DECODED_BYTES as u64))]
    pub max_decoded_bytes: ByteSize,
}

impl DecodeArgs {
    /// The decoding limits the flags set.
    pub(crate) fn limits(&self) -> DecodeLimits {
        DecodeLimits { max_decoded_bytes: bytes(self.max_decoded_bytes) }
    }
}

/// A size flag in bytes (saturating: no machine holds more than `usize::MAX`).
pub(crate) fn bytes(size: ByteSize) -> usize {
    usize::try_from(size.as_u64()).unwrap_or(usize::MAX)
}

/// How a command ended, as its exit code: 0 fine; 1 findings (a broken release, a denial, a
/// failed check); 2 bad input (usage, a file that is not what the command reads, a release that
/// is not there); 3 a failure at run time (binding, TLS, the cluster: what `main` makes of an
/// error), so that a script tells "the release is broken" from "the cluster could not be asked".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Done, nothing found.
    Ok = 0,
    /// A broken release was found, or a decision was a denial.
    Findings = 1,
    /// Bad input: usage, or a file that is not what the command reads.
    BadInput = 2,
    /// A failure at run time (binding, TLS, the cluster).
    Failure = 3,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

/// Runs the process's command line: its exit code, the error printed first when it failed at
/// run time (bad input was answered by the command itself, exit 2).
pub(crate) fn main() -> ExitCode {
    use clap::Parser as _;
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(Exit::Failure)
        }
    }
}

/// Runs a parsed command line, on the one runtime of the process: the guard's many threads, a
/// command's one.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = match cli.command {
        Command::Serve(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build()?;
    let code = runtime.block_on(async {
        match cli.command {
            Command::Inspect(args) => inspect::run(&args).await,
            Command::Scan(args) => scan::run(&args).await,
            Command::Serve(args) => serve::run(&args).await,
            Command::Certs(args) => certs::run(&args),
            Command::Check(args) => check::run(&args).await,
            Command::Audit(args) => audit::run(&args),
            Command::Repair(args) => repair::run(&args).await,
            Command::Restore(args) => restore::run(&args).await,
            Command::Prune(args) => prune::run(&args).await,
            Command::Forget(args) => forget::run(&args).await,
            Command::Completion { shell } => completion(shell),
            Command::Man { dir } => man(&dir),
        }
    });
    match code {
        Ok(code) => Ok(ExitCode::from(code)),
        // The reader of our output went away: nothing more to say, and no error of ours.
        Err(error)
            if error.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(ExitCode::from(Exit::Ok))
        }
        Err(error) => Err(error),
    }
}

/// Writes the completion script (built whole first: a closed pipe is then an error we handle,
/// not a panic inside the generator).
fn completion(shell: clap_complete::Shell) -> anyhow::Result<Exit> {
    use clap::CommandFactory as _;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "helm-guard", &mut script);
    outln!("{}", String::from_utf8_lossy(&script).trim_end())?;
    Ok(Exit::Ok)
}

/// Writes helm-guard.1 and, for each command, helm-guard-COMMAND.1 (clap_mangen, from the same
/// definitions as `--help`).
fn man(dir: &std::path::Path) -> anyhow::Result<Exit> {
    use clap::CommandFactory as _;
    let write = || -> std::io::Result<usize> {
        std::fs::create_dir_all(dir)?;
        let mut cli = Cli::command();
        cli.build();
        let mut pages = vec![cli.clone()];
        pages.extend(
            cli.get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
                .map(|s| s.clone().name(format!("helm-guard-{}", s.get_name()))),
        );
        for page in &pages {
            let mut roff = Vec::new();
            clap_mangen::Man::new(page.clone()).render(&mut roff)?;
            std::fs::write(dir.join(format!("{}.1", page.get_name())), roff)?;
        }
        Ok(pages.len())
    };
    match write() {
        Ok(count) => {
            outln!("wrote {count} man pages into {}", dir.display())?;
            Ok(Exit::Ok)
        }
        Err(error) => {
            eprintln!("error: writing man pages into {}: {error}", dir.display());
            Ok(Exit::Failure)
        }
    }
}

/// See [`outln!`].
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")
}

/// A command's input was not given and standard input is a terminal: waiting on it would leave
/// the user staring at nothing, so the command says what it needs instead.
#[derive(Debug, thiserror::Error)]
#[error("no {what} given; name a file, or `-` (or a pipe) to read standard input\n\nUsage: {usage}")]
pub(crate) struct NoInput {
    /// What was not given (`a record file`).
    pub what: &'static str,
    /// The command's usage line.
    pub usage: &'static str,
}

/// The input to read: the file named, else standard input when it is piped (or `-` was given).
pub(crate) fn input_path(file: Option<&Path>, missing: NoInput) -> Result<&Path, NoInput> {
    use std::io::IsTerminal as _;
    match file {
        Some(path) => Ok(path),
        None if std::io::stdin().is_terminal() => Err(missing),
        None => Ok(Path::new("-")),
    }
}

/// How messages name an input: its path, or "standard input" for `-`.
pub(crate) fn input_name(path: &Path) -> String {
    if path == Path::new("-") { "standard input".to_owned() } else { path.display().to_string() }
}

/// Reads a file, or standard input for `-`.
pub(crate) fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buffer = Vec::new();
        std::io::stdin().read_to_end(&mut buffer).context("reading standard input")?;
        return Ok(buffer);
    }
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// A `--now` override (RFC 3339) for reproducible reports, else the clock; Unix seconds.
pub(crate) fn now_secs(now: Option<&jiff::Timestamp>) -> i64 {
    now.copied().unwrap_or_else(jiff::Timestamp::now).as_second()
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_columns_line_up_as_a_terminal_shows_them() {
        let rows = vec![
            vec!["josé".to_owned(), "x".to_owned(), "last".to_owned()],
            vec!["漢字".to_owned(), "yy".to_owned(), "-".to_owned()],
            vec!["ab".to_owned(), "z".to_owned(), "-".to_owned()],
        ];
        let lines = super::table_lines(&["BY", "C", "HINT"], &rows);
        assert_eq!(lines, ["BY    C   HINT", "josé  x   last", "漢字  yy  -", "ab    z   -"]);
    }
}
