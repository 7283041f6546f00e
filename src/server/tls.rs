//! TLS: the serving certificate, and its reload when the files change.
//!
//! The files are polled rather than watched: Kubernetes updates a mounted Secret by swapping a
//! `..data` symlink, which inotify on the file paths does not see reliably; reading both files
//! every few seconds does. Open connections keep the configuration they started with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::metrics::Metrics;

/// A certificate chain and key in PEM files, and who may call.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, PEM.
    pub cert: PathBuf,
    /// The private key, PEM.
    pub key: PathBuf,
    /// When set, a client must present a certificate signed by a CA in this PEM file (the API
    /// server does, given a kubeconfig for the webhook in its AdmissionConfiguration); others are
    /// refused at the handshake.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: the client certificate's subject CN must be one of these (empty: any).
    pub client_names: Vec<String>,
}

impl TlsFiles {
    /// A serving pair without client verification.
    pub fn new(cert: PathBuf, key: PathBuf) -> TlsFiles {
        TlsFiles { cert, key, client_ca: None, client_names: Vec::new() }
    }
}

/// Builds the rustls configuration: TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN, and client
/// certificates verified against `client_ca_pem` when given.
pub(crate) fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
    client_names: &[String],
) -> anyhow::Result<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .context("reading the certificate PEM")?;
    anyhow::ensure!(!certs.is_empty(), "the certificate file holds no certificate");
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("reading the private key PEM")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(pem) {
                roots.add(ca.context("reading the client CA PEM")?).context("a client CA certificate")?;
            }
            anyhow::ensure!(!roots.is_empty(), "the client CA file holds no certificate");
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("building the client certificate verifier")?;
            builder.with_client_cert_verifier(Arc::new(NamedClient {
                inner: verifier,
                names: client_names.to_vec(),
            }))
        }
    };
    let mut config =
        builder.with_single_cert(certs, key).context("the certificate and the key do not go together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// WebPKI client verification, and the subject CN pinned when names are given.
#[derive(Debug)]
struct NamedClient {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<String>,
}

impl ClientCertVerifier for NamedClient {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        if self.names.is_empty() {
            return Ok(verified);
        }
        let common_name =
            x509_parser::parse_x509_certificate(end_entity.as_ref()).ok().and_then(|(_, cert)| {
                cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok().map(str::to_owned))
            });
        match common_name {
            Some(cn) if self.names.contains(&cn) => Ok(verified),
            _ => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn read(files: &TlsFiles) -> anyhow::Result<LoadedPem> {
    let cert = std::fs::read(&files.cert).with_context(|| format!("reading {}", files.cert.display()))?;
    let key = std::fs::read(&files.key).with_context(|| format!("reading {}", files.key.display()))?;
    let client_ca = match &files.client_ca {
        Some(path) => Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?),
        None => None,
    };
    Ok(LoadedPem { cert, key, client_ca })
}

/// The files as last loaded, to tell a change from the same content read again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadedPem {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl LoadedPem {
    fn config(&self, files: &TlsFiles) -> anyhow::Result<ServerConfig> {
        server_config(&self.cert, &self.key, self.client_ca.as_deref(), &files.client_names)
    }

    /// When the serving certificate (the first of the chain) expires, in Unix seconds.
    fn not_after(&self) -> Option<i64> {
        let der = CertificateDer::pem_slice_iter(&self.cert).next()?.ok()?;
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
        Some(cert.validity().not_after.timestamp())
    }
}

/// Within this of its expiry, a certificate being loaded is warned about.
const EXPIRY_WARNING_SECS: i64 = 7 * 86_400;

/// Publishes the serving certificate's expiry, and warns when it has passed or is near: the
/// API server refuses an expired certificate, and with failurePolicy Fail every Helm operation
/// then stops.
fn report_expiry(loaded: &LoadedPem, files: &TlsFiles, metrics: &Metrics) {
    let Some(not_after) = loaded.not_after() else { return };
    metrics.tls_certificate_expiry.set(not_after);
    let left = not_after - jiff::Timestamp::now().as_second();
    let expires = jiff::Timestamp::from_second(not_after).map(|t| t.to_string()).unwrap_or_default();
    if left <= 0 {
        tracing::warn!(cert = %files.cert.display(), %expires, "the serving certificate has EXPIRED: the API server will refuse it; renew it (docs/operate/certificates.md)");
    } else if left < EXPIRY_WARNING_SECS {
        tracing::warn!(cert = %files.cert.display(), %expires, "the serving certificate expires in under 7 days; renew it");
    }
}

/// The TLS configuration each new connection is served with; [`reload_on_change`] swaps it,
/// connections already open keep theirs.
pub(crate) type ServingConfig = Arc<ArcSwap<ServerConfig>>;

/// Loads the files once; an error here stops the server from starting.
pub(crate) fn load(files: &TlsFiles, metrics: &Metrics) -> anyhow::Result<(ServingConfig, LoadedPem)> {
    let loaded = read(files)?;
    let config = loaded.config(files).with_context(|| describe(files))?;
    report_expiry(&loaded, files, metrics);
    Ok((Arc::new(ArcSwap::from_pointee(config)), loaded))
}

fn describe(files: &TlsFiles) -> String {
    format!("TLS files {} and {}", files.cert.display(), files.key.display())
}

/// Polls the files and swaps the configuration when they change. A half-written pair (the
/// certificate updated, the key not yet) fails to load and is retried on the next poll while the
/// old certificate keeps serving.
pub(crate) async fn reload_on_change(
    files: TlsFiles,
    config: ServingConfig,
    mut current: LoadedPem,
    every: Duration,
    metrics: Arc<Metrics>,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let fresh = match read(&files) {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "TLS files unreadable; keeping the current certificate");
                continue;
            }
        };
        if current == fresh {
            continue;
        }
        match fresh.config(&files) {
            Ok(new_config) => {
                config.store(Arc::new(new_config));
                report_expiry(&fresh, &files, &metrics);
                current = fresh;
                metrics.tls_reload(true);
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
            }
            Err(error) => {
                metrics.tls_reload(false);
                tracing::warn!(error = %format!("{error:#}"), "new TLS files do not load; keeping the current certificate");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn garbage_pem_is_an_error() {
        let bad = b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
        let result = super::server_config(bad, b"", None, &[]);
        assert!(result.is_err());
        assert!(format!("{:#}", result.unwrap_err()).contains("reading the certificate PEM"));
    }
}
