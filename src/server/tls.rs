//! TLS: the serving certificate, and its reload when the files change.
//!
//! The files are polled rather than watched: Kubernetes updates a mounted Secret by swapping a
//! `..data` symlink, which inotify on the file paths does not see reliably; reading both files
//! every few seconds does. Open connections keep the configuration they started with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::metrics::Metrics;

/// A certificate chain and key in PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Builds the rustls configuration: TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .context("reading the certificate PEM")?;
    anyhow::ensure!(!certs.is_empty(), "the certificate file holds no certificate");
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("reading the private key PEM")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the certificate and the key do not go together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn read(files: &TlsFiles) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let cert = std::fs::read(&files.cert).with_context(|| format!("reading {}", files.cert.display()))?;
    let key = std::fs::read(&files.key).with_context(|| format!("reading {}", files.key.display()))?;
    Ok((cert, key))
}

/// The files as last loaded, to tell a change from the same content read again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedPem {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// Loads the files once; an error here stops the server from starting.
pub fn load(files: &TlsFiles) -> anyhow::Result<(RustlsConfig, LoadedPem)> {
    let (cert, key) = read(files)?;
    let config = server_config(&cert, &key).with_context(|| describe(files))?;
    Ok((RustlsConfig::from_config(Arc::new(config)), LoadedPem { cert, key }))
}

fn describe(files: &TlsFiles) -> String {
    format!("TLS files {} and {}", files.cert.display(), files.key.display())
}

/// Polls the files and swaps the configuration when they change. A half-written pair (the
/// certificate updated, the key not yet) fails to load and is retried on the next poll while the
/// old certificate keeps serving.
pub async fn reload_on_change(
    files: TlsFiles,
    config: RustlsConfig,
    mut current: LoadedPem,
    every: Duration,
    metrics: Arc<Metrics>,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let fresh = match read(&files) {
            Ok((cert, key)) => LoadedPem { cert, key },
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "TLS files unreadable; keeping the current certificate");
                continue;
            }
        };
        if current == fresh {
            continue;
        }
        match server_config(&fresh.cert, &fresh.key) {
            Ok(new_config) => {
                config.reload_from_config(Arc::new(new_config));
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
        let result = super::server_config(bad, b"");
        assert!(result.is_err());
        assert!(format!("{:#}", result.unwrap_err()).contains("reading the certificate PEM"));
    }
}
