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
    let secret = crate::model::hex(&random::<SECRET_BYTES>());
    let hash = hash(secret.as_bytes())?;
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

/// `N` random bytes.
fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

/// The Argon2id hash (a PHC string) of `secret`, with a salt of its own.
fn hash(secret: &[u8]) -> Result<String> {
    let salt = SaltString::encode_b64(&random::<16>()).map_err(|e| anyhow!("token salt: {e}"))?;
    let hash = Argon2::default().hash_password(secret, &salt);
    let hash = hash.map_err(|e| anyhow!("could not hash the token: {e}"))?;
    Ok(hash.to_string())
}

/// The principal a token authenticates; refused (exit 4) when it does not, with one message
/// whatever the reason (no such principal, revoked, wrong secret), so that a guess learns
/// nothing. Every token costs one Argon2 check, of the principal's hash or, for a name with
/// no live principal (or no name at all), of a hash no token matches: an unknown name takes
/// as long as a known one, so time does not tell names apart either.
pub fn authenticate(book: &mut dyn PrincipalBook, token: &str) -> Result<Principal> {
    let log = crate::store::principals::book_state(book)?;
    authenticate_against(book, token, log)
}

/// [`authenticate`], against what the book's sealed log says (`log`, as
/// `principals::book_state` reads it).
fn authenticate_against(
    book: &mut dyn PrincipalBook,
    token: &str,
    log: std::result::Result<crate::store::book_log::BookState, String>,
) -> Result<Principal> {
    let token = token.trim();
    let invalid = || refused("the token is not valid (unknown, revoked or wrong)");
    let (name, secret) = token
        .rsplit_once('.')
        .filter(|(n, s)| !n.is_empty() && !s.is_empty())
        .unwrap_or(("", ""));
    let row = if name.is_empty() {
        None
    } else {
        book.principal(name)?.filter(|r| r.revoked_at.is_none())
    };
    if !secret_matches(secret, row.as_ref().map(|r| r.token_hash.as_str())) {
        return Err(invalid());
    }
    let row = row.ok_or_else(invalid)?;
    // The token must be one the book's sealed log issued, with this hash, and did not revoke:
    // a row written, re-issued or un-revoked behind prose-state's back is no token.
    let state = log.map_err(|why| {
        crate::error::tampered(format!("{why}: no token is accepted until it is put right"))
    })?;
    use crate::store::principals::{unissued, Unissued};
    match unissued(&state, &row) {
        None => {}
        // A hash that is not the one issued: as any wrong token, one message.
        Some(Unissued::OtherHash) => return Err(invalid()),
        Some(Unissued::NotIssued(why)) => return Err(refused(why)),
    }
    Principal::parse(&row.name, "principal of the token")
}

/// Whether `secret` is the one `hash` (a PHC string) was made from. Always one Argon2 check:
/// with no hash, or one that does not parse, a check against [`NO_TOKEN_HASH`], which fails.
fn secret_matches(secret: &str, hash: Option<&str>) -> bool {
    #[cfg(test)]
    CHECKS.with(|c| c.set(c.get() + 1));
    let parsed = hash.and_then(|h| PasswordHash::new(h).ok());
    let real = parsed.is_some();
    let argon2 = Argon2::default();
    let checked = parsed
        .or_else(|| PasswordHash::new(NO_TOKEN_HASH).ok())
        .is_some_and(|h| argon2.verify_password(secret.as_bytes(), &h).is_ok());
    real && checked
}

/// The hash of a secret nobody holds (32 random bytes, hashed as `hash` does and thrown
/// away), so that checking it costs what checking a real token's hash does. A constant: it
/// was made once, with `Argon2::default()`'s parameters, which a unit test holds it to.
const NO_TOKEN_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$JyAz5ow1OUkNEbHzV98Ddg$74Q5IWSz2IrmibOrymlRLD2swEW3Ep47q+WWnaFkoHk";

