//! Large binding values kept on the server, so that every machine with the URL reads them.
//!
//! A value is a blob with a name of its own (`{name}@{scope}.{unique}.md`, as an attachment
//! file's): its bytes in `openprose.attachment_chunks`, [`CHUNK`] bytes a row numbered from 0,
//! and one `openprose.attachments` row (length, chunk size, sha256) written in the same
//! transaction as the last chunk. That upload transaction takes no lock on the run: a 1 GiB
//! value never holds up `approve` or `finish`. The binding then links it
//! (`attachment_path = 'server:' || blob`) in its own short transaction.
//!
//! Between the two, the blob is referenced by no row. The uploader holds a session advisory
//! lock on it from before its first chunk until after the link commits (or until its session
//! ends: a killed process's server session goes with it), so a collector that takes the lock
//! knows no live writer owns the blob, as `flock` tells it of an attachment file.
//!
//! Why a chunk table and not large objects: chunk rows belong to their run (deleted with it by
//! its foreign key), are read and written with plain SQL and ordinary privileges (large
//! objects need `lo_compat_privileges` or ownership), travel in `pg_dump` with the rest, and
//! let a range read fetch only the chunks it needs.

use super::{committed, map_err, PgStore, Statements};
use crate::store::{BlobInfo, Upload};
use anyhow::{anyhow, Result};
use postgres::Transaction;
use sha2::{Digest, Sha256};
use std::io;

/// The bytes of one chunk row (the last of a blob may be shorter). Large enough that a 1 GiB
/// value is 1024 rows, small enough that a reader and a writer each hold one at a time.
pub const CHUNK: usize = 1 << 20;

/// The advisory lock space of uploads (the two-key form, apart from the migration lock's);
/// the second key is the hash of the run and the blob.
const UPLOAD_LOCK: i32 = 0x7072_6f62;

/// The lock statements, with $1 the lock space, $2 the run and $3 the blob.
const LOCK: &str = "SELECT pg_advisory_lock($1, hashtext($2 || '/' || $3))";
const UNLOCK: &str = "SELECT pg_advisory_unlock($1, hashtext($2 || '/' || $3))";
const TRY_XACT_LOCK: &str = "SELECT pg_try_advisory_xact_lock($1, hashtext($2 || '/' || $3))";

/// Deletes a blob inside a transaction, unless a live upload holds it; whether it is gone.
pub(super) fn delete(tx: &mut impl Statements, run: &str, blob: &str) -> Result<bool> {
    delete_unless_held(tx, run, blob, "TRUE")
}

/// Deletes a blob's rows where `and` holds (see `delete_rows`), unless a live upload holds
/// it; whether no upload did.
fn delete_unless_held(tx: &mut impl Statements, run: &str, blob: &str, and: &str) -> Result<bool> {
    let free: bool = tx.one(TRY_XACT_LOCK, &[&UPLOAD_LOCK, &run, &blob], |r| r.get(0))?;
    if free {
        delete_rows(tx, run, blob, and)?;
    }
    Ok(free)
}

/// Deletes a blob's chunks and its `attachments` row, where `and` (SQL over `$1`, the run,
/// and `$2`, the blob) holds: the one statement pair every way a blob goes uses.
fn delete_rows(tx: &mut impl Statements, run: &str, blob: &str, and: &str) -> Result<()> {
    for table in ["attachment_chunks", "attachments"] {
        tx.exec(
            &format!("DELETE FROM openprose.{table} WHERE run_id = $1 AND blob = $2 AND ({and})"),
            &[&run, &blob],
        )?;
    }
    Ok(())
}

/// An upload in progress: chunks go in as they fill, in one transaction that `finish`
/// commits with the blob's `attachments` row. Dropped unfinished, the transaction rolls back.
pub struct PgUpload<'a> {
    tx: Transaction<'a>,
    run: String,
    blob: String,
    buf: Vec<u8>,
    seq: i32,
    bytes: i64,
    digest: Sha256,
    shown_url: &'a str,
    busy_ms: u64,
}

impl<'a> Statements for PgUpload<'a> {
    type Client = Transaction<'a>;
    fn session(&mut self) -> (&mut Transaction<'a>, &str, u64) {
        (&mut self.tx, self.shown_url, self.busy_ms)
    }
}

impl PgUpload<'_> {
    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let (run, blob, seq) = (self.run.clone(), self.blob.clone(), self.seq);
        let buf = std::mem::take(&mut self.buf);
        self.exec(
            "INSERT INTO openprose.attachment_chunks (run_id, blob, seq, data)
             VALUES ($1, $2, $3, $4)",
            &[&run, &blob, &seq, &buf],
        )?;
        self.digest.update(&buf);
        self.bytes += buf.len() as i64;
        self.seq += 1;
        self.buf = buf;
        self.buf.clear();
        Ok(())
    }
}

