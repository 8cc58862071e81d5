//! What the run's database cannot hold: the key that seals its audit log, and the anchor
//! of each chain's head. Both live in the user's prose home (`$PROSE_HOME/.prose/`, else
//! `$HOME/.prose/`), outside every run.
//!
//! - `audit.key`: 32 random bytes (hex), created on first use, mode 0600. Each audit row's
//!   hash is sealed with HMAC-SHA256 under it, so an agent that can write the database but not
//!   read this file cannot forge, edit or re-chain a row that verifies.
//! - `anchors/`: for each run this user's commands appended to, the sequence number and hash
//!   of the newest row seen, so that rows cut from the end of a log are noticed.

use crate::error::refused;
use anyhow::{anyhow, Context as _, Result};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(super) const KEY_FILE: &str = "audit.key";
const ANCHORS_DIR: &str = "anchors";
const SEAL_PREFIX: &str = "hmac-sha256:";

/// The user's prose directory: `$PROSE_HOME/.prose`, else `$HOME/.prose`.
pub fn prose_home() -> Option<PathBuf> {
    std::env::var_os("PROSE_HOME")
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()))
        .map(|h| PathBuf::from(h).join(".prose"))
}

/// The audit key: its id (which names it in every seal, and reveals nothing of it) and bytes.
pub struct Key {
    pub id: String,
    bytes: Vec<u8>,
}

/// What a row's seal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealCheck {
    /// Made with this key over this hash.
    Valid,
    /// Names this key but does not match: forged, or the row was changed and re-chained.
    Invalid,
    /// Made with another key (another machine's), which this one cannot check.
    OtherKey,
    /// No seal, or not in the seal format.
    Missing,
}

impl Key {
    pub(super) fn from_bytes(bytes: Vec<u8>) -> Key {
        let id = crate::model::hex(&Sha256::digest(
            [b"prose-state audit key id\0", &bytes[..]].concat(),
        ))[..16]
            .to_string();
        Key { id, bytes }
    }

    fn mac(&self, hash: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.bytes).expect("HMAC takes any key");
        mac.update(hash.as_bytes());
        mac
    }

    /// The seal of a row's hash: `hmac-sha256:{key id}:{hex}`.
    pub fn seal(&self, hash: &str) -> String {
        let tag = crate::model::hex(&self.mac(hash).finalize().into_bytes());
        format!("{SEAL_PREFIX}{}:{tag}", self.id)
    }

    pub fn check(&self, hash: &str, seal: Option<&str>) -> SealCheck {
        let Some((id, tag)) = seal
            .and_then(|s| s.strip_prefix(SEAL_PREFIX))
            .and_then(|s| s.split_once(':'))
        else {
            return SealCheck::Missing;
        };
        if id != self.id {
            return SealCheck::OtherKey;
        }
        // Constant-time comparison, through the MAC's own verify.
        match hex_bytes(tag) {
            Some(t) if self.mac(hash).verify_slice(&t).is_ok() => SealCheck::Valid,
            _ => SealCheck::Invalid,
        }
    }
}

pub fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Options that open a file readable by its owner alone, never through a symlink: what the
/// user's private files are opened with (the key, the anchors, the project's principals and
/// its hook log). The caller adds how (read, write, append, create).
pub fn owner_only() -> fs::OpenOptions {
    let mut o = fs::OpenOptions::new();
    o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    o
}

/// Makes a directory of the user's prose home (and its parents), mode 0700.
fn private_dir(dir: &std::path::Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("could not create {}", dir.display()))
}

/// The audit key kept in `home` (a prose directory), if any.
pub fn read_key(home: &std::path::Path) -> Result<Option<Key>> {
    Ok(read_secret(home, KEY_FILE, "the audit key")?.map(Key::from_bytes))
}

/// A secret of the user's prose home (`what` names it in errors): 32 or more bytes of hex in
/// `file`, a regular file readable by its owner alone, never read through a symlink. None
/// when there is none.
pub fn read_secret(home: &std::path::Path, file: &str, what: &str) -> Result<Option<Vec<u8>>> {
    let path = home.join(file);
    let mut file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refused(format!(
                "{what} is a symbolic link, not used: {}",
                path.display()
            )))
        }
        Err(e) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("could not read {what} {}", path.display()))
        }
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(format!("{what} is not a file: {}", path.display())));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(refused(format!(
            "{what} can be read by others; make it private: chmod 600 {}",
            path.display()
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("could not read {what} {}", path.display()))?;
    match hex_bytes(text.trim()) {
        Some(bytes) if bytes.len() >= 32 => Ok(Some(bytes)),
        _ => Err(anyhow!(
            "{what} is not 32 or more bytes of hex: {}",
            path.display()
        )),
    }
}

/// Makes a secret of 32 random bytes in `file` of the user's prose home (mode 0600, in a
/// 0700 directory), or reads the one made meanwhile by another first use.
pub fn create_secret(home: &std::path::Path, file: &str, what: &str) -> Result<Vec<u8>> {
    private_dir(home)?;
    let bytes: [u8; 32] = rand::random();
    let path = home.join(file);
    let tmp = home.join(format!(".{file}.{:016x}", rand::random::<u64>()));
    let mut out = owner_only()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("could not create {what} {}", tmp.display()))?;
    out.write_all(format!("{}\n", crate::model::hex(&bytes)).as_bytes())?;
    out.sync_all()?;
    drop(out);
    // Two first uses at once: the first link wins and both use its secret.
    let linked = fs::hard_link(&tmp, &path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            crate::run::sync_dir(home)?;
            Ok(bytes.to_vec())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_secret(home, file, what)?
            .ok_or_else(|| anyhow!("{what} vanished: {}", path.display())),
        Err(e) => Err(anyhow::Error::new(e))
            .with_context(|| format!("could not create {what} {}", path.display())),
    }
}

