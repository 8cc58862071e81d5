//! The principals book's sealed log. Every change to who may decide (a token issued or
//! revoked, a member added to or removed from a group, the policies, the pinned signing key,
//! the place the book is bound to) is a row chained after the one before. Tokens, groups, the
//! policies and the pin are read from this log alone: a row of the book that disagrees with it
//! counts for nothing, and a row changed, removed or forged breaks the log, which then admits
//! no one (decisions that need it fail closed).
//!
//! What vouches for a row (its `seal` column) is one of two things:
//! - the audit key's seal (`hmac-sha256:…`), in a book with no pinned key;
//! - once a signing key is pinned, that key's signature (`ed25519:…`) over the row's hash, and
//!   nothing else: a change made without the key (an agent holding only the audit key) breaks
//!   the log. The pin itself is signed by the key it pins. A signature vouches for every row
//!   before it too, since each row's hash chains the one before, so a reader holding no audit
//!   key (the approval page run as another user) checks a signed book whole.

use super::seal::{Key, SealCheck};
use crate::team::Roster;
use ed25519_dalek::VerifyingKey;

/// One row of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookEvent {
    /// Its place in the log: 1, 2, 3, … A missing number is a removed row.
    pub seq: i64,
    pub at: String,
    /// Who made the change, as the command was run (a claim: the book's writer is trusted).
    pub actor: Option<String>,
    /// `add`, `revoke`, `group_add`, `group_remove`, `policy` or `bind`.
    pub event: String,
    pub principal: Option<String>,
    pub grp: Option<String>,
    /// For `add`, the digest of the token's hash; for `policy`, its new value (`on` or `off`,
    /// or for `signed_key` the key, empty to lift it); for `bind`, the place's identity.
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
/// Binds the book to its place (a project's id, a server database): see [`BookState::bound`].
pub const BIND: &str = "bind";
/// The policies the log keeps (a `policy` row's `grp`): separation of duties, …
pub const SEPARATE_DUTIES: &str = "separate_duties";
/// … whether every decision needs a token (`principals require`), …
pub const REQUIRE: &str = "require";
/// … and the signing key every decision and every later change of the book must be signed by
/// (`principals require --signed`; empty: none). A first pin must be signed by the key it
/// pins, and, for a reader holding the audit key, follow …
pub const SIGNED_KEY: &str = "signed_key";
/// … the audit key's holder's authorization of that key (`principals require --signed --key
/// K`, sealed with the audit key): so a pin is the work of both, and no one holding neither can
/// pin a key of their own over the book.
pub const KEY_AUTHORIZED: &str = "key_authorized";

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

/// What vouches for a row as it is appended: the audit key, or the pinned signing key.
#[derive(Clone, Copy)]
pub enum Voucher<'a> {
    Audit(&'a Key),
    Signing(&'a dyn super::signatures::SignsBook),
}

impl Voucher<'_> {
    fn vouch(&self, hash: &str) -> String {
        match self {
            Voucher::Audit(k) => k.seal(hash),
            Voucher::Signing(s) => s.sign_book(hash),
        }
    }
}

/// The row that records `c` after `tip` (the log's newest row), vouched for by `by`.
pub fn sealed(tip: Option<&BookEvent>, c: &Change, by: Voucher) -> BookEvent {
    // Empty text is kept as NULL, so it is hashed as none.
    fn none_if_empty(t: Option<&str>) -> Option<&str> {
        t.filter(|t| !t.is_empty())
    }
    let c = &Change {
        principal: none_if_empty(c.principal),
        grp: none_if_empty(c.grp),
        value: none_if_empty(c.value),
        actor: none_if_empty(c.actor),
        ..*c
    };
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
        seal: by.vouch(&hash),
        hash,
    }
}