impl Upload for PgUpload<'_> {
    fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let take = (CHUNK - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.buf.len() == CHUNK {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.flush()?;
        let sha = format!(
            "sha256:{}",
            crate::model::hex(&self.digest.clone().finalize())
        );
        let (run, blob, bytes) = (self.run.clone(), self.blob.clone(), self.bytes);
        self.exec(
            "INSERT INTO openprose.attachments (run_id, blob, bytes, chunk_bytes, sha256)
             VALUES ($1, $2, $3, $4, $5)",
            &[&run, &blob, &bytes, &(CHUNK as i32), &sha],
        )?;
        let (shown_url, busy_ms) = (self.shown_url, self.busy_ms);
        committed(self.tx.commit(), |e| map_err(e, shown_url, busy_ms))
    }
}

impl PgStore {
    /// Takes the blob's upload lock for this session and opens its upload transaction.
    pub(super) fn start_upload(&mut self, blob: &str) -> Result<Box<dyn Upload + '_>> {
        self.prepare_write()?;
        let run = self.run()?.to_string();
        self.exec(LOCK, &[&UPLOAD_LOCK, &run, &blob])?;
        self.uploading = true;
        let PgStore {
            client,
            shown_url,
            busy_ms,
            ..
        } = self;
        let tx = client
            .transaction()
            .map_err(|e| map_err(e, shown_url, *busy_ms))?;
        Ok(Box::new(PgUpload {
            tx,
            run,
            blob: blob.to_string(),
            buf: Vec::with_capacity(CHUNK),
            seq: 0,
            bytes: 0,
            digest: Sha256::new(),
            shown_url,
            busy_ms: *busy_ms,
        }))
    }

    pub(super) fn finish_upload(&mut self, blob: &str, linked: bool) -> Result<()> {
        let run = self.run()?.to_string();
        if !linked {
            // Unless a row links it after all (a commit whose outcome was lost).
            let linked = format!(
                "NOT EXISTS (SELECT 1 FROM openprose.bindings
                             WHERE run_id = $1 AND attachment_path = '{}' || $2)",
                crate::store::SERVER_PREFIX
            );
            self.in_tx(|tx| delete_rows(tx, &run, blob, &linked))?;
        }
        self.exec(UNLOCK, &[&UPLOAD_LOCK, &run, &blob])
    }

    /// A whole blob's length and chunk size.
    fn blob_head(&mut self, blob: &str) -> Result<Option<(i64, i32)>> {
        let run = self.run()?.to_string();
        self.opt(
            "SELECT bytes, chunk_bytes FROM openprose.attachments
             WHERE run_id = $1 AND blob = $2",
            &[&run, &blob],
            |r| (r.get(0), r.get(1)),
        )
    }

    pub(super) fn whole_blob_len(&mut self, blob: &str) -> Result<Option<u64>> {
        Ok(self.blob_head(blob)?.map(|(bytes, _)| bytes.max(0) as u64))
    }

    /// The chunks numbered `first..=last`, in order.
    fn chunks(&mut self, blob: &str, first: i32, last: i32) -> Result<Vec<Vec<u8>>> {
        let run = self.run()?.to_string();
        let rows: Vec<Vec<u8>> = self.all(
            "SELECT data FROM openprose.attachment_chunks
             WHERE run_id = $1 AND blob = $2 AND seq BETWEEN $3 AND $4 ORDER BY seq",
            &[&run, &blob, &first, &last],
            |r| r.get(0),
        )?;
        if rows.len() != (last - first + 1) as usize {
            return Err(incomplete(blob));
        }
        Ok(rows)
    }

    pub(super) fn blob_range(&mut self, blob: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let (bytes, chunk) = self.blob_head(blob)?.ok_or_else(|| incomplete(blob))?;
        let (bytes, chunk) = (bytes.max(0) as u64, chunk.max(1) as u64);
        let start = offset.min(bytes);
        let end = start.saturating_add(len).min(bytes);
        if start == end {
            return Ok(Vec::new());
        }
        let (first, last) = (start / chunk, (end - 1) / chunk);
        let mut out = Vec::with_capacity((end - start) as usize);
        for (i, data) in self
            .chunks(blob, first as i32, last as i32)?
            .into_iter()
            .enumerate()
        {
            let at = (first + i as u64) * chunk;
            let from = start.saturating_sub(at) as usize;
            let to = ((end - at) as usize).min(data.len());
            out.extend_from_slice(data.get(from..to).ok_or_else(|| incomplete(blob))?);
        }
        Ok(out)
    }

    pub(super) fn all_blobs(&mut self) -> Result<Vec<BlobInfo>> {
        let run = self.run()?.to_string();
        self.all(
            // Outside a transaction, each lock taken here goes when the statement ends.
            "SELECT b.blob, a.bytes, a.sha256,
                    NOT pg_try_advisory_xact_lock($2, hashtext($1 || '/' || b.blob))
             FROM (SELECT DISTINCT blob FROM openprose.attachment_chunks WHERE run_id = $1
                   UNION SELECT blob FROM openprose.attachments WHERE run_id = $1) b
             LEFT JOIN openprose.attachments a ON a.run_id = $1 AND a.blob = b.blob
             ORDER BY b.blob",
            &[&run, &UPLOAD_LOCK],
            |r| BlobInfo {
                blob: r.get(0),
                bytes: r.get(1),
                sha256: r.get(2),
                in_upload: r.get(3),
            },
        )
    }

    pub(super) fn blob_reader(mut self: Box<Self>, blob: &str) -> Result<Box<dyn io::Read>> {
        self.begin_snapshot()?;
        let (bytes, _) = self.blob_head(blob)?.ok_or_else(|| incomplete(blob))?;
        Ok(Box::new(BlobReader {
            store: self,
            blob: blob.to_string(),
            left: bytes.max(0) as u64,
            next: 0,
            chunk: Vec::new(),
            at: 0,
        }))
    }

    /// Starts the read-only snapshot every later read of this store sees.
    pub(super) fn begin_snapshot(&mut self) -> Result<()> {
        if !self.in_snapshot {
            self.client
                .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .map_err(self.err())?;
            self.in_snapshot = true;
        }
        Ok(())
    }
}

