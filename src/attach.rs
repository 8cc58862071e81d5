//! Binding values on their way in: small ones stay inline, large ones become attachment
//! files. An attachment is written to a temporary file in `attachments/`, synced, and renamed
//! into place inside the write transaction that commits its row, so no row ever points at a
//! missing or partial file. Values are streamed: a value of any size is never held in memory
//! beyond the inline threshold.

use crate::error::usage;
use crate::run::ATTACHMENTS_DIR;
use anyhow::{Context, Result};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Temporary attachment files start with this prefix: one left by a killed writer is never
/// referenced by a row and can be deleted at any time.
pub const TEMP_PREFIX: &str = ".prose-tmp-";

/// A value read in and ready to bind.
pub enum Staged {
    Inline(String),
    File(StagedFile),
}

/// An attachment written and synced under a temporary name, waiting to be published.
/// Dropped unpublished, it removes its temporary file.
pub struct StagedFile {
    tmp: PathBuf,
    dest: PathBuf,
    dir: PathBuf,
    /// The path stored in the row, relative to the run directory.
    pub rel: String,
    pub bytes: u64,
    published: bool,
}

impl StagedFile {
    /// Moves the file into place and syncs the directory. Called inside the transaction.
    pub fn publish(&mut self) -> Result<()> {
        fs::rename(&self.tmp, &self.dest).with_context(|| {
            format!(
                "could not move attachment into place: {}",
                self.dest.display()
            )
        })?;
        self.published = true;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .with_context(|| {
                format!(
                    "could not sync attachments directory: {}",
                    self.dir.display()
                )
            })?;
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

/// The attachment file name of a binding: `{name}.md` in the root scope,
/// `{name}__{execution_id}.md` in an execution's scope.
pub fn file_name(name: &str, execution_id: Option<i64>) -> String {
    match execution_id {
        Some(id) => format!("{name}__{id}.md"),
        None => format!("{name}.md"),
    }
}

/// Reads a value from `input`. Up to `inline_max` bytes it is returned inline; beyond that it
/// is streamed into a temporary attachment file. Either way it must be valid UTF-8.
pub fn stage(
    input: &mut dyn Read,
    inline_max: u64,
    run_dir: &Path,
    file_name: &str,
) -> Result<Staged> {
    let mut head = Vec::new();
    input
        .take(inline_max + 1)
        .read_to_end(&mut head)
        .context("could not read the value")?;
    let mut check = Utf8Check::default();
    check.feed(&head)?;
    if head.len() as u64 <= inline_max {
        check.finish()?;
        // Checked just above, so this cannot fail; kept as an error rather than a panic.
        let text = String::from_utf8(head).map_err(|_| usage("value is not valid UTF-8"))?;
        return Ok(Staged::Inline(text));
    }

    let dir = run_dir.join(ATTACHMENTS_DIR);
    fs::create_dir_all(&dir)
        .with_context(|| format!("could not create attachments directory: {}", dir.display()))?;
    let suffix: u32 = rand::random();
    let tmp = dir.join(format!(
        "{TEMP_PREFIX}{file_name}.{}.{suffix:08x}",
        std::process::id()
    ));
    let mut staged = StagedFile {
        dest: dir.join(file_name),
        rel: format!("{ATTACHMENTS_DIR}/{file_name}"),
        tmp,
        dir,
        bytes: 0,
        published: false,
    };
    let mut out = File::create(&staged.tmp)
        .with_context(|| format!("could not create attachment: {}", staged.tmp.display()))?;
    let write_err = |e: io::Error| {
        anyhow::Error::new(e).context(format!(
            "could not write attachment: {}",
            staged.dest.display()
        ))
    };
    out.write_all(&head).map_err(write_err)?;
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
        check.feed(&buf[..n])?;
        out.write_all(&buf[..n]).map_err(write_err)?;
        total += n as u64;
    }
    check.finish()?;
    out.sync_all().map_err(write_err)?;
    staged.bytes = total;
    Ok(Staged::File(staged))
}

/// Removes an attachment file that no row references any more. Only files prose-state itself
/// names (`attachments/<plain file name>`) are ever removed, whatever a row written by raw SQL
/// claims.
pub fn remove(run_dir: &Path, rel: &str) -> Result<()> {
    let Some(file) = rel.strip_prefix(&format!("{ATTACHMENTS_DIR}/")) else {
        return Ok(());
    };
    if file.is_empty() || file.contains(['/', '\\']) || file.starts_with('.') {
        return Ok(());
    }
    match fs::remove_file(run_dir.join(ATTACHMENTS_DIR).join(file)) {
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
