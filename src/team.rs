//! Approvals for teams, as rules over facts: which allow entries admit a principal (groups
//! included), what an opening asks of its deciders (a quorum, a veto, separation of duties),
//! and how its votes add up to a decision. The store runs them when a decision is taken (over
//! the principals book's roster) and when a gate is derived from its sealed log (over what
//! each sealed vote recorded), so both read the same rules.

use crate::model::Principal;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

pub use crate::model::GROUP_PREFIX;

/// Whether an allow entry names a group.
pub fn is_group(entry: &str) -> bool {
    entry.starts_with(GROUP_PREFIX)
}

/// What an opening asks of its deciders, as its sealed `created` event records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// Distinct approvals that approve the gate; 1 is the first decision deciding it.
    pub require: u32,
    /// Whether one rejection rejects the gate (a veto) or rejections need `require` too.
    pub veto: bool,
    /// Separation of duties: the run's starter and the gate's creator may not approve.
    pub separate: bool,
    /// Who started the run and who created the gate, as recorded when the gate opened.
    pub starter: Option<String>,
    pub creator: Option<String>,
    /// Its schedule: reminders, each this many seconds before a deadline (largest first)...
    pub remind: Vec<i64>,
    /// ...and, when the deadline passes, the allow entry (`group:G` or a principal) it opens
    /// to once instead of timing out, with a new deadline this many seconds later (None: the
    /// gate's own timeout again).
    pub escalate_to: Option<String>,
    pub escalate_after: Option<i64>,
    /// Whether its `created` event says that only authenticated decisions count, beyond what
    /// the rules above imply: set on every gate opened with `--veto off` or an escalation
    /// since the release that made them count only authenticated decisions (openings sealed
    /// before it keep the rule they were opened under).
    pub authenticated_only: bool,
}

impl Default for Quorum {
    fn default() -> Self {
        Quorum {
            require: 1,
            veto: true,
            separate: false,
            starter: None,
            creator: None,
            remind: Vec::new(),
            escalate_to: None,
            escalate_after: None,
            authenticated_only: false,
        }
    }
}

impl Quorum {
    /// The one rule for whether a decision must be authenticated (a token, or the page) to
    /// count: every rule that depends on who decided does (a quorum, groups, separation of
    /// duties), and so do a gate without a veto and an escalating one (`authenticated_only`,
    /// which every such opening records).
    pub fn needs_authentication(&self, allow: &[String]) -> bool {
        self.require > 1
            || self.separate
            || self.authenticated_only
            || allow.iter().any(|a| is_group(a))
    }

    /// What a new opening asks: only authenticated decisions once anything a team's rules
    /// read is in play, a missing veto and an escalation included.
    pub fn opened_now(mut self) -> Self {
        self.authenticated_only = !self.veto || self.escalate_to.is_some();
        self
    }

    /// Whether this opening uses anything a single-approver gate does not.
    pub fn is_team(&self, allow: &[String]) -> bool {
        self.needs_authentication(allow) || !self.veto || self.escalate_to.is_some()
    }

    /// The allow list after an escalation: the opening's, and the escalation's entry.
    pub fn escalated_allow(&self, allow: &[String]) -> Vec<String> {
        let mut all = allow.to_vec();
        if let Some(to) = &self.escalate_to {
            if !all.contains(to) {
                all.push(to.clone());
            }
        }
        all
    }

    /// Whether one vote decides: an approval where one is required, a rejection then or with
    /// a veto.
    pub fn decided_by_one(&self, approve: bool) -> bool {
        self.require == 1 || (!approve && self.veto)
    }

    /// The principals separation of duties keeps from approving (never `unknown`, which
    /// names no one).
    pub fn excluded(&self) -> Vec<&str> {
        if !self.separate {
            return Vec::new();
        }
        [self.starter.as_deref(), self.creator.as_deref()]
            .into_iter()
            .flatten()
            .filter(|p| *p != "unknown")
            .collect()
    }

    /// Writes what differs from a single-approver gate into a `created` event's metadata, so
    /// that such a gate's events are as they always were.
    pub fn record(&self, m: &mut Value) {
        if self.require != 1 {
            m["require"] = self.require.into();
        }
        if !self.veto {
            m["veto"] = false.into();
        }
        if self.separate {
            m["separate_duties"] = json!({"starter": self.starter, "creator": self.creator});
        }
        if !self.remind.is_empty() {
            m["remind"] = self.remind.clone().into();
        }
        if let Some(to) = &self.escalate_to {
            m["escalate"] = json!({"to": to, "after": self.escalate_after});
        }
        if self.authenticated_only {
            m["authenticated_only"] = true.into();
        }
    }

