//! Binding values on their way in and out: small ones stay inline, large ones become
//! attachment files in the run's own `attachments/` directory.
//!
//! Every version of a value gets a file of its own, `{name}@{scope}.{unique}.md`, so two
//! bindings can never share a file and an uncommitted write can never replace a committed
//! one. A value is streamed into a temporary file (`.prose-tmp-*`), synced, renamed to its own
//! name and referenced by its row in the transaction that commits it; the previous version's
//! file is removed only after that commit. The writer holds an advisory lock (`flock`) on the
//! file from its creation until after its commit: the lock, not a pid, tells `doctor --fix`
//! that a live process owns a file it must not touch. A writer killed at any moment leaves at
//! most an unreferenced, unlocked file.
//!
//! Containment: attachments are only ever read, written or removed inside the run's
//! `attachments/` directory. A symlinked directory, a symlinked file, or a row whose
//! `attachment_path` is absolute or leaves the directory is refused (exit 4), never followed.

use crate::error::{refused, shown, usage};
use crate::run::ATTACHMENTS_DIR;
use crate::store::{Store, SERVER_PREFIX};
use anyhow::{Context, Result};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Temporary attachment files start with this prefix. One whose lock nobody holds was left by
/// a killed writer and can be deleted.
pub const TEMP_PREFIX: &str = ".prose-tmp-";

/// A value read in and ready to bind.
pub enum Staged {
    Inline(String),
    File(StagedFile),
    /// Uploaded whole into the store (PostgreSQL), not linked yet; the store holds it for
    /// this process until `end_upload`.
    Server(StagedBlob),
}

/// A value uploaded into the store under its own blob name.
pub struct StagedBlob {
    pub blob: String,
    /// The path stored in the row: `server:` and the blob.
    pub rel: String,
    pub bytes: u64,
}

/// The summary an attachment's row holds in place of its value, when none is given.
pub fn summary(bytes: u64, rel: &str) -> String {
    format!("Attachment of {bytes} bytes - see {rel}")
}

