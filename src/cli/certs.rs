//! `helm-guard certs`: a throwaway CA and a serving certificate for the webhook Service.

use std::path::PathBuf;

use base64::Engine as _;

use super::Exit;
use crate::certs::{FILES, generate, service_names, write};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  helm-guard certs --out certs/out                             for the Service helm-guard/helm-guard\n  helm-guard certs --out /tmp/c --san 127.0.0.1 --force       for a guard on this machine\n\nExit status: 0 written (the caBundle printed), 2 bad input (files that exist, without --force), 3 the files could not be written."
)]
pub(crate) struct CertsArgs {
    /// Directory to write ca.crt, tls.crt and tls.key into.
    #[arg(long, default_value = "certs/out")]
    pub out: PathBuf,
    /// The webhook Service name (a DNS-1035 label, as Kubernetes requires of Service names).
    #[arg(long, default_value = "helm-guard", value_parser = service_name)]
    pub service: String,
    /// The webhook Service namespace (a DNS-1123 label).
    #[arg(long, default_value = "helm-guard", value_parser = namespace_name)]
    pub namespace: String,
    /// More DNS names or IP addresses for the certificate (repeatable).
    #[arg(long = "san", value_parser = subject_name)]
    pub extra_names: Vec<String>,
    /// Validity in days, from 1 to 3650.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

/// A Service name: a DNS-1035 label (lower-case letters, digits and `-`, starting with a letter,
/// at most 63 characters), as the API server requires.
fn service_name(name: &str) -> Result<String, String> {
    dns_label(name, true).map(|()| name.to_owned())
}

/// A namespace name: a DNS-1123 label (as a Service name, but it may start with a digit).
fn namespace_name(name: &str) -> Result<String, String> {
    dns_label(name, false).map(|()| name.to_owned())
}

/// A subject alternative name: an IP address, or a DNS-1123 subdomain (labels joined by dots),
/// optionally with a leading `*.` wildcard.
fn subject_name(name: &str) -> Result<String, String> {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Ok(name.to_owned());
    }
    let host = name.strip_prefix("*.").unwrap_or(name);
    if name.len() > 253 {
        return Err("a DNS name is at most 253 characters".to_owned());
    }
    host.split('.').try_for_each(|label| dns_label(label, false)).map(|()| name.to_owned()).map_err(|why| {
        format!("`{name}` is neither an IP address nor a DNS name (labels joined by dots, `*.` first for a wildcard): {why}")
    })
}

fn dns_label(label: &str, letter_first: bool) -> Result<(), String> {
    if label.is_empty() {
        return Err("a DNS name cannot have an empty label (`..`, or a leading or trailing dot)".to_owned());
    }
    let bytes = label.as_bytes();
    let fine = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let first_fine = bytes
        .first()
        .is_some_and(|b| if letter_first { b.is_ascii_lowercase() } else { fine(b) && *b != b'-' });
    if label.len() > 63 || !bytes.iter().all(fine) || !first_fine || label.ends_with('-') {
        return Err(format!(
            "`{label}` is not a DNS label: lower-case letters, digits and `-`, {}, at most 63 characters",
            if letter_first {
                "starting with a letter and ending with a letter or digit"
            } else {
                "starting and ending with a letter or digit"
            }
        ));
    }
    Ok(())
}

pub(super) fn run(args: &CertsArgs) -> anyhow::Result<Exit> {
    if let Some(existing) = FILES.map(|f| args.out.join(f)).into_iter().find(|p| p.exists())
        && !args.force
    {
        eprintln!("error: {} exists; pass --force to overwrite", existing.display());
        return Ok(super::Exit::BadInput);
    }
    let mut names = service_names(&args.service, &args.namespace);
    names.extend(args.extra_names.iter().cloned());
    let bundle = generate(&names, args.days)?;
    write(&bundle, &args.out)?;
    outln!("wrote {0}/ca.crt, {0}/tls.crt and {0}/tls.key for {1}", args.out.display(), names.join(", "))?;
    outln!("caBundle for the webhook configurations:")?;
    outln!("{}", base64::engine::general_purpose::STANDARD.encode(&bundle.ca_pem))?;
    Ok(Exit::Ok)
}
