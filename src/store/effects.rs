//! What a commit causes beyond its rows: gate notices. The rules add them to the transaction
//! they write (`tx::Txn`); once it commits, they are handed to what the process's wiring
//! announces them with (`notify`, wired by `Context`). The store knows no notifier: it only
//! says what was committed.

use super::GateRow;

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