/// Where a value too large to keep inline goes.
pub enum Dest<'a> {
    /// A file in this run directory's `attachments/`.
    Dir(&'a Path),
    /// The store itself ([`Store::keeps_values`]).
    Store(&'a mut dyn Store),
}

/// An attachment written and synced under a temporary name, waiting to be published. It
/// holds the file's lock until dropped: keep it alive until the row has committed. Dropped
/// unpublished, it removes its temporary file.
pub struct StagedFile {
    /// Open and locked (exclusive flock) for as long as this value lives.
    _lock: File,
    tmp: PathBuf,
    dest: PathBuf,
    dir: PathBuf,
    /// The path stored in the row, relative to the run directory.
    pub rel: String,
    pub bytes: u64,
    published: bool,
}

impl StagedFile {
    /// Moves the file to its own unique name and syncs the directory. Called inside the
    /// transaction, just before the row that references it is written.
    pub fn publish(&mut self) -> Result<()> {
        let dest = &self.dest;
        fs::rename(&self.tmp, dest)
            .with_context(|| format!("could not move attachment into place: {}", dest.display()))?;
        self.published = true;
        let dir = &self.dir;
        crate::run::sync_dir(dir)
            .with_context(|| format!("could not sync attachments directory: {}", dir.display()))?;
        Ok(())
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The file name of one version of a binding's value: `{name}@root.{unique}.md` in the root
/// scope, `{name}@{execution_id}.{unique}.md` in an execution's scope. Names cannot contain
/// `@`, so the name and scope read back without ambiguity, and the unique part (random) keeps
/// every write's file its own.
///
/// A binding's name becomes a path here, so it goes through the one boundary
/// ([`crate::model::path_in`]) whatever its source: a name from a row (written by raw SQL, or
/// carried by an import) that could leave `attachments/` is refused (exit 2), never written.
pub fn file_name(name: &str, execution_id: Option<i64>) -> Result<String> {
    use crate::model::{path_in, PathName};
    path_in(Path::new(ATTACHMENTS_DIR), name, PathName::Binding)?;
    let scope = execution_id.map_or_else(|| "root".to_string(), |id| id.to_string());
    let unique: u64 = rand::random();
    let file = format!("{name}@{scope}.{unique:016x}.md");
    path_in(Path::new(ATTACHMENTS_DIR), &file, PathName::File)?;
    Ok(file)
}

/// The run's `attachments/` directory, created if missing. A symlink there (or anything that
/// is not a plain directory) is refused, never followed.
pub fn dir(run_dir: &Path, create: bool) -> Result<PathBuf> {
    let dir = run_dir.join(ATTACHMENTS_DIR);
    match fs::symlink_metadata(&dir) {
        Ok(m) if m.file_type().is_symlink() => Err(refused(format!(
            "attachments directory is a symlink; prose-state never follows it (replace it with a directory): {}",
            dir.display()
        ))),
        Ok(m) if !m.is_dir() => Err(refused(format!(
            "attachments is not a directory: {}",
            dir.display()
        ))),
        Ok(_) => Ok(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            match fs::create_dir(&dir) {
                Ok(()) => Ok(dir),
                // Another writer made it first: check it again.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => self::dir(run_dir, false),
                Err(e) => Err(anyhow::Error::new(e).context(format!(
                    "could not create attachments directory: {}",
                    dir.display()
                ))),
            }
        }
        Err(e) => Err(anyhow::Error::new(e)
            .context(format!("could not read attachments directory: {}", dir.display()))),
    }
}

/// The plain file name inside `attachments/` that a row's `attachment_path` names, or an
/// error (exit 4) when the path is absolute or leaves the directory.
pub fn contained(rel: &str) -> Result<&str> {
    let file = rel
        .strip_prefix(ATTACHMENTS_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .filter(|f| {
            !f.is_empty()
                && !f.contains(['/', '\\', '\0'])
                && !f.starts_with('.')
                && !Path::new(f).is_absolute()
        });
    file.ok_or_else(|| {
        refused(format!(
            "attachment path is outside the run's {ATTACHMENTS_DIR}/ directory; it is never followed: {}",
            shown(rel)
        ))
    })
}

/// Opens the attachment a row names, for reading, without following any symlink.
pub fn open(run_dir: &Path, rel: &str) -> Result<(File, PathBuf), OpenError> {
    let file = contained(rel).map_err(OpenError::Refused)?;
    let path = run_dir.join(ATTACHMENTS_DIR).join(file);
    // No attachments directory (a run whose files are on another machine): missing.
    if fs::symlink_metadata(run_dir.join(ATTACHMENTS_DIR))
        .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
    {
        return Err(OpenError::Missing(path));
    }
    let dir = dir(run_dir, false).map_err(OpenError::Refused)?;
    let path = dir.join(file);
    match open_nofollow(&path) {
        Ok(f) => Ok((f, path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(OpenError::Missing(path)),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            Err(OpenError::Refused(refused(format!(
                "attachment is a symlink; prose-state never follows it: {}",
                path.display()
            ))))
        }
        Err(e) => Err(OpenError::Other(
            anyhow::Error::new(e).context(format!("could not read attachment: {}", path.display())),
        )),
    }
}

/// The length of the value an attachment path names, wherever it is kept: on the server, or
/// in a file inside the run's `attachments/` (never followed out of it); None when it is not
/// there.
pub fn stored_len(store: &mut dyn Store, run_dir: &Path, rel: &str) -> Option<u64> {
    match crate::store::server_blob(rel) {
        Some(blob) => store.blob_len(blob).ok().flatten(),
        None => open(run_dir, rel)
            .ok()
            .and_then(|(f, _)| f.metadata().ok())
            .map(|m| m.len()),
    }
}

/// Why an attachment could not be opened.
pub enum OpenError {
    /// No file there (it may have been replaced since the row was read).
    Missing(PathBuf),
    /// Outside the run or through a symlink: refused.
    Refused(anyhow::Error),
    Other(anyhow::Error),
}

/// Opens a file for reading, never through a symlink (ELOOP when `path` is one).
pub fn open_nofollow(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates a new temporary file in `dir` and takes its lock. A `doctor --fix` may delete a
/// temporary file in the instant between its creation and its lock; the writer then finds the
/// path no longer names its file and starts again with a new one.
fn create_locked(dir: &Path, file_name: &str) -> Result<(File, PathBuf)> {
    for _ in 0..8 {
        let suffix: u64 = rand::random();
        let tmp = dir.join(format!("{TEMP_PREFIX}{file_name}.{suffix:016x}"));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .with_context(|| format!("could not create attachment: {}", tmp.display()))?;
        file.lock()
            .with_context(|| format!("could not lock attachment: {}", tmp.display()))?;
        let ours = file.metadata()?;
        match fs::symlink_metadata(&tmp) {
            Ok(m) if m.ino() == ours.ino() && m.dev() == ours.dev() => return Ok((file, tmp)),
            _ => continue,
        }
    }
    Err(crate::error::busy(format!(
        "the attachment's temporary file kept being removed (is a `doctor --fix` loop running?); retry the command: {}",
        dir.display()
    )))
}

/// Reads a value from `input`. Up to `inline_max` bytes it is returned inline; beyond that it
/// is streamed to `dest`: into a locked temporary attachment file, or uploaded into the store.
/// Either way it must be valid UTF-8. `require_bytes` refuses an input that ends before its
/// first byte (stdin that was never given a value, such as `/dev/null`).
pub fn stage(
    input: &mut dyn Read,
    inline_max: u64,
    dest: Dest,
    name: &str,
    execution_id: Option<i64>,
    require_bytes: bool,
) -> Result<Staged> {
    let mut head = Vec::new();
    input
        .take(inline_max + 1)
        .read_to_end(&mut head)
        .context("could not read the value")?;
    if head.is_empty() && require_bytes {
        return Err(usage(
            "no value given: stdin ended before any byte; give VALUE, --file PATH or pipe the value (an empty value is VALUE \"\")",
        ));
    }
    let mut check = Utf8Check::default();
    check.feed(&head)?;
    if head.len() as u64 <= inline_max {
        check.finish()?;
        // Checked just above, so this cannot fail; kept as an error rather than a panic.
        let text = String::from_utf8(head).map_err(|_| usage("value is not valid UTF-8"))?;
        return Ok(Staged::Inline(text));
    }

    // Named only now: an inline value needs no file name (and no random number).
    let file_name = file_name(name, execution_id)?;
    let run_dir = match dest {
        Dest::Dir(run_dir) => run_dir,
        Dest::Store(store) => {
            let mut upload = store.upload(&file_name)?;
            let bytes = pour(head, input, Some(&mut check), &mut |b| upload.write(b))?;
            upload.finish()?;
            return Ok(Staged::Server(StagedBlob {
                rel: format!("{SERVER_PREFIX}{file_name}"),
                blob: file_name,
                bytes,
            }));
        }
    };
    let dir = dir(run_dir, true)?;
    let (mut out, tmp) = create_locked(&dir, &file_name)?;
    let lock = out.try_clone()?;
    let mut staged = StagedFile {
        _lock: lock,
        dest: dir.join(&file_name),
        rel: format!("{ATTACHMENTS_DIR}/{file_name}"),
        tmp,
        dir,
        bytes: 0,
        published: false,
    };
    let dest = staged.dest.clone();
    let write_err = |e: io::Error| {
        anyhow::Error::new(e).context(format!("could not write attachment: {}", dest.display()))
    };
    let total = pour(head, input, Some(&mut check), &mut |b| {
        out.write_all(b).map_err(write_err)
    })?;
    out.sync_all().map_err(write_err)?;
    staged.bytes = total;
    Ok(Staged::File(staged))
}

/// Uploads the bytes of `input` into the store as a new blob named after the binding; its
/// `server:` path. For a value already kept (`doctor --fix` moving an attachment file to the
/// server): its bytes go as they are.
pub fn upload(
    input: &mut dyn Read,
    store: &mut dyn Store,
    name: &str,
    execution_id: Option<i64>,
) -> Result<StagedBlob> {
    let blob = file_name(name, execution_id)?;
    let mut upload = store.upload(&blob)?;
    let bytes = pour(Vec::new(), input, None, &mut |b| upload.write(b))?;
    upload.finish()?;
    Ok(StagedBlob {
        rel: format!("{SERVER_PREFIX}{blob}"),
        blob,
        bytes,
    })
}

/// Writes `head`, then the rest of `input`, through `write`, checking UTF-8 as it goes when
/// asked; the bytes written.
fn pour(
    head: Vec<u8>,
    input: &mut dyn Read,
    mut check: Option<&mut Utf8Check>,
    write: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<u64> {
    write(&head)?;
    let mut total = head.len() as u64;
    drop(head);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(anyhow::Error::new(e).context("could not read the value")),
        };
        if let Some(check) = check.as_deref_mut() {
            check.feed(&buf[..n])?;
        }
        write(&buf[..n])?;
        total += n as u64;
    }
    if let Some(check) = check {
        check.finish()?;
    }
    Ok(total)
}

/// Whether a live process holds the lock of an attachment or temporary file: a writer that
/// has not committed yet. Never follows a symlink (a symlink counts as owned: never touched).
pub fn owned_by_live_writer(path: &Path) -> bool {
    let Ok(file) = open_nofollow(path) else {
        return true;
    };
    !matches!(file.try_lock(), Ok(()))
}

/// Removes a temporary file left by a killed writer: only a plain file whose lock nobody
/// holds. Returns whether it is gone.
pub fn remove_temp(path: &Path) -> bool {
    matches!(remove_unowned(path), Ok(true))
}

/// Removes `path` when it is a plain file (never through a symlink) whose lock nobody holds;
/// whether it did.
fn remove_unowned(path: &Path) -> io::Result<bool> {
    let Ok(handle) = open_nofollow(path) else {
        return Ok(false);
    };
    if !handle.metadata().is_ok_and(|m| m.is_file()) || handle.try_lock().is_err() {
        return Ok(false);
    }
    fs::remove_file(path).map(|()| true)
}

/// Removes an attachment file that no row references any more: only a plain file inside the
/// run's own `attachments/` directory that no live writer holds, whatever a row written by raw
/// SQL claims. Never follows a symlink.
pub fn remove(run_dir: &Path, rel: &str) -> Result<()> {
    let Ok(file) = contained(rel) else {
        return Ok(());
    };
    let Ok(dir) = dir(run_dir, false) else {
        return Ok(());
    };
    // A symlink, something unreadable, or a file a live writer holds: left alone.
    match remove_unowned(&dir.join(file)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(anyhow::Error::new(e).context(format!("could not remove old attachment: {rel}")))
        }
        _ => Ok(()),
    }
}
/// Incremental UTF-8 validation across chunk boundaries.
#[derive(Default)]
struct Utf8Check {
    pending: Vec<u8>,
    offset: u64,
}

impl Utf8Check {
    fn invalid(&self, at: u64) -> anyhow::Error {
        usage(format!(
            "value is not valid UTF-8 (at byte {at}); bindings hold text, so encode binary data (base64) first"
        ))
    }

    fn feed(&mut self, mut chunk: &[u8]) -> Result<()> {
        if !self.pending.is_empty() {
            let want = match self.pending[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (want - self.pending.len()).min(chunk.len());
            self.pending.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.pending.len() < want {
                return Ok(());
            }
            if std::str::from_utf8(&self.pending).is_err() {
                return Err(self.invalid(self.offset));
            }
            self.offset += want as u64;
            self.pending.clear();
        }
        match std::str::from_utf8(chunk) {
            Ok(_) => self.offset += chunk.len() as u64,
            Err(e) if e.error_len().is_none() => {
                self.offset += e.valid_up_to() as u64;
                self.pending.extend_from_slice(&chunk[e.valid_up_to()..]);
            }
            Err(e) => return Err(self.invalid(self.offset + e.valid_up_to() as u64)),
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            Err(self.invalid(self.offset))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Check;

    fn check_split(bytes: &[u8]) -> bool {
        (0..=bytes.len()).all(|cut| {
            let mut c = Utf8Check::default();
            c.feed(&bytes[..cut]).is_ok() && c.feed(&bytes[cut..]).is_ok() && c.finish().is_ok()
        })
    }

    #[test]
    fn utf8_across_chunks() {
        assert!(check_split("aé€😀z".as_bytes()));
        assert!(!check_split(b"a\xffb"));
        assert!(!check_split(b"ab\xe2\x82"));
        let mut c = Utf8Check::default();
        for b in "x😀é".as_bytes() {
            c.feed(std::slice::from_ref(b)).unwrap();
        }
        c.finish().unwrap();
    }
}
