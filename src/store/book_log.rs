//! The principals book's sealed log. Every change to who may decide (a token issued or
//! revoked, a member added to or removed from a group, the separation-of-duties policy) is a
//! row chained and sealed with the audit key, as a run's gate events are. Groups and the
//! policy are read from this log alone: a member, a group or a policy written into the book
//! by raw SQL counts for nothing, and a row changed, removed or forged breaks the log, which
//! then admits no one through a group (decisions that need it fail closed).

use super::seal::{Key, SealCheck};
use crate::team::Roster;

/// One row of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookEvent {
    /// Its place in the log: 1, 2, 3, … A missing number is a removed row.
    pub seq: i64,
    pub at: String,
    /// Who made the change, as the command was run (a claim: the book's writer is trusted).
    pub actor: Option<String>,
    /// `add`, `revoke`, `group_add`, `group_remove` or `policy`.
    pub event: String,
    pub principal: Option<String>,
    pub grp: Option<String>,
    /// The policy's new value (`on` or `off`), for `policy`.
    pub value: Option<String>,
    pub prev_hash: String,
    pub hash: String,
    pub seal: String,
}

pub const ADD: &str = "add";
pub const REVOKE: &str = "revoke";
pub const GROUP_ADD: &str = "group_add";
pub const GROUP_REMOVE: &str = "group_remove";
pub const POLICY: &str = "policy";
/// The one policy the log keeps: separation of duties.
pub const SEPARATE_DUTIES: &str = "separate_duties";

/// A change to append: what [`sealed`] chains after the log's newest row.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub event: &'a str,
    pub principal: Option<&'a str>,
    pub grp: Option<&'a str>,
    pub value: Option<&'a str>,
    pub actor: Option<&'a str>,
    pub at: &'a str,
}

fn hash_of(prev: &str, seq: i64, c: &Change) -> String {
    crate::model::sha256_tag(
        &serde_json::json!([
            "prose-book-1",
            prev,
            seq,
            c.event,
            c.principal,
            c.grp,
            c.value,
            c.actor,
            c.at
        ])
        .to_string(),
    )
}

/// The row that records `c` after `tip` (the log's newest row), sealed with `key`.
pub fn sealed(tip: Option<&BookEvent>, c: &Change, key: &Key) -> BookEvent {
    let (seq, prev) = tip.map_or((1, String::new()), |t| (t.seq + 1, t.hash.clone()));
    let hash = hash_of(&prev, seq, c);
    let text = |t: Option<&str>| t.map(str::to_string);
    BookEvent {
        seq,
        at: c.at.to_string(),
        actor: text(c.actor),
        event: c.event.to_string(),
        principal: text(c.principal),
        grp: text(c.grp),
        value: text(c.value),
        prev_hash: prev,
        seal: key.seal(&hash),
        hash,
    }
}

/// Whether `why` (a [`replay`] error) says only that this machine cannot check the log (no
/// audit key, or rows sealed with another machine's), rather than that the log is broken.
pub fn uncheckable(why: &str) -> bool {
    why.contains("cannot be checked")
}

/// What the log says now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BookState {
    pub roster: Roster,
    /// Each principal with a token the log issued and did not revoke, with the digest of its
    /// token's hash as the issuance sealed it (None: issued before issuances sealed one).
    pub tokens: std::collections::BTreeMap<String, Option<String>>,
    pub separate_duties: bool,
    /// Rows read.
    pub events: usize,
}

/// Reads the log (in any order) into the book's state. Err, with why, when it cannot be
/// trusted: a number missing or repeated, a row whose hash or seal does not match, a seal
/// this machine cannot check (another key, or no key at all).
pub fn replay(rows: &[BookEvent], key: Option<&Key>) -> Result<BookState, String> {
    let mut rows: Vec<&BookEvent> = rows.iter().collect();
    rows.sort_by_key(|r| r.seq);
    let mut state = BookState::default();
    let mut prev = String::new();
    for (i, r) in rows.iter().enumerate() {
        let expected = i as i64 + 1;
        if r.seq != expected {
            return Err(format!(
                "the principals book's log is broken: row {expected} is missing or repeated"
            ));
        }
        let change = Change {
            event: &r.event,
            principal: r.principal.as_deref(),
            grp: r.grp.as_deref(),
            value: r.value.as_deref(),
            actor: r.actor.as_deref(),
            at: &r.at,
        };
        if r.prev_hash != prev || hash_of(&prev, r.seq, &change) != r.hash {
            return Err(format!(
                "the principals book's log is broken at row {}: it was changed, or a row was removed or inserted",
                r.seq
            ));
        }
        match key.map(|k| k.check(&r.hash, Some(&r.seal))) {
            Some(SealCheck::Valid) => {}
            None => {
                return Err(
                    "the principals book's log cannot be checked: this machine has no audit key"
                        .into(),
                )
            }
            Some(SealCheck::OtherKey) => {
                return Err(format!(
                    "the principals book's log cannot be checked: row {} is sealed with another machine's audit key",
                    r.seq
                ))
            }
            Some(_) => {
                return Err(format!(
                    "the principals book's log is broken at row {}: its seal does not match (forged)",
                    r.seq
                ))
            }
        }
        prev = r.hash.clone();
        let who = r.principal.clone().unwrap_or_default();
        let group = r.grp.clone().unwrap_or_default();
        let roster = &mut state.roster;
        match r.event.as_str() {
            ADD => {
                roster.revoked.remove(&who);
                state.tokens.insert(who, r.value.clone());
            }
            REVOKE => {
                state.tokens.remove(&who);
                roster.revoked.insert(who);
            }
            GROUP_ADD => {
                roster.groups.entry(group).or_default().insert(who);
            }
            GROUP_REMOVE => {
                if let Some(m) = roster.groups.get_mut(&group) {
                    m.remove(&who);
                    if m.is_empty() {
                        roster.groups.remove(&group);
                    }
                }
            }
            POLICY if r.grp.as_deref() == Some(SEPARATE_DUTIES) => {
                state.separate_duties = r.value.as_deref() == Some("on");
            }
            _ => {}
        }
    }
    state.events = rows.len();
    Ok(state)
}