    /// Reads what [`Quorum::record`] wrote; a value no tool writes is an error.
    pub fn from_created(m: &Value) -> Result<Self, String> {
        let mut q = Quorum::default();
        if let Some(r) = m.get("require") {
            q.require = r
                .as_u64()
                .filter(|n| (1..=MAX_REQUIRE as u64).contains(n))
                .ok_or("its created event's quorum is not a number from 1 to 100")?
                as u32;
        }
        if let Some(v) = m.get("veto") {
            q.veto = v
                .as_bool()
                .ok_or("its created event's veto is not true or false")?;
        }
        if let Some(s) = m.get("separate_duties") {
            let name = |k: &str| s.get(k).and_then(Value::as_str).map(str::to_string);
            q.separate = true;
            q.starter = name("starter");
            q.creator = name("creator");
        }
        if let Some(r) = m.get("remind") {
            q.remind = r
                .as_array()
                .and_then(|a| a.iter().map(|v| v.as_i64().filter(|s| *s > 0)).collect())
                .ok_or("its created event's reminders are not positive numbers of seconds")?;
        }
        if let Some(e) = m.get("escalate") {
            q.escalate_to = Some(
                e["to"]
                    .as_str()
                    .ok_or("its created event's escalation names no one")?
                    .to_string(),
            );
            q.escalate_after = match &e["after"] {
                Value::Null => None,
                v => Some(
                    v.as_i64()
                        .filter(|s| *s > 0)
                        .ok_or("its created event's escalation timeout is not a number")?,
                ),
            };
        }
        if let Some(a) = m.get("authenticated_only") {
            q.authenticated_only = a
                .as_bool()
                .ok_or("its created event's authenticated_only is not true or false")?;
        }
        Ok(q)
    }
}

/// The reminders of a period of a gate (from `start` to `deadline`): for each `remind` (seconds
/// before the deadline), the time it is due, when that is inside the period; earliest first.
pub fn reminders(remind: &[i64], deadline: &str, start: &str) -> Vec<(i64, String)> {
    let (Some(end), Some(begin)) = (
        crate::model::Timestamp::parse_lenient(deadline),
        crate::model::Timestamp::parse_lenient(start),
    ) else {
        return Vec::new();
    };
    let mut due: Vec<(i64, String)> = remind
        .iter()
        .map(|r| (*r, end.plus_seconds(-r)))
        .filter(|(_, at)| at.seconds_since(begin) > 0)
        .map(|(r, at)| (r, at.to_string()))
        .collect();
    due.sort_by(|a, b| a.1.cmp(&b.1));
    due.dedup_by(|a, b| a.1 == b.1);
    due
}

/// When the next reminder of the period is due: the earliest after `now` not yet announced.
pub fn next_reminder(
    remind: &[i64],
    deadline: &str,
    start: &str,
    announced: &[String],
    now: &str,
) -> Option<String> {
    reminders(remind, deadline, start)
        .into_iter()
        .map(|(_, at)| at)
        .find(|at| {
            !announced.contains(at) && crate::model::seconds_between(now, at).is_some_and(|s| s > 0)
        })
}

/// The largest quorum a gate may ask for.
pub const MAX_REQUIRE: u32 = 100;

/// Who is in which group and whose token is revoked, as the principals book says when a
/// decision is taken.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Roster {
    /// Group name (without the prefix) → its members.
    pub groups: BTreeMap<String, BTreeSet<String>>,
    pub revoked: BTreeSet<String>,
}

impl Roster {
    pub fn in_group(&self, principal: &str, group: &str) -> bool {
        self.groups
            .get(group)
            .is_some_and(|m| m.contains(principal))
    }
}

/// The entries of `allow` that admit `p` now: its own name, `user` (anyone who is not an
/// agent), and `group:G` for each group G the roster puts it in. Empty when none does. A
/// revoked principal is admitted by no group.
pub fn admitting(allow: &[String], p: &Principal, roster: &Roster) -> Vec<String> {
    allow
        .iter()
        .filter(|a| match a.strip_prefix(GROUP_PREFIX) {
            Some(g) => {
                !p.is_agent()
                    && !roster.revoked.contains(p.as_str())
                    && roster.in_group(p.as_str(), g)
            }
            None => crate::model::principal_allowed(std::slice::from_ref(a), p),
        })
        .cloned()
        .collect()
}

/// Whether a sealed vote's principal is allowed, from what the vote recorded: a group entry
/// admits it when the vote says it was admitted through that group (the holder of the audit
/// key sealed it), names and `user` are checked anew.
pub fn admitted_as_recorded(allow: &[String], p: &Principal, via: &[String]) -> bool {
    allow.iter().any(|a| {
        if is_group(a) {
            !p.is_agent() && via.iter().any(|v| v == a)
        } else {
            crate::model::principal_allowed(std::slice::from_ref(a), p)
        }
    })
}

/// Where the votes of one opening stand.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tally {
    /// Distinct principals who approved, in the order they first did.
    pub approvals: Vec<String>,
    pub rejections: Vec<String>,
}

/// What a tally decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Approved,
    Rejected,
}