/// The newest row of a run's chain this user has seen sealed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Anchor {
    pub seq: i64,
    pub hash: String,
    /// The bindings the run's openings up to `seq` name (each one's response binding and
    /// inputs), as this machine read them sealed (`chain::names_after`): what a reader asks
    /// before it trusts a narrowing of rows raw SQL can change. None in an anchor written
    /// before it was kept, and in the principals book's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named: Option<std::collections::BTreeSet<String>>,
}

/// Where a run's anchor is kept: named by a hash of where the run's state is (a state.db's
/// canonical path, or the server and database) and its id.
/// `home` is the user's prose directory (`Wiring::home`).
fn anchor_path(home: Option<&Path>, place: &str, run_id: &str) -> Option<PathBuf> {
    let name = crate::model::hex(&Sha256::digest(format!("{place}\n{run_id}").as_bytes()));
    Some(home?.join(ANCHORS_DIR).join(&name[..32]))
}

/// Forgets an anchor: for a chain that begins anew at its place (a principals book made where
/// none was), which no earlier anchor speaks for.
pub fn forget_anchor(home: Option<&Path>, place: &str, run_id: &str) {
    if let Some(path) = anchor_path(home, place, run_id) {
        let _ = fs::remove_file(&path);
    }
}

/// The anchor of a run's chain on this machine, if any.
pub fn anchored(home: Option<&Path>, place: &str, run_id: &str) -> Option<Anchor> {
    let text = fs::read_to_string(anchor_path(home, place, run_id)?).ok()?;
    serde_json::from_str(&text).ok()
}

/// Moves a run's anchor forward to `head` (never back: a concurrent writer may have anchored
/// a newer row). Under an exclusive lock on the anchor file.
pub fn anchor(home: Option<&Path>, place: &str, run_id: &str, head: &Anchor) -> Result<()> {
    let path =
        anchor_path(home, place, run_id).ok_or_else(|| anyhow!("no prose home for anchors"))?;
    private_dir(path.parent().expect("anchors have a directory"))?;
    let mut file = owner_only()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("could not open the anchor {}", path.display()))?;
    // SAFETY: flock on a file descriptor this function owns; released when the file closes.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error()).context("could not lock the anchor");
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    if let Ok(current) = serde_json::from_str::<Anchor>(&text) {
        if current.seq >= head.seq {
            return Ok(());
        }
    }
    let body = serde_json::to_string(head)?;
    file.set_len(0)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))?;
    file.write_all(body.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// Forgets a run's anchor (a new run made under an id and place that held one before).
pub fn forget(home: Option<&Path>, place: &str, run_id: &str) {
    if let Some(path) = anchor_path(home, place, run_id) {
        let _ = fs::remove_file(&path);
        let _ = fs::remove_file(path.with_extension("broken"));
    }
}

/// Records, outside the run, that this machine saw the row it anchored changed or gone: a
/// log put back afterwards (the row restored, later rows cut) still fails verification here.
pub fn mark_broken(home: Option<&Path>, place: &str, run_id: &str, why: &str) -> Result<()> {
    let path = anchor_path(home, place, run_id)
        .ok_or_else(|| anyhow!("no prose home for anchors"))?
        .with_extension("broken");
    private_dir(path.parent().expect("anchors have a directory"))?;
    let mut file = owner_only()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    file.write_all(why.as_bytes())?;
    Ok(())
}

/// What this machine once saw broken in a run's log ([`mark_broken`]), if anything.
pub fn seen_broken(home: Option<&Path>, place: &str, run_id: &str) -> Option<String> {
    fs::read_to_string(anchor_path(home, place, run_id)?.with_extension("broken")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_check_and_refuse_changes() {
        let k = Key::from_bytes(vec![7; 32]);
        let other = Key::from_bytes(vec![8; 32]);
        let seal = k.seal("sha256:abc");
        assert_eq!(k.check("sha256:abc", Some(&seal)), SealCheck::Valid);
        assert_eq!(k.check("sha256:abd", Some(&seal)), SealCheck::Invalid);
        assert_eq!(other.check("sha256:abc", Some(&seal)), SealCheck::OtherKey);
        assert_eq!(k.check("sha256:abc", None), SealCheck::Missing);
        assert_eq!(
            k.check("sha256:abc", Some("sha256:abc")),
            SealCheck::Missing
        );
        let forged = format!("{SEAL_PREFIX}{}:{}", k.id, "00".repeat(32));
        assert_eq!(k.check("sha256:abc", Some(&forged)), SealCheck::Invalid);
        let odd = format!("{SEAL_PREFIX}{}:zz", k.id);
        assert_eq!(k.check("sha256:abc", Some(&odd)), SealCheck::Invalid);
    }
}
