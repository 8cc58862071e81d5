//! Authenticated principals: a token is `NAME.SECRET`, issued once by `principals add` and
//! kept only as the Argon2id hash of its secret, so that checking one hashes one candidate
//! (the name says which row). A decision taken with a valid token is taken as that principal,
//! whatever `--as` says; a project that requires it (`principals require`) refuses any
//! decision without one.

use crate::error::{refused, usage};
use crate::model::Principal;
use crate::store::principals::{PrincipalBook, PrincipalRow, REQUIRE};
use anyhow::{anyhow, Result};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::RngCore;

/// Bytes of randomness in a token's secret (written as hex).
const SECRET_BYTES: usize = 32;

/// A new token for `principal`, and the row that keeps its hash.
pub fn issue(principal: &Principal, now: &str) -> Result<(String, PrincipalRow)> {
    let mut secret = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut secret);
    let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow!("token salt: {e}"))?;
    let hash = Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map_err(|e| anyhow!("could not hash the token: {e}"))?
        .to_string();
    let name = principal.as_str().to_string();
    let kind = if name.starts_with("agent:") {
        "agent"
    } else {
        "user"
    };
    Ok((
        format!("{name}.{secret}"),
        PrincipalRow {
            name,
            kind: kind.into(),
            token_hash: hash,
            created_at: now.to_string(),
            revoked_at: None,
        },
    ))
}

/// The principal a token authenticates; refused (exit 4) when it does not, with one message
/// whatever the reason (no such principal, revoked, wrong secret), so that a guess learns
/// nothing.
pub fn authenticate(book: &mut dyn PrincipalBook, token: &str) -> Result<Principal> {
    let token = token.trim();
    let invalid = || refused("the token is not valid (unknown, revoked or wrong)");
    let (name, secret) = token.rsplit_once('.').ok_or_else(invalid)?;
    if secret.is_empty() || name.is_empty() {
        return Err(invalid());
    }
    let Some(row) = book.principal(name)? else {
        return Err(invalid());
    };
    if row.revoked_at.is_some() {
        return Err(invalid());
    }
    let hash = PasswordHash::new(&row.token_hash).map_err(|_| invalid())?;
    Argon2::default()
        .verify_password(secret.as_bytes(), &hash)
        .map_err(|_| invalid())?;
    Principal::parse(&row.name, "principal of the token")
}

/// Whether the project requires a token for every decision.
pub fn required(book: &mut dyn PrincipalBook) -> Result<bool> {
    Ok(book.setting(REQUIRE)?.as_deref() == Some("1"))
}

/// Who decides on the command line: nobody when the project requires signed decisions (the
/// approval page's, `page` when known); the token's principal when there is a token (an
/// `--as` naming someone else is refused); otherwise `--as`/PROSE_PRINCIPAL/the login name,
/// unless the project requires a token. Returns the principal and whether it was
/// authenticated.
pub fn decider(
    mut book: Option<&mut (dyn PrincipalBook + 'static)>,
    token: Option<&str>,
    claimed: Option<Principal>,
    page: Option<String>,
) -> Result<(Principal, bool)> {
    // Signed decisions are made by the approval page alone, which holds the key.
    if let Some(b) = book.as_deref_mut() {
        if crate::sign::pinned(b)?.is_some() {
            return Err(refused(format!(
                "this project requires decisions signed by its approval page (`prose-state serve`), \
                 which holds the key: decide there{}",
                page.map(|u| format!(": {u}")).unwrap_or_default()
            )));
        }
    }
    match (book, token) {
        (Some(book), Some(token)) => {
            let p = authenticate(book, token)?;
            if let Some(c) = claimed.filter(|c| c != &p) {
                return Err(usage(format!(
                    "--as {} is not the token's principal {}: a decision with a token is the token's",
                    crate::error::shown(c.as_str()),
                    p.as_str()
                )));
            }
            Ok((p, true))
        }
        (None, Some(_)) => Err(refused(
            "the token is not valid (unknown, revoked or wrong): this project has no principals",
        )),
        (book, None) => {
            if let Some(book) = book {
                if required(book)? {
                    return Err(refused(
                        "this project requires an authenticated decision: pass --token-file FILE \
                         or set PROSE_TOKEN (`prose-state principals add NAME` issues one)",
                    ));
                }
            }
            let p = claimed.ok_or_else(|| {
                usage(
                    "no principal to decide as (no login name in USER or LOGNAME, or one \
                     outside the principal grammar): pass --as NAME or set PROSE_PRINCIPAL=NAME",
                )
            })?;
            Ok((p, false))
        }
    }
}

/// The token in a file (`--token-file`): its first line, at most 4 KiB.
pub fn read_token_file(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let shown = || crate::error::shown(&path.display().to_string());
    let f = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            crate::error::not_found(format!("--token-file not found: {}", shown()))
        }
        _ => anyhow!("could not read --token-file {}: {e}", shown()),
    })?;
    let mut bytes = Vec::new();
    f.take(4097).read_to_end(&mut bytes)?;
    if bytes.len() > 4096 {
        return Err(usage(format!(
            "--token-file is not a token (over 4 KiB): {}",
            shown()
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        usage(format!(
            "--token-file is not a token (not UTF-8): {}",
            shown()
        ))
    })?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(usage(format!("--token-file is empty: {}", shown())));
    }
    Ok(token)
}
