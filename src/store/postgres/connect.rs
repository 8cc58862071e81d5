//! Reaching the server: connecting (TLS unless the URL says otherwise), what its errors say
//! (mapped once, at the edge of every statement, and of a commit), and the URL as it is
//! shown, its password hidden in every form.

use crate::error::{busy, not_found, refused};
use anyhow::{anyhow, Result};
use postgres::error::SqlState;
use postgres::Client;

/// A connection URL with the password hidden, for every message that shows it. Over-hiding
/// is allowed, showing never:
/// 1. every `password` parameter's value (its name decoded as the driver decodes it, any
///    case) becomes `***`, up to the next `&`;
/// 2. the userinfo, up to the last `@` left, becomes `user:***@` when it holds a `:`: a
///    password holding an unencoded `/ ? @ : # %` is hidden whole, and the driver, which ends
///    the userinfo at the first `@`, never sees more of a password than that. A userinfo with
///    no `:` has no password (the driver splits user from password at the first `:`, and
///    reads no further than the userinfo), so `vm@host` is shown as it is, not as `vm:***@`,
///    which would say there was a password;
/// 3. whatever the driver itself reads as the password is hidden wherever it still appears.
pub fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(a PostgreSQL URL)".to_string();
    };
    let rest = mask_password_parameters(rest);
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest.as_str()),
    };
    let user = userinfo.map(|u| match u.contains(':') {
        true => format!("{}:***@", u.split([':', '/', '?']).next().unwrap_or("")),
        false => format!("{u}@"),
    });
    let mut shown = format!("{scheme}://{}{after}", user.unwrap_or_default());
    if let Some(secret) = driver_password(url) {
        shown = shown.replace(&secret, "***");
    }
    shown
}

/// Step 1 of [`masked`]: `password=VALUE` after any `?` or `&` becomes `password=***`.
fn mask_password_parameters(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['?', '&']) {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let Some(eq) = rest.find('=') else { continue };
        let name = &rest[..eq];
        if !name.contains(['?', '&', '@', '/'])
            // Decoded as the driver decodes URL parts (invalid escapes kept as written).
            && percent_encoding::percent_decode_str(name)
                .decode_utf8_lossy()
                .eq_ignore_ascii_case("password")
        {
            let end = rest.find('&').unwrap_or(rest.len());
            out.push_str(name);
            out.push_str("=***");
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

/// The password as the driver parses it from the URL, when there is one worth hiding.
fn driver_password(url: &str) -> Option<String> {
    let config: postgres::Config = url.parse().ok()?;
    let password = String::from_utf8_lossy(config.get_password()?).into_owned();
    (password.len() >= 3).then_some(password)
}

/// Hides every form of the URL's password in a message.
fn scrub(text: &str, url: &str, shown_url: &str) -> String {
    let mut text = text.replace(url, shown_url);
    if let Some(secret) = driver_password(url) {
        text = text.replace(&secret, "***");
    }
    text
}

/// Why a connection failed, in words, and the exit code it deserves: the server's own
/// message (wrong password, no such database, starting up), or the network's.
pub(super) fn connect_error(e: &postgres::Error, url: &str, shown_url: &str) -> anyhow::Error {
    let cause = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut cause = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                cause = format!("{cause}: {s}");
                source = s.source();
            }
            cause
        }
    };
    let cause = scrub(&cause, url, shown_url);
    // Which of the three failed: reaching the host, authenticating, or the database.
    let what = match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            "authentication failed"
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => "the database does not exist",
        Some(_) => "the server refused the session",
        None if e.to_string().contains("password missing") => "authentication failed",
        None => "the host could not be reached",
    };
    let message = format!("could not connect to postgres: {what} ({cause}): {shown_url}");
    if crate::error::transient(e) {
        busy(format!("{message}; retry when the server is reachable"))
    } else if e.code() == Some(&SqlState::INVALID_CATALOG_NAME) {
        not_found(message)
    } else {
        anyhow!(message)
    }
}

/// Connects with TLS unless the URL says `sslmode=disable`: TLS through rustls, verifying the
/// server against the system's trusted roots (see [`tls`]).
pub(super) fn connect_client(url: &str) -> Result<Client, postgres::Error> {
    if tls_disabled(url) {
        return Client::connect(url, postgres::NoTls);
    }
    Client::connect(url, tokio_postgres_rustls::MakeRustlsConnect::new(tls()))
}

/// Whether the URL says `sslmode=disable`.
pub(super) fn tls_disabled(url: &str) -> bool {
    url.split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|kv| kv == "sslmode=disable"))
}

/// The client's TLS: the server's certificate verified against the system's trusted roots,
/// read when there is a certificate to verify. A server that answers the default
/// `sslmode=prefer` without TLS costs no read of the roots (about 300 files and their
/// parsing, at every command).
pub(super) fn tls() -> rustls::ClientConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = RootsWhenAsked {
        provider: provider.clone(),
        webpki: std::sync::OnceLock::new(),
    };
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(verifier))
        .with_no_client_auth()
}

/// rustls's own verifier over the system's roots, made at the first certificate it is asked
/// about; the handshake's signatures are checked as that verifier checks them.
#[derive(Debug)]
struct RootsWhenAsked {
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
    webpki: std::sync::OnceLock<Option<std::sync::Arc<rustls::client::WebPkiServerVerifier>>>,
}

impl rustls::client::danger::ServerCertVerifier for RootsWhenAsked {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let webpki = self.webpki.get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                std::sync::Arc::new(roots),
                self.provider.clone(),
            )
            .build()
            .ok()
        });
        match webpki {
            Some(webpki) => webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ),
            // No trusted root at all: no certificate is trusted.
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