/// Whether `c` pins a signing key (a `signed_key` policy with a key), and which.
pub fn pins<'a>(event: &str, grp: Option<&str>, value: Option<&'a str>) -> Option<&'a str> {
    (event == POLICY && grp == Some(SIGNED_KEY))
        .then_some(value)
        .flatten()
        .filter(|v| !v.is_empty())
}

/// What the log says now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BookState {
    pub roster: Roster,
    /// Each principal with a token the log issued and did not revoke, with the digest of its
    /// token's hash as the issuance sealed it (None: issued before issuances sealed one).
    pub tokens: std::collections::BTreeMap<String, Option<String>>,
    pub separate_duties: bool,
    /// `principals require`, as the log last set it (None: never, a book from before the log
    /// kept it).
    pub require: Option<bool>,
    /// The pinned signing key (`ed25519:HEX`), as the log last set it.
    pub pinned: Option<String>,
    /// Whether the log ever set the pin (a book from before the log kept it has none).
    pub pin_logged: bool,
    /// The signing keys the audit key's holder authorized to be pinned.
    pub authorized: std::collections::BTreeSet<String>,
    /// The identity of the place the book is bound to, as its newest `bind` row says (None: a
    /// book from before books were bound).
    pub bound: Option<String>,
    /// Why some rows could not be checked here (no audit key, or rows sealed with another
    /// user's), when no signature by the pinned key vouches for them either: such a log is read
    /// as it chains, and holds against no one who can write it. None: every row checked.
    pub unchecked: Option<String>,
    /// Rows read.
    pub events: usize,
    /// The newest row: its number and hash (what an anchor holds).
    pub tip: Option<(i64, String)>,
}

