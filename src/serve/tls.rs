//! HTTPS: the certificate and key of `--tls-cert` and `--tls-key`.

use anyhow::{anyhow, Result};
use std::sync::Arc;

/// The TLS configuration of `--tls-cert` and `--tls-key` (PEM): a file that is missing is
/// exit 3, one that holds no certificate or key, or a key that does not fit, exit 2.
pub(super) fn config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let shown = |p: &std::path::Path| crate::error::shown(&p.display().to_string());
    let read = |p: &std::path::Path, flag: &str| {
        std::fs::read(p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                crate::error::not_found(format!("{flag} not found: {}", shown(p)))
            }
            _ => anyhow!("could not read {flag} {}: {e}", shown(p)),
        })
    };
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read(cert, "--tls-cert")?)
            .collect::<std::result::Result<_, _>>()
            .ok()
            .filter(|c: &Vec<_>| !c.is_empty())
            .ok_or_else(|| {
                crate::error::usage(format!(
                    "--tls-cert holds no PEM certificate: {}",
                    shown(cert)
                ))
            })?;
    let private = PrivateKeyDer::from_pem_slice(&read(key, "--tls-key")?).map_err(|_| {
        crate::error::usage(format!(
            "--tls-key holds no PEM private key: {}",
            shown(key)
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| {
            crate::error::usage(format!(
                "--tls-key does not go with --tls-cert ({e}): {}",
                shown(key)
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