pub(super) fn map_err(e: postgres::Error, shown_url: &str, busy_ms: u64) -> anyhow::Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        if *code == SqlState::LOCK_NOT_AVAILABLE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::T_R_SERIALIZATION_FAILURE
        {
            let held = if busy_ms > 0 {
                format!("for more than {busy_ms} ms")
            } else {
                "past the busy timeout".to_string()
            };
            return busy(format!(
                "database is busy: a lock was held {held}; retry the command{}",
                at(shown_url)
            ));
        }
        if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            return refused(format!(
                "query is read-only and this statement would write: {}",
                db.message()
            ));
        }
        if db.message().contains("append-only") {
            return refused(db.message().to_string());
        }
        if *code == SqlState::CHARACTER_NOT_IN_REPERTOIRE && db.message().contains("0x00") {
            return crate::error::usage(
                "the value holds a NUL byte, which PostgreSQL text cannot store; encode it (base64) first",
            );
        }
        if crate::error::transient(&e) {
            return busy(format!(
                "the server ended the session ({}, {}); nothing was written, retry the command{}",
                db.message(),
                code.code(),
                at(shown_url)
            ));
        }
        return anyhow!(
            "postgres: {} ({}){}",
            db.message(),
            code.code(),
            at(shown_url)
        );
    }
    // Connection-level errors can carry the connection string; never show it.
    let text = if shown_url.is_empty() {
        e.to_string()
    } else {
        e.to_string().replace(shown_url, "")
    };
    if crate::error::transient(&e) {
        return busy(format!(
            "lost the connection to the server ({text}); nothing was written, retry the command{}",
            at(shown_url)
        ));
    }
    anyhow!("postgres: {text}{}", at(shown_url))
}

/// `: URL` at the end of a message, when the URL is known.
fn at(shown_url: &str) -> String {
    if shown_url.is_empty() {
        String::new()
    } else {
        format!(": {shown_url}")
    }
}

/// The outcome of a COMMIT. A connection lost while committing leaves the outcome unknown:
/// the write may or may not have been applied (exit 8).
pub(super) fn committed(
    result: Result<(), postgres::Error>,
    err: impl Fn(postgres::Error) -> anyhow::Error,
) -> Result<()> {
    match result {
        Ok(()) => Ok(()),
        Err(e) if crate::error::transient(&e) && e.as_db_error().is_none() => Err(crate::error::unknown(
            "lost the connection to the server while committing: the write may or may not have been applied; check before retrying (bind, gates create, agent remember, imports add, finish and exec-append --key are safe to retry)",
        )),
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::masked;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            masked("postgresql://user:secret@host:5432/db?sslmode=require"),
            "postgresql://user:***@host:5432/db?sslmode=require"
        );
        // No password, none masked: `user:***@` would say there was one.
        assert_eq!(
            masked("postgresql://user@host/db"),
            "postgresql://user@host/db"
        );
        assert_eq!(masked("postgres://vm@host/db"), "postgres://vm@host/db");
        assert_eq!(
            masked("postgresql://user:@host/db"),
            "postgresql://user:***@host/db"
        );
        assert_eq!(
            masked("postgres://u:p%40ss@h/db?password=x&sslmode=disable"),
            "postgres://u:***@h/db?password=***&sslmode=disable"
        );
        assert_eq!(masked("postgresql:///db"), "postgresql:///db");
        assert_eq!(
            masked("postgresql://h/db?password=x"),
            "postgresql://h/db?password=***"
        );
        assert_eq!(masked("host=h password=x"), "(a PostgreSQL URL)");
        // Unencoded `/`, `?` and `@` in a password, which the driver accepts.
        for url in [
            "postgresql://alice:se/cr?et@db.example:5432/prod",
            "postgresql://alice:p@ss/w?rd@db.example/prod?sslmode=require",
            "postgresql://alice:secret?x@db.example/prod",
        ] {
            let shown = masked(url);
            assert!(
                shown.starts_with("postgresql://alice:***@db.example"),
                "{shown}"
            );
            for part in ["se/cr", "cr?et", "p@ss", "w?rd", "secret"] {
                assert!(!shown.contains(part), "{shown}");
            }
        }
    }

    #[test]
    fn every_special_character_in_a_password_stays_hidden() {
        // Each password's words must appear nowhere in what is shown, whatever the
        // separators, encoded or not, in the userinfo or a `password` parameter.
        let words = ["alpha", "bravo", "charlie", "delta"];
        let passwords = [
            "alpha/bravo?charlie",
            "alpha@bravo@charlie",
            "alpha:bravo#charlie",
            "alpha%bravo%zzcharlie",
            "alpha%2Fbravo%3Fcharlie%40delta",
            "alpha%3Abravo%23charlie%25delta",
            "alpha/bravo?charlie@delta:x#y%z",
        ];
        for pw in passwords {
            for url in [
                format!("postgresql://alice:{pw}@db.example:5432/prose?sslmode=require"),
                format!("postgres://alice:{pw}@db.example/prose"),
                format!("postgresql://db.example/prose?password={pw}&sslmode=disable"),
                format!("postgresql://db.example/prose?sslmode=disable&pass%77ord={pw}"),
                format!("postgresql://db.example/prose?PASSWORD={pw}"),
            ] {
                let shown = masked(&url);
                for w in words {
                    assert!(!shown.contains(w), "{url} -> {shown}");
                }
                assert!(shown.contains("***"), "{url} -> {shown}");
            }
        }
    }
}
