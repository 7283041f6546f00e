//! Certificates: a throwaway CA and a serving certificate it signs, for `helm-guard certs`,
//! `serve --dev-certs` and the tests.

use std::path::Path;

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A CA certificate and a serving certificate it signed, in PEM.
#[derive(Debug, Clone)]
pub struct CertBundle {
    /// The CA's certificate, PEM (the webhooks' `caBundle`).
    pub ca_pem: String,
    /// The serving certificate, PEM.
    pub cert_pem: String,
    /// The serving key, PEM.
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
pub(crate) fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_owned(),
    ]
}

/// The files a bundle is written to, in a directory.
pub(crate) const FILES: [&str; 3] = ["ca.crt", "tls.crt", "tls.key"];

/// Writes the bundle as ca.crt, tls.crt and tls.key (mode 0600), replacing what is there.
pub fn write(bundle: &CertBundle, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, text) in FILES.into_iter().zip([&bundle.ca_pem, &bundle.cert_pem, &bundle.key_pem]) {
        write_private(&dir.join(name), text.as_bytes())?;
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

/// Whether the first certificate of `leaf_pem` is current and signed by a CA in each of
/// `bundles` (PEM, as a webhook's caBundle holds it): a summary, or what is wrong.
pub(crate) fn signed_by(leaf_pem: &[u8], bundles: &[Vec<u8>]) -> Result<String, String> {
    use x509_parser::pem::Pem;
    let leaf_pem = Pem::iter_from_buffer(leaf_pem)
        .next()
        .and_then(Result::ok)
        .ok_or("the serving certificate is not PEM")?;
    let leaf = leaf_pem.parse_x509().map_err(|e| format!("the serving certificate does not parse: {e}"))?;
    if !leaf.validity().is_valid() {
        return Err(format!(
            "the serving certificate is not valid now (not after {})",
            leaf.validity().not_after
        ));
    }
    for (i, bundle) in bundles.iter().enumerate() {
        let cas: Vec<Pem> = Pem::iter_from_buffer(bundle).filter_map(Result::ok).collect();
        let signed = cas.iter().any(|pem| {
            pem.parse_x509().is_ok_and(|ca| {
                ca.subject() == leaf.issuer() && leaf.verify_signature(Some(ca.public_key())).is_ok()
            })
        });
        if !signed {
            return Err(format!(
                "webhook {} of {}: its caBundle ({} certificates) did not sign the serving certificate (issuer {})",
                i + 1,
                bundles.len(),
                cas.len(),
                leaf.issuer()
            ));
        }
    }
    Ok(format!("issuer {}, valid until {}", leaf.issuer(), leaf.validity().not_after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_holding_the_signing_ca_passes_and_another_ca_or_garbage_fails() {
        let names = ["guard.ns.svc".to_owned()];
        let ours = generate(&names, 30).unwrap();
        let theirs = generate(&names, 30).unwrap();
        let leaf = ours.cert_pem.as_bytes();
        let ca = ours.ca_pem.as_bytes().to_vec();
        assert!(signed_by(leaf, &[ca.clone(), ca.clone()]).is_ok());
        // A bundle of two CAs, ours second (a rotation): still signed.
        let both = [theirs.ca_pem.as_bytes(), ours.ca_pem.as_bytes()].concat();
        assert!(signed_by(leaf, &[both]).is_ok());
        let wrong = signed_by(leaf, &[ca, theirs.ca_pem.as_bytes().to_vec()]).unwrap_err();
        assert!(wrong.starts_with("webhook 2 of 2: its caBundle (1 certificates) did not sign"), "{wrong}");
        assert!(signed_by(leaf, &[b"not pem".to_vec()]).is_err());
        assert!(signed_by(b"not pem", &[]).unwrap_err().contains("not PEM"));
    }
}