impl Tally {
    /// Adds a vote; false when the principal had already voted that way (it counts once).
    pub fn add(&mut self, principal: &str, approve: bool) -> bool {
        let votes = if approve {
            &mut self.approvals
        } else {
            &mut self.rejections
        };
        if votes.iter().any(|v| v == principal) {
            return false;
        }
        votes.push(principal.to_string());
        true
    }

    /// The approvals, or the rejections.
    pub fn votes(&self, approve: bool) -> &Vec<String> {
        if approve {
            &self.approvals
        } else {
            &self.rejections
        }
    }

    pub fn outcome(&self, q: &Quorum) -> Outcome {
        let n = q.require as usize;
        if !self.rejections.is_empty() && (q.veto || self.rejections.len() >= n) {
            Outcome::Rejected
        } else if self.approvals.len() >= n {
            Outcome::Approved
        } else {
            Outcome::Pending
        }
    }

    /// "2 of 3 approvals: alice, bob".
    pub fn progress(&self, q: &Quorum) -> String {
        let mut s = format!(
            "{} of {} approval{}",
            self.approvals.len(),
            q.require,
            if q.require == 1 { "" } else { "s" }
        );
        if !self.approvals.is_empty() {
            s.push_str(": ");
            s.push_str(&self.approvals.join(", "));
        }
        if !q.veto && !self.rejections.is_empty() {
            s.push_str(&format!(
                "; {} of {} rejections: {}",
                self.rejections.len(),
                q.require,
                self.rejections.join(", ")
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Principal {
        Principal::parse(s, "test").unwrap()
    }

    fn roster() -> Roster {
        let mut r = Roster::default();
        r.groups
            .entry("release".into())
            .or_default()
            .extend(["alice".to_string(), "bob".to_string()]);
        r
    }

    #[test]
    fn groups_admit_their_members_and_no_one_revoked() {
        let allow = vec!["group:release".to_string(), "carol".to_string()];
        let mut r = roster();
        assert_eq!(admitting(&allow, &p("alice"), &r), ["group:release"]);
        assert_eq!(admitting(&allow, &p("carol"), &r), ["carol"]);
        assert!(admitting(&allow, &p("dave"), &r).is_empty());
        r.revoked.insert("alice".into());
        assert!(admitting(&allow, &p("alice"), &r).is_empty());
        // `user` admits people, never agents, as before.
        let user = vec!["user".to_string()];
        assert_eq!(admitting(&user, &p("dave"), &r), ["user"]);
        assert!(admitting(&user, &p("agent:bot"), &r).is_empty());
    }

    #[test]
    fn a_recorded_group_counts_only_when_the_allow_list_names_it() {
        let allow = vec!["group:release".to_string()];
        assert!(admitted_as_recorded(
            &allow,
            &p("alice"),
            &["group:release".into()]
        ));
        assert!(!admitted_as_recorded(
            &allow,
            &p("alice"),
            &["group:ops".into()]
        ));
        assert!(!admitted_as_recorded(&allow, &p("alice"), &[]));
    }

    #[test]
    fn votes_add_up_once_each_with_or_without_a_veto() {
        let q = Quorum {
            require: 3,
            ..Quorum::default()
        };
        let mut t = Tally::default();
        assert!(t.add("alice", true));
        assert!(!t.add("alice", true));
        assert!(t.add("bob", true));
        assert_eq!(t.outcome(&q), Outcome::Pending);
        assert_eq!(t.progress(&q), "2 of 3 approvals: alice, bob");
        assert!(t.add("carol", true));
        assert_eq!(t.outcome(&q), Outcome::Approved);
        let mut t = Tally::default();
        t.add("alice", true);
        t.add("bob", false);
        assert_eq!(t.outcome(&q), Outcome::Rejected);
        let q = Quorum { veto: false, ..q };
        assert_eq!(t.outcome(&q), Outcome::Pending);
        t.add("carol", false);
        t.add("dave", false);
        assert_eq!(t.outcome(&q), Outcome::Rejected);
    }

    #[test]
    fn a_quorum_is_recorded_only_where_it_differs_and_read_back() {
        let mut m = json!({"allow": ["user"]});
        Quorum::default().record(&mut m);
        assert_eq!(m, json!({"allow": ["user"]}));
        let q = Quorum {
            require: 2,
            veto: false,
            separate: true,
            starter: Some("alice".into()),
            creator: None,
            remind: vec![3600, 600],
            escalate_to: Some("group:oncall".into()),
            escalate_after: Some(7200),
            authenticated_only: true,
        };
        q.record(&mut m);
        assert_eq!(Quorum::from_created(&m).unwrap(), q);
        assert_eq!(q.excluded(), ["alice"]);
        assert!(Quorum::from_created(&json!({"require": 0})).is_err());
        assert!(Quorum::from_created(&json!({"require": "2"})).is_err());
        assert!(Quorum::from_created(&json!({"remind": [0]})).is_err());
        assert!(Quorum::from_created(&json!({"escalate": {"after": 5}})).is_err());
    }
}
