//! `helm-guard certs`: a throwaway CA and a serving certificate for the webhook Service.

use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

use super::EXIT_OK;

#[derive(Debug, clap::Args)]
pub struct CertsArgs {
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
    host.split('.').try_for_each(|label| dns_label(label, false)).map(|()| name.to_owned())
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

/// A CA certificate and a serving certificate it signed, in PEM.
#[derive(Debug, Clone)]
pub struct CertBundle {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Generates a CA and a serving certificate for `names` (DNS names or IP addresses). The CA key
/// is not kept: rotate by generating a new bundle and updating the webhook's caBundle.
pub fn generate(names: &[String], days: u32) -> anyhow::Result<CertBundle> {
    anyhow::ensure!(days > 0, "a certificate valid for 0 days is never valid");
    let now = time_now();
    let until = now + std::time::Duration::from_secs(u64::from(days) * 86_400);
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name.push(DnType::CommonName, "helm-guard CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.not_before = now.into();
    ca_params.not_after = until.into();
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let mut params = CertificateParams::new(names.to_vec()).context("certificate names")?;
    params.distinguished_name.push(DnType::CommonName, names.first().cloned().unwrap_or_default());
    params.not_before = now.into();
    params.not_after = until.into();
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    Ok(CertBundle { ca_pem: ca.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() })
}

fn time_now() -> std::time::SystemTime {
    // A minute back, so that a clock slightly behind ours still accepts the certificate.
    std::time::SystemTime::now() - std::time::Duration::from_secs(60)
}

/// The DNS names the API server uses to reach a Service.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_owned(),
    ]
}

/// Writes the bundle as ca.crt, tls.crt and tls.key (mode 0600).
pub fn write(bundle: &CertBundle, dir: &Path, force: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, text) in
        [("ca.crt", &bundle.ca_pem), ("tls.crt", &bundle.cert_pem), ("tls.key", &bundle.key_pem)]
    {
        let path = dir.join(name);
        anyhow::ensure!(force || !path.exists(), "{} exists; pass --force to overwrite", path.display());
        write_private(&path, text.as_bytes())?;
    }
    Ok(())
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| format!("writing {}", path.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: &CertsArgs) -> anyhow::Result<u8> {
    if let Some(existing) = ["ca.crt", "tls.crt", "tls.key"].map(|f| args.out.join(f)).into_iter().find(|p| p.exists())
        && !args.force
    {
        eprintln!("error: {} exists; pass --force to overwrite", existing.display());
        return Ok(super::EXIT_BAD_INPUT);
    }
    let mut names = service_names(&args.service, &args.namespace);
    names.extend(args.extra_names.iter().cloned());
    let bundle = generate(&names, args.days)?;
    write(&bundle, &args.out, args.force)?;
    outln!("wrote {0}/ca.crt, {0}/tls.crt and {0}/tls.key for {1}", args.out.display(), names.join(", "))?;
    outln!("caBundle for the webhook configurations:")?;
    outln!("{}", base64::engine::general_purpose::STANDARD.encode(&bundle.ca_pem))?;
    Ok(EXIT_OK)
}
