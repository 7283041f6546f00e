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
pub mod certs;
mod inspect;
mod scan;
mod serve;

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use crate::release::DecodeLimits;

#[derive(Debug, Parser)]
#[command(
    name = "helm-guard",
    version,
    about = "Keeps Helm release records from being broken, and repairs K3s/RKE2 helm-install jobs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the admission webhook.
    Serve(Box<serve::ServeArgs>),
    /// Decode Helm release records (a Secret, ConfigMap, or a List of them) and summarise them.
    Inspect(inspect::InspectArgs),
    /// Classify every release in a dump and report the broken ones.
    Scan(scan::ScanArgs),
    /// Review the guard's decisions in a kube-apiserver audit log.
    Audit(audit::AuditArgs),
    /// Make a CA and a serving certificate for the webhook Service.
    Certs(certs::CertsArgs),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// Limits shared by every command that decodes payloads.
#[derive(Debug, Clone, clap::Args)]
pub struct DecodeArgs {
    /// Largest decompressed payload accepted, in bytes (gzip-bomb guard).
    #[arg(long, env = "HELM_GUARD_MAX_DECODED_BYTES", default_value_t = crate::release::codec::DEFAULT_MAX_DECODED_BYTES)]
    pub max_decoded_bytes: usize,
}

impl DecodeArgs {
    pub fn limits(&self) -> DecodeLimits {
        DecodeLimits { max_decoded_bytes: self.max_decoded_bytes }
    }
}

/// Exit codes shared by the subcommands.
pub const EXIT_OK: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
pub const EXIT_BAD_INPUT: u8 = 2;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let code = match cli.command {
        Command::Inspect(args) => inspect::run(&args),
        Command::Scan(args) => scan::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Certs(args) => certs::run(&args),
        Command::Audit(args) => audit::run(&args),
    };
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
            Ok(ExitCode::from(EXIT_OK))
        }
        Err(error) => Err(error),
    }
}

/// See [`outln!`].
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")
}

/// Reads a file, or standard input for `-`.
pub fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buffer = Vec::new();
        std::io::stdin().read_to_end(&mut buffer).context("reading standard input")?;
        return Ok(buffer);
    }
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// A `--now` override (RFC 3339) for reproducible reports, else the clock; Unix seconds.
pub fn now_secs(now: Option<&jiff::Timestamp>) -> i64 {
    now.copied().unwrap_or_else(jiff::Timestamp::now).as_second()
}