fn incomplete(blob: &str) -> anyhow::Error {
    anyhow!(
        "attachment {}{} is not whole on the server (run `prose-state doctor`)",
        crate::store::SERVER_PREFIX,
        crate::error::shown(blob)
    )
}

/// A blob streamed out a chunk at a time, in the store's snapshot: memory stays at one chunk
/// whatever the value's size.
struct BlobReader {
    store: Box<PgStore>,
    blob: String,
    /// Bytes the blob still has to give.
    left: u64,
    next: i32,
    chunk: Vec<u8>,
    at: usize,
}

impl io::Read for BlobReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.chunk.len() {
            if self.left == 0 {
                return Ok(0);
            }
            let next = self.next;
            let blob = self.blob.clone();
            let mut chunks = self
                .store
                .chunks(&blob, next, next)
                .map_err(|e| io::Error::other(format!("{e:#}")))?;
            self.chunk = chunks.pop().unwrap_or_default();
            if self.chunk.is_empty() || self.chunk.len() as u64 > self.left {
                return Err(io::Error::other(format!("{:#}", incomplete(&blob))));
            }
            self.next += 1;
            self.at = 0;
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        self.left -= n as u64;
        Ok(n)
    }
}

/// A value on the server whose run is not there (an import killed after its uploads, before
/// its rows; or rows deleted behind the tool's back).
#[derive(Debug, Clone)]
pub struct Orphan {
    pub run_id: String,
    pub blob: String,
    pub bytes: Option<i64>,
    pub removed: bool,
}

impl PgStore {
    /// Every value on the server whose run does not exist and that no live upload holds;
    /// with `remove`, each is deleted (under its upload lock, its run checked absent again).
    pub fn orphan_values(&mut self, remove: bool) -> Result<Vec<Orphan>> {
        let mut orphans = self.all(
            "SELECT b.run_id, b.blob, a.bytes
             FROM (SELECT DISTINCT run_id, blob FROM openprose.attachment_chunks
                   UNION SELECT run_id, blob FROM openprose.attachments) b
             LEFT JOIN openprose.attachments a ON a.run_id = b.run_id AND a.blob = b.blob
             WHERE NOT EXISTS (SELECT 1 FROM openprose.run r WHERE r.id = b.run_id)
               AND pg_try_advisory_xact_lock($1, hashtext(b.run_id || '/' || b.blob))
             ORDER BY 1, 2",
            &[&UPLOAD_LOCK],
            |r| Orphan {
                run_id: r.get(0),
                blob: r.get(1),
                bytes: r.get(2),
                removed: false,
            },
        )?;
        if remove {
            for o in &mut orphans {
                let absent = "NOT EXISTS (SELECT 1 FROM openprose.run WHERE id = $1)";
                o.removed = self.in_tx(|tx| delete_unless_held(tx, &o.run_id, &o.blob, absent))?;
            }
        }
        Ok(orphans)
    }
}