/// Reads the log (in any order) into the book's state. Err, with why, when it cannot be
/// trusted: a number missing or repeated, a row whose hash does not chain, a seal that names
/// this user's audit key and does not match, a row after the pin that the pinned key did not
/// sign, a pin not signed by the key it pins, and, for a reader holding an audit key, a row
/// sealed with another key that nothing this reader holds vouches for (a later row its key
/// sealed or the pinned key signed): a seal it cannot check is one anyone can make up. Only
/// `other_keys` (a re-binding, which accepts a book moved from another user as it is) reads
/// such rows as they chain. A reader with no audit key at all reads them so too, named in
/// [`BookState::unchecked`].
pub fn replay(
    rows: &[BookEvent],
    key: Option<&Key>,
    other_keys: bool,
    trusted: &dyn Fn() -> Option<String>,
) -> Result<BookState, String> {
    let mut rows: Vec<&BookEvent> = rows.iter().collect();
    rows.sort_by_key(|r| r.seq);
    // Rows sealed with another key are taken as they chain only in a book this reader's key
    // sealed none of (moved here from another user): in one it seals, what names another key
    // after its last row is made up.
    let other_keys = other_keys
        && !key.is_some_and(|k| {
            rows.iter()
                .any(|r| k.check(&r.hash, Some(&r.seal)) == SealCheck::Valid)
        });
    let mut state = BookState::default();
    let mut prev = String::new();
    let mut pinned: Option<VerifyingKey> = None;
    // The first row nothing this reader holds has vouched for yet, and why: a later row its
    // key seals, or the pinned key signs, vouches for it (and, through the chain, for every
    // row before it).
    let mut pending: Option<String> = None;
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
        let pin = pins(&r.event, r.grp.as_deref(), r.value.as_deref());
        // Who must vouch for this row: the pinned key once one is; a pin, the key it pins.
        let signer = match (&pinned, pin) {
            (Some(k), _) => Some(*k),
            (None, Some(tag)) => Some(super::signatures::parse_public(tag).map_err(|_| {
                format!(
                    "the principals book's log is broken at row {}: it pins a value that is not an Ed25519 public key",
                    r.seq
                )
            })?),
            (None, None) => None,
        };
        match signer {
            Some(k) => {
                if !super::signatures::book_signature_valid(&k, &r.hash, &r.seal) {
                    return Err(format!(
                        "the principals book's log is broken at row {}: {} is not signed by {} (a change made without the approver's signing key)",
                        r.seq,
                        if pinned.is_some() { "a change after the signing key was pinned" } else { "the pin" },
                        super::signatures::public_tag(&k)
                    ));
                }
                // A first pin stands, for a reader holding the audit key, on that key's
                // authorization before it, with every row before it vouched for; or on the
                // reader's own serve key being the one pinned (the approver). A reader with no
                // audit key trusts the pinned key as it checks its decisions. Else anyone could
                // pin a key of their own over the book.
                if pinned.is_none() && key.is_some() && !other_keys {
                    let tag = super::signatures::public_tag(&k);
                    let authorized = pending.is_none() && state.authorized.contains(&tag);
                    if !authorized && trusted().as_deref() != Some(tag.as_str()) {
                        return Err(format!(
                            "the principals book's log is broken at row {}: it pins {tag}, which the audit key's holder did not authorize{}",
                            r.seq,
                            pending.map(|p| format!(" ({p})")).unwrap_or_default()
                        ));
                    }
                }
                pending = None;
            }
            None => match key.map(|k| k.check(&r.hash, Some(&r.seal))) {
                Some(SealCheck::Valid) => pending = None,
                Some(SealCheck::OtherKey) => {
                    pending.get_or_insert_with(|| {
                        format!(
                            "row {} of the principals book's log is sealed with an audit key this user does not hold",
                            r.seq
                        )
                    });
                }
                None => {
                    pending.get_or_insert_with(|| {
                        "this user has no audit key to check the principals book's log with"
                            .to_string()
                    });
                }
                Some(_) => {
                    return Err(format!(
                        "the principals book's log is broken at row {}: its seal does not match (forged)",
                        r.seq
                    ))
                }
            },
        }
        prev = r.hash.clone();
        let who = r.principal.clone().unwrap_or_default();
        let group = r.grp.clone().unwrap_or_default();
        let roster = &mut state.roster;
        let on = r.value.as_deref() == Some("on");
        match (r.event.as_str(), r.grp.as_deref()) {
            (ADD, _) => {
                roster.revoked.remove(&who);
                state.tokens.insert(who, r.value.clone());
            }
            (REVOKE, _) => {
                state.tokens.remove(&who);
                roster.revoked.insert(who);
            }
            (GROUP_ADD, _) => {
                roster.groups.entry(group).or_default().insert(who);
            }
            (GROUP_REMOVE, _) => {
                if let Some(m) = roster.groups.get_mut(&group) {
                    m.remove(&who);
                    if m.is_empty() {
                        roster.groups.remove(&group);
                    }
                }
            }
            (POLICY, Some(SEPARATE_DUTIES)) => state.separate_duties = on,
            (POLICY, Some(REQUIRE)) => state.require = Some(on),
            (POLICY, Some(KEY_AUTHORIZED)) => {
                state.authorized.extend(r.value.clone());
            }
            (POLICY, Some(SIGNED_KEY)) => {
                state.pin_logged = true;
                state.pinned = pin.map(str::to_string);
                pinned = match pin {
                    Some(tag) => super::signatures::parse_public(tag).ok(),
                    None => None,
                };
            }
            (BIND, _) => state.bound = r.value.clone(),
            _ => {}
        }
        state.tip = Some((r.seq, r.hash.clone()));
    }
    // What nothing vouches for: a reader holding an audit key takes it for forged (a seal it
    // cannot check is one anyone can make up), unless it accepts a book moved from another
    // user as it is (`other_keys`); one with no audit key reads it as it chains.
    if let Some(why) = pending {
        if key.is_some() && !other_keys {
            return Err(format!(
                "the principals book's log is broken: {why}, and nothing this user holds vouches for it (share the audit key, or pin the approval page's key; a book moved here on purpose is accepted by `prose-state principals rebind`)"
            ));
        }
        state.unchecked = Some(why);
    }
    state.events = rows.len();
    Ok(state)
}
