//! The few typed errors that carry a deliberate exit code. Everything else is an
//! `anyhow::Error` and exits 1.

use std::fmt;

/// Every exit code prose-state gives, documented in README.md. Callers branch on these;
/// outputs and errors both report through this one enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    /// An error with no deliberate code: I/O, a file that is not ours; a broken audit chain
    /// (`gates verify`), problems left (`doctor`).
    Error = 1,
    /// The command line or the input it carried is malformed.
    Usage = 2,
    /// A run, binding, execution, file or other named thing does not exist.
    NotFound = 3,
    /// The state forbids the operation: a conflict, a const rebind, a write in `query`.
    Refused = 4,
    /// `gates wait`: the gate was rejected.
    Rejected = 5,
    /// `gates wait`: the gate timed out; `query`: the statement ran past `--timeout`.
    TimedOut = 6,
    /// `gates wait`: the gate was still pending when the wait ran out.
    StillPending = 7,
    /// The connection was lost while committing: the write may or may not have been applied.
    Unknown = 8,
    /// The audit log or a gate disagrees with what was sealed: a row edited, forged or cut, a
    /// gate decided with no decision in its log, a prompt rewritten after it was created.
    Tampered = 9,
    /// A decision (or a log row) that nothing attests: written by another tool with the
    /// spec's own SQL, or sealed with a key this machine does not hold.
    Unattested = 10,
    /// A decision about inputs that changed after it was made and before the VM consumed it
    /// (`gates create --inputs`): it no longer stands; the gate is to be opened again.
    Stale = 11,
    /// A conflict that a retry may clear: the database stayed locked by another writer past
    /// the busy timeout, or the server connection was lost before anything was committed.
    Busy = 75,
}

/// An error with a deliberate exit code. Its message is one line, lowercase, value last.
#[derive(Debug)]
pub struct Coded {
    pub code: Code,
    pub message: String,
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

fn coded(code: Code, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded {
        code,
        message: message.into(),
    })
}

/// One constructor an exit code: `usage("...")` is an error that exits 2.
macro_rules! constructors {
    ($($name:ident => $code:ident,)*) => {
        $(pub fn $name(message: impl Into<String>) -> anyhow::Error {
            coded(Code::$code, message)
        })*
    };
}

constructors! {
    usage => Usage,
    not_found => NotFound,
    refused => Refused,
    unknown => Unknown,
    tampered => Tampered,
    unattested => Unattested,
    timed_out => TimedOut,
    busy => Busy,
}

/// Quotes a user-supplied value for an error message: escaped (so it stays on one line) and
/// shortened (so a 1 MB name does not become a 1 MB message).
pub fn shown(value: &str) -> String {
    const MAX: usize = 80;
    if value.chars().count() <= MAX {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(MAX).collect();
        format!("{head:?}… ({} bytes)", value.len())
    }
}

/// Shortens a message that echoes a huge argument (clap quotes values whole).
pub fn clip(message: &str, max: usize) -> String {
    if message.chars().count() <= max {
        return message.to_string();
    }
    let head: String = message.chars().take(max / 2).collect();
    let tail: String = {
        let rev: Vec<char> = message.chars().rev().take(max / 4).collect();
        rev.into_iter().rev().collect()
    };
    format!("{head}…{tail} ({} bytes)", message.len())
}

/// The exit code an error carries: its own, or what its cause makes it (a conflict or lost
/// connection a retry may clear is 75); None for a plain error (exit 1).
pub fn code_of(e: &anyhow::Error) -> Option<Code> {
    e.chain()
        .find_map(|c| c.downcast_ref::<Coded>())
        .map(|c| c.code)
        .or_else(|| classify(e))
}

/// The exit code of an error no command gave one: a database conflict or a lost connection
/// that a retry may clear is 75 (busy), whichever layer it came through.
fn classify(e: &anyhow::Error) -> Option<Code> {
    e.chain().find_map(|c| {
        if let Some(pg) = c.downcast_ref::<::postgres::Error>() {
            return transient(pg).then_some(Code::Busy);
        }
        if let Some(lite) = c.downcast_ref::<rusqlite::Error>() {
            return matches!(
                lite.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            )
            .then_some(Code::Busy);
        }
        None
    })
}

/// Whether an error may clear on a retry: a lock or serialisation conflict, a lost or
/// refused connection, a server shutting down or starting up.
pub fn transient(e: &postgres::Error) -> bool {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        return [
            postgres::error::SqlState::LOCK_NOT_AVAILABLE,
            postgres::error::SqlState::T_R_DEADLOCK_DETECTED,
            postgres::error::SqlState::T_R_SERIALIZATION_FAILURE,
            postgres::error::SqlState::ADMIN_SHUTDOWN,
            postgres::error::SqlState::CRASH_SHUTDOWN,
            postgres::error::SqlState::CANNOT_CONNECT_NOW,
            postgres::error::SqlState::TOO_MANY_CONNECTIONS,
        ]
        .contains(code)
            || code.code().starts_with("08");
    }
    if e.is_closed() {
        return true;
    }
    // A network that failed, not a certificate or a protocol that is wrong.
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | BrokenPipe
                    | UnexpectedEof
                    | TimedOut
                    | NotConnected
                    | AddrNotAvailable
                    | HostUnreachable
                    | NetworkUnreachable
            );
        }
        source = s.source();
    }
    false
}