#[cfg(test)]
thread_local! {
    /// Argon2 checks made on this thread (`secret_matches`).
    static CHECKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether the project requires a token for every decision, as the book's sealed log says
/// (a book from before the log kept it: as its setting says). A log that cannot be trusted
/// cannot say, and is exit 9.
pub fn required(book: &mut dyn PrincipalBook) -> Result<bool> {
    let state = crate::store::principals::book_state(book)?.map_err(crate::error::tampered)?;
    Ok(match state.require {
        Some(r) => r,
        None => book.setting(REQUIRE)?.as_deref() == Some("1"),
    })
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
        if crate::services::sign::pinned(b)?.is_some() {
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
    let bad = |why: &str| usage(format!("--token-file is {why}: {}", shown()));
    let mut bytes = Vec::new();
    f.take(4097).read_to_end(&mut bytes)?;
    if bytes.len() > 4096 {
        return Err(bad("not a token (over 4 KiB)"));
    }
    let text = String::from_utf8(bytes).map_err(|_| bad("not a token (not UTF-8)"))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(bad("empty"));
    }
    Ok(token)
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::store::principals::LocalBook;

    fn checks() -> u64 {
        CHECKS.with(|c| c.get())
    }

    /// Every token costs one Argon2 check, whether its name is a live principal's, revoked,
    /// unknown, or missing: what a sign-in takes does not tell names apart. (The structure,
    /// not a timing: the check of the hash no token matches is what an unknown name pays.)
    #[test]
    fn every_token_costs_one_argon2_check_whatever_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut book = LocalBook::open(dir.path(), true, crate::store::Wiring::new().leak())
            .unwrap()
            .unwrap();
        let alice = Principal::parse("alice", "test").unwrap();
        let (token, row) = issue(&alice, "2026-01-01 00:00:00").unwrap();
        assert!(book.add_principal(&row).unwrap());
        let carol = Principal::parse("carol", "test").unwrap();
        let (revoked, row) = issue(&carol, "2026-01-01 00:00:00").unwrap();
        assert!(book.add_principal(&row).unwrap());
        assert!(book
            .revoke_principal("carol", "2026-01-01 00:00:01")
            .unwrap());
        let secret = token.rsplit_once('.').unwrap().1;
        let wrong = format!("alice.{}", "0".repeat(secret.len()));
        let unknown = format!("mallory.{secret}");
        // What the book's sealed log says: alice issued (her token's hash sealed), carol
        // revoked.
        let mut log = crate::store::book_log::BookState::default();
        let sealed =
            crate::model::sha256_tag(&book.principal("alice").unwrap().unwrap().token_hash);
        log.tokens.insert("alice".into(), Some(sealed));
        log.roster.revoked.insert("carol".into());
        for (what, t, ok) in [
            ("the right token", token.as_str(), true),
            ("a wrong secret", wrong.as_str(), false),
            ("an unknown name", unknown.as_str(), false),
            ("a revoked principal", revoked.as_str(), false),
            ("no name", ".abc", false),
            ("no secret", "alice.", false),
            ("no dot", "garbage", false),
            ("empty", "", false),
        ] {
            let before = checks();
            let got = authenticate_against(&mut book, t, Ok(log.clone()));
            assert_eq!(got.is_ok(), ok, "{what}");
            assert_eq!(checks() - before, 1, "{what}: one Argon2 check");
        }
        // The stand-in hash is a real Argon2id hash with the parameters of issued tokens.
        let issued = PasswordHash::new(&book.principal("alice").unwrap().unwrap().token_hash)
            .unwrap()
            .params
            .to_string();
        let stand_in = PasswordHash::new(NO_TOKEN_HASH).unwrap();
        assert_eq!(stand_in.algorithm.as_str(), "argon2id");
        assert_eq!(stand_in.params.to_string(), issued);
        let real = hash(&random::<SECRET_BYTES>()).unwrap();
        let real = PasswordHash::new(&real).unwrap();
        assert_eq!(stand_in.version, real.version);
        assert_eq!(stand_in.salt.map(|s| s.len()), real.salt.map(|s| s.len()));
        assert_eq!(stand_in.hash.map(|h| h.len()), real.hash.map(|h| h.len()));
    }
}
