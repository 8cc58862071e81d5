//! What a commit causes beyond its rows: gate notices. The rules queue them while a
//! transaction is written; once the transaction commits, the store hands them to the one
//! handler the process installed (`notify`, installed by `Context`), and `begin` drops what an
//! earlier transaction queued and never committed. The store knows no notifier: it only says
//! what was committed.

use super::GateRow;
use std::cell::RefCell;
use std::sync::OnceLock;

/// What happened to a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Opened,
    Approved,
    Rejected,
    TimedOut,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Opened => "opened",
            Event::Approved => "approved",
            Event::Rejected => "rejected",
            Event::TimedOut => "timeout",
        }
    }
}

/// A gate changed by a committed transaction, as the transaction left it.
pub struct Notice {
    pub event: Event,
    pub gate: GateRow,
}

thread_local! {
    /// The notices of the transaction open on this thread (one at a time: a transaction
    /// begins and commits on the thread that runs its command).
    static QUEUE: RefCell<Vec<Notice>> = const { RefCell::new(Vec::new()) };
}

/// Who is told of committed notices (none installed: they are dropped).
static HANDLER: OnceLock<fn(Vec<Notice>)> = OnceLock::new();

/// Installs the process's handler of committed notices (the first one stays).
pub fn install(handler: fn(Vec<Notice>)) {
    let _ = HANDLER.set(handler);
}

/// Queues a notice of the transaction being written (`rules`).
pub fn queue(event: Event, gate: &GateRow) {
    QUEUE.with(|q| {
        q.borrow_mut().push(Notice {
            event,
            gate: gate.clone(),
        })
    });
}

/// Drops what an earlier transaction queued and did not commit (a transaction's begin).
pub(crate) fn discard() {
    QUEUE.with(|q| q.borrow_mut().clear());
}

/// Hands over what the transaction that just committed queued (after its commit).
pub(crate) fn committed() {
    let notices = QUEUE.with(|q| std::mem::take(&mut *q.borrow_mut()));
    if let (false, Some(handler)) = (notices.is_empty(), HANDLER.get()) {
        handler(notices);
    }
}
