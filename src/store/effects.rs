//! What a commit causes beyond its rows: gate notices. The rules add them to the transaction
//! they write (`tx::Txn`); once it commits, they are handed to the one handler the process
//! installed (`notify`, installed by `Context`). The store knows no notifier: it only says
//! what was committed.

use super::GateRow;
use std::sync::OnceLock;

/// What happened to a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Opened,
    Approved,
    Rejected,
    TimedOut,
    /// A reminder before its deadline, for a gate still pending.
    Reminder,
    /// Its deadline passed and it opened to its escalation entry, with a new deadline.
    Escalated,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Opened => "opened",
            Event::Approved => "approved",
            Event::Rejected => "rejected",
            Event::TimedOut => "timeout",
            Event::Reminder => "reminder",
            Event::Escalated => "escalated",
        }
    }
}

/// A gate changed by a committed transaction, as the transaction left it.
pub struct Notice {
    pub event: Event,
    pub gate: GateRow,
}

/// Who is told of committed notices (none installed: they are dropped).
static HANDLER: OnceLock<fn(Vec<Notice>)> = OnceLock::new();

/// Installs the process's handler of committed notices (the first one stays).
pub fn install(handler: fn(Vec<Notice>)) {
    let _ = HANDLER.set(handler);
}

/// Hands over what a transaction that just committed caused (`tx::Txn::commit`).
pub(crate) fn deliver(notices: Vec<Notice>) {
    if let (false, Some(handler)) = (notices.is_empty(), HANDLER.get()) {
        handler(notices);
    }
}
