//! The kept versions of a binding against what the sealed log says of them. History rows are
//! not sealed; the decisions that wrote or pinned some of them are. So every field of a version
//! a sealed decision wrote (an approver's edit, a gate's answer) is derived from its event and
//! compared: where it is (name, scope, number), who wrote it, when (time and newest record),
//! that it is a whole value and not a deletion, and its bytes. A scope a gate answers into
//! holds only versions its decisions wrote. And a scope's versions are numbered 1, 2, 3, …
//! without a hole or a number twice (a prune keeps the newest and cuts only the oldest), with
//! records that never go backwards: a row renumbered, duplicated, moved or cut behind
//! prose-state's back breaks one of these, and a read of the past then reads nothing.

use super::chain::{ChainReport, Pin};
use super::history::HistoryRow;
use crate::error::shown;
use std::collections::BTreeSet;

/// The names the sealed openings of the report name: each gate's inputs and response binding.
pub fn names(report: &ChainReport) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for d in report.derived.values() {
        for opening in d.earlier.iter().chain(std::iter::once(d)) {
            out.extend(opening.inputs.iter().cloned());
            if let Some((name, _)) = &opening.response_binding {
                out.insert(name.clone());
            }
        }
    }
    out
}

/// The scopes of `name` the sealed log says something of: where a decision wrote a version of
/// it, pinned one, or a gate answers into it.
pub fn scopes(report: &ChainReport, name: &str) -> Vec<Option<i64>> {
    let mut out: Vec<Option<i64>> = Vec::new();
    let mut add = |s: Option<i64>| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for w in sealed_writes(report) {
        if w.name == name {
            add(w.scope);
        }
    }
    for (_, pin, _) in pins(report, name) {
        add(pin.scope);
    }
    for s in answer_scopes(report, name) {
        add(s);
    }
    out
}

/// Each version of `name` a sealed decision vouches for, with the gate and the digest it
/// sealed: the versions a decision or a quorum vote pinned (was about), and the versions an approver's edit
/// replaced (`from_version`, with the `digest_before` the edit sealed), so that no version a
/// decision was shown is rewritten unseen.
pub fn pins<'a>(report: &'a ChainReport, name: &str) -> Vec<(&'a str, Pin, &'a str)> {
    let mut out = Vec::new();
    for (gate, d) in &report.derived {
        for opening in d.earlier.iter().chain(std::iter::once(d)) {
            let pin = opening.pinned.as_ref().and_then(|p| p.get(name));
            let digest = opening
                .decided_inputs
                .as_ref()
                .and_then(|i| i.get(name))
                .and_then(|d| d.as_deref());
            if let (Some(pin), Some(digest)) = (pin, digest) {
                out.push((gate.as_str(), pin.clone(), digest));
            }
            // What each quorum vote was shown: its pinned versions hold what it sealed.
            for (pins, digests) in &opening.voted {
                let digest = digests.get(name).and_then(|d| d.as_deref());
                if let (Some(pin), Some(digest)) = (pins.get(name), digest) {
                    out.push((gate.as_str(), pin.clone(), digest));
                }
            }
            for (_, e) in &opening.edits {
                let replaced = (e["name"].as_str() == Some(name))
                    .then(|| (e["from_version"].as_i64(), e["digest_before"].as_str()));
                if let Some((Some(version), Some(digest))) = replaced {
                    let scope = e["execution_id"].as_i64();
                    out.push((gate.as_str(), Pin { scope, version }, digest));
                }
            }
        }
    }
    out
}

/// The scopes a sealed opening names as where its decision writes `name` (its answer).
pub fn answer_scopes(report: &ChainReport, name: &str) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for d in report.derived.values() {
        for opening in d.earlier.iter().chain(std::iter::once(d)) {
            if let Some((n, scope)) = &opening.response_binding {
                if n == name && !out.contains(scope) {
                    out.push(*scope);
                }
            }
        }
    }
    out
}

/// Why the kept versions `rows` of binding `name` in `scope` (all of them, oldest first, as
/// `Rows::binding_history` reads them) do not stand against the report's sealed decisions, if
/// they do not.
pub fn problem(
    report: &ChainReport,
    name: &str,
    scope: Option<i64>,
    rows: &[HistoryRow],
) -> Option<String> {
    let place = || scope.map_or("the root".to_string(), |e| format!("execution {e}"));
    // Numbered without a hole or a repeat, records never going backwards.
    for pair in rows.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.n.checked_add(1) != Some(b.n) {
            return Some(format!(
                "the history of binding {} in {} goes from version {} to version {}: no rule numbers versions so",
                shown(name),
                place(),
                a.n,
                b.n
            ));
        }
        // A version written with no record before it only while the run had none.
        if let (Some(x), None) = (a.at_record, b.at_record) {
            return Some(format!(
                "version {} of binding {} in {} names no record, after version {} at record {x}: records do not go backwards",
                b.n,
                shown(name),
                place(),
                a.n
            ));
        }
        if let (Some(x), Some(y)) = (a.at_record, b.at_record) {
            if y < x {
                return Some(format!(
                    "version {} of binding {} in {} was written at record {y}, before version {} at record {x}: records do not go backwards",
                    b.n,
                    shown(name),
                    place(),
                    a.n
                ));
            }
        }
    }
    // The oldest kept is version 1, or says older ones are not kept; and it is whole (a prune
    // writes the value of the version it keeps first).
    if let Some(r) = rows.first() {
        if (r.n != 1 && !r.gap) || r.delta.is_some() {
            return Some(format!(
                "the history of binding {} in {} starts at version {}{}, and no rule cuts it so",
                shown(name),
                place(),
                r.n,
                if r.delta.is_some() { ", a step" } else { "" }
            ));
        }
    }
    let pruned_below = rows.first().filter(|r| r.gap).map_or(1, |r| r.n);
    let writes: Vec<_> = sealed_writes(report)
        .into_iter()
        .filter(|w| w.name == name && w.scope == scope)
        .collect();
    for w in &writes {
        let Some(r) = rows.iter().find(|r| r.n == w.version) else {
            if w.version < pruned_below {
                continue;
            }
            return Some(format!(
                "version {} of binding {} in {}, which gate {}'s sealed decision wrote, is gone from its history",
                w.version,
                shown(name),
                place(),
                shown(w.gate)
            ));
        };
        let wrong = |what: String| {
            Some(format!(
                "version {} of binding {} in {} {what}, and gate {}'s sealed decision wrote it",
                w.version,
                shown(name),
                place(),
                shown(w.gate)
            ))
        };
        if r.deleted || r.delta.is_some() {
            return wrong("is kept as a deletion or a step, not the whole value".into());
        }
        // It says older versions are not kept only as the oldest kept after a prune.
        if r.gap && (rows.first().map(|f| f.n) != Some(r.n) || r.n == 1) {
            return wrong("says older versions are not kept".into());
        }
        // The statement a decision writes under, and the kind: an answer is a `let`, an edit
        // keeps the kind of the version it follows (a `let` where there is none).
        let statement = format!("approve {}:", w.gate);
        if r.source_statement.as_deref() != Some(statement.as_str()) {
            return wrong(format!(
                "says statement {} wrote it",
                shown(r.source_statement.as_deref().unwrap_or("none"))
            ));
        }
        let before = rows
            .iter()
            .find(|p| Some(p.n) == w.version.checked_sub(1))
            .filter(|p| !p.deleted);
        let kind = match (&w.exact, before) {
            (None, Some(p)) => p.kind.as_deref(),
            (None, None) if w.version <= pruned_below && w.version > 1 => r.kind.as_deref(),
            _ => Some("let"),
        };
        if r.kind.as_deref() != kind {
            return wrong(format!(
                "is of kind {}",
                shown(r.kind.as_deref().unwrap_or("none"))
            ));
        }
        if let Some(by) = w.by {
            if r.principal.as_deref() != Some(by) {
                return wrong(format!(
                    "says {} wrote it",
                    shown(r.principal.as_deref().unwrap_or("no one"))
                ));
            }
        }
        if let Some(written) = w.written {
            if written.record.is_some() && r.at_record != written.record {
                return wrong(format!(
                    "says it was written at record {}",
                    r.at_record.map_or("none".to_string(), |n| n.to_string())
                ));
            }
            // The very text of its event's time: reads of the past compare times as stored.
            if let Some(at) = &written.at {
                let same = r.written_at.as_deref() == Some(at.as_str());
                if !(same || r.gap && r.written_at.is_none()) {
                    return wrong(format!(
                        "says it was written at {}, not {}",
                        shown(r.written_at.as_deref().unwrap_or("no time")),
                        shown(at)
                    ));
                }
            }
        }
        // A decision writes its value whole, in the row: not in a file.
        let inline = r.attachment_path.as_deref().is_none_or(str::is_empty);
        let held = r.value.as_deref().filter(|_| inline);
        if held.is_none() {
            return wrong("holds no value in its row".into());
        }
        if let Some(text) = &w.exact {
            if held != Some(text.as_bytes()) {
                return wrong(format!(
                    "does not hold the answer its decision wrote (its {} bytes)",
                    text.len()
                ));
            }
        } else if let (Some(n), Some(v)) = (w.bytes, held) {
            if v.len() as i64 != n {
                return wrong(format!("holds {} bytes, not {n}", v.len()));
            }
        }
        if let (Some(d), Some(v)) = (w.digest, held) {
            if crate::model::sha256_tag_bytes(v) != d {
                return wrong("does not hold what its decision sealed (its digest)".into());
            }
        }
    }
    if let Some(why) = claim_problem(report, name, scope, rows) {
        return Some(why);
    }
    // Only a decision writes a gate's answer: each version there is one a decision wrote, or
    // `doctor --fix` restating the answer before it when it resumed history (no writer, marked
    // as following writes that may not have been kept).
    if answer_scopes(report, name).contains(&scope) {
        let restates = |r: &HistoryRow| {
            let answer = writes
                .iter()
                .filter(|w| w.version < r.n && w.exact.is_some())
                .max_by_key(|w| w.version)
                .and_then(|w| w.exact.as_deref());
            r.gap
                && r.principal.is_none()
                && !r.deleted
                && r.delta.is_none()
                && r.attachment_path.as_deref().is_none_or(str::is_empty)
                && answer.is_some_and(|a| r.value.as_deref() == Some(a.as_bytes()))
        };
        let unwritten = |r: &&HistoryRow| !writes.iter().any(|w| w.version == r.n) && !restates(r);
        if let Some(r) = rows.iter().find(unwritten) {
            return Some(format!(
                "version {} of binding {} in {} is in a gate's answer, and no sealed decision wrote it",
                r.n,
                shown(name),
                place()
            ));
        }
    }
    None
}

/// Why a kept version of `name` in `scope` (any scope, whether or not the sealed log says
/// anything of it) says a decision wrote it (its statement `approve G:`) and no sealed decision
/// of G wrote it, if one does: a version a program or raw SQL wrote, its statement or writer
/// rewritten to pass it off as an approver's edit or an answer. Judged only where this machine
/// attests G's opening. (`doctor --fix` restating an answer writes no writer: judged by
/// [`problem`].)
pub fn claim_problem(
    report: &ChainReport,
    name: &str,
    scope: Option<i64>,
    rows: &[HistoryRow],
) -> Option<String> {
    let place = || scope.map_or("the root".to_string(), |e| format!("execution {e}"));
    let writes: Vec<_> = sealed_writes(report)
        .into_iter()
        .filter(|w| w.name == name && w.scope == scope)
        .collect();
    let claimed = |r: &&HistoryRow| {
        let gate = r
            .source_statement
            .as_deref()
            .and_then(super::rules::decided_by);
        let restates = |g: &str| restates(&writes, r, g);
        // Only where this machine attests the gate's opening: sealed elsewhere, it vouches
        // for nothing either way (read as unattested, 10).
        let attested = |g: &str| report.derived.get(g).is_some_and(|d| d.instance > 0);
        gate.is_some_and(|g| {
            attested(g) && !restates(g) && !writes.iter().any(|w| w.version == r.n && w.gate == g)
        })
    };
    rows.iter().find(claimed).map(|r| {
        format!(
            "version {} of binding {} in {} says {} wrote it, and no sealed decision of that gate wrote that version",
            r.n,
            shown(name),
            place(),
            shown(r.source_statement.as_deref().unwrap_or_default())
        )
    })
}

/// Whether history row `r` is `doctor --fix` starting a history again with a value gate
/// `g`'s decision wrote (no writer, marked as following versions not kept): a restatement of
/// a version of `writes` (the sealed writes of its name and scope) G wrote before it, holding
/// what that decision sealed of it (the answer, the edit's digest, else its size).
pub fn restates(writes: &[SealedWrite<'_>], r: &HistoryRow, g: &str) -> bool {
    let held = r.value.as_deref();
    r.gap
        && r.principal.is_none()
        && !r.deleted
        && r.delta.is_none()
        && writes.iter().any(|w| {
            w.gate == g
                && w.version < r.n
                && match (&w.exact, w.digest, w.bytes) {
                    (Some(text), _, _) => held == Some(text.as_bytes()),
                    (None, Some(d), _) => {
                        held.is_some_and(|v| crate::model::sha256_tag_bytes(v) == d)
                    }
                    (None, None, Some(n)) => held.is_some_and(|v| v.len() as i64 == n),
                    (None, None, None) => false,
                }
        })
}

/// A version of a binding a sealed decision wrote: an approver's edit, or a gate's answer.
pub struct SealedWrite<'a> {
    pub gate: &'a str,
    pub name: &'a str,
    pub scope: Option<i64>,
    pub version: i64,
    /// Who the log says wrote it: the editor, or the decider of an answer the log holds.
    pub by: Option<&'a str>,
    /// Its size in bytes, when the log sealed one.
    pub bytes: Option<i64>,
    /// The digest of its value (`sha256:…`), when the log sealed one (an edit's `digest`).
    pub digest: Option<&'a str>,
    /// The exact value, when the log holds it (an answer).
    pub exact: Option<String>,
    /// When its event was written: the time and newest record its history row holds.
    pub written: Option<&'a super::chain::Written>,
}

/// Every version sealed decisions wrote, at every opening of every gate the report derived:
/// the one walk the checks of who wrote a version and the reads of where one came from make.
pub fn sealed_writes(report: &ChainReport) -> Vec<SealedWrite<'_>> {
    let mut out = Vec::new();
    for (gate, d) in &report.derived {
        for opening in d.earlier.iter().chain(std::iter::once(d)) {
            for (i, (by, e)) in opening.edits.iter().enumerate() {
                if let (Some(name), Some(version)) = (e["name"].as_str(), e["version"].as_i64()) {
                    out.push(SealedWrite {
                        gate,
                        name,
                        scope: e["execution_id"].as_i64(),
                        version,
                        by: Some(by),
                        bytes: e["bytes"].as_i64(),
                        digest: e["digest"].as_str(),
                        exact: None,
                        written: opening.edits_at.get(i),
                    });
                }
            }
            if let (Some((name, scope)), Some(version)) =
                (&opening.response_binding, opening.response_version)
            {
                // An answer vouches for its writer and bytes only with its decision and answer.
                let answered = match (&opening.decision, &opening.response) {
                    (Some((_, by, _)), Some(answer)) => Some((by.as_str(), answer.to_string())),
                    _ => None,
                };
                out.push(SealedWrite {
                    gate,
                    name,
                    scope: *scope,
                    version,
                    by: answered.as_ref().map(|(by, _)| *by),
                    bytes: answered.as_ref().map(|(_, t)| t.len() as i64),
                    digest: None,
                    exact: answered.map(|(_, t)| t),
                    written: opening.decided.as_ref(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! The check against every column of `binding_history`, each given every kind of value
    //! its type holds: what a change of a column must be found as is stated once per column
    //! from what the sealed log says (`expected`), not per case.
    use super::*;
    use crate::model::GateStatus;
    use crate::store::chain::{Derived, Written};
    use serde_json::json;

    const T: &str = "2026-11-29 22:10:28";

    fn row(name: &str, n: i64, value: Option<&str>, delta: Option<&str>, at: i64) -> HistoryRow {
        HistoryRow {
            seq: n,
            name: name.into(),
            execution_id: None,
            n,
            kind: Some("let".into()),
            value: value.map(|v| v.as_bytes().to_vec()),
            delta: delta.map(str::to_string),
            attachment_path: None,
            source_statement: Some("bind".into()),
            written_at: Some(T.into()),
            at_record: Some(at),
            principal: Some("agent:w".into()),
            deleted: false,
            gap: false,
        }
    }

    /// A gate `g` about `draft`, approved by alice at record 4 with the answer `{"count":3}`
    /// into `ans` (its version 1) and an edit of `draft` (its version 4, 7 bytes); and the
    /// two histories as the rules wrote them.
    fn sealed() -> (ChainReport, Vec<HistoryRow>, Vec<HistoryRow>) {
        let at = Written {
            at: Some(T.into()),
            record: Some(4),
        };
        let d = Derived {
            instance: 1,
            inputs: vec!["draft".into()],
            decision: Some((GateStatus::Approved, "alice".into(), 3)),
            decided: Some(at.clone()),
            response: Some(json!({"count": 3})),
            response_binding: Some(("ans".into(), None)),
            response_version: Some(1),
            edits: vec![(
                "alice".into(),
                json!({"name": "draft", "execution_id": null, "from_version": 3, "version": 4, "bytes": 7,
                       "digest": crate::model::sha256_tag(r#"{"a":9}"#)}),
            )],
            edits_at: vec![at],
            ..Derived::default()
        };
        let mut report = ChainReport::default();
        report.derived.insert("g".into(), d);
        let mut draft = vec![
            row("draft", 1, Some(r#"{"a":1}"#), None, 1),
            row("draft", 2, None, Some(r#"{"merge":{"b":2}}"#), 2),
            row("draft", 3, None, Some(r#"{"merge":{"c":3}}"#), 2),
            row("draft", 4, Some(r#"{"a":9}"#), None, 4),
            row("draft", 5, None, Some(r#"{"merge":{"d":4}}"#), 5),
        ];
        let mut ans = vec![row("ans", 1, Some(r#"{"count":3}"#), None, 4)];
        for r in [&mut draft[3], &mut ans[0]] {
            r.principal = Some("alice".into());
            r.source_statement = Some("approve g:".into());
        }
        (report, draft, ans)
    }

    /// Every value a column of each type may be given: absent, empty, neighbours, extremes,
    /// other text, and the same instant spelled as each form the database parses.
    fn ints(v: Option<i64>) -> Vec<Option<i64>> {
        let mut out = vec![None, Some(0), Some(-1), Some(i64::MAX), Some(i64::MIN)];
        if let Some(v) = v {
            out.extend([Some(v - 1), Some(v + 1), Some(v + 2), Some(v)]);
        }
        out
    }
    fn texts(v: Option<&str>) -> Vec<Option<String>> {
        let mut out = vec![
            None,
            Some(String::new()),
            Some("let".into()),
            Some("x".into()),
        ];
        if let Some(v) = v {
            out.extend([
                Some(v.to_uppercase()),
                Some(format!("{v} ")),
                Some(v.into()),
            ]);
        }
        out
    }
    fn times() -> Vec<(Option<String>, bool)> {
        // (the value, whether it is `T` as stored: reads of the past compare the text, so
        // another spelling of the same instant is another time to them)
        vec![
            (None, false),
            (Some("garbage".into()), false),
            (Some("2026-11-29 22:10:29".into()), false),
            (Some("2020-01-01 00:00:00".into()), false),
            (Some("9999-12-31 23:59:59".into()), false),
            (Some("2026-11-29T22:10:28".into()), false),
            (Some("2026-11-29T22:10:28Z".into()), false),
            (Some("2026-11-29 22:10:28.000".into()), false),
            (Some("2026-11-29T23:10:28+01:00".into()), false),
            (Some(" 2026-11-29 22:10:28".into()), false),
            (Some("2461373.4239351852".into()), false),
            (Some(T.into()), true),
        ]
    }

    /// Each way one column of row `i` can be changed, with whether the check must find it.
    fn changes(rows: &[HistoryRow], i: usize, sealed_at: usize) -> Vec<(String, HistoryRow, bool)> {
        let r = &rows[i];
        let is_sealed = i == sealed_at;
        // The row before the sealed one gives the sealed edit its kind.
        let gives_kind =
            i + 1 == sealed_at && rows[sealed_at].value.as_deref() != Some(br#"{"count":3}"#);
        let mut out = Vec::new();
        let mut push = |what: String, r2: HistoryRow, found: bool| out.push((what, r2, found));
        for v in ints(Some(r.n)) {
            let Some(v) = v else { continue };
            push(format!("n={v}"), HistoryRow { n: v, ..r.clone() }, v != r.n);
        }
        for v in ints(r.at_record) {
            let prev = i.checked_sub(1).and_then(|p| rows[p].at_record);
            let next = rows.get(i + 1).and_then(|n| n.at_record);
            // Never backwards, and never none once a record was named.
            let order = matches!((prev, v), (Some(p), Some(v)) if v < p)
                || matches!((prev, v), (Some(_), None))
                || matches!((v, next), (Some(v), Some(n)) if n < v);
            let found = v != r.at_record && (is_sealed || order);
            push(
                format!("at_record={v:?}"),
                HistoryRow {
                    at_record: v,
                    ..r.clone()
                },
                found,
            );
        }
        for (v, same) in times() {
            let found = is_sealed && !same;
            push(
                format!("written_at={v:?}"),
                HistoryRow {
                    written_at: v,
                    ..r.clone()
                },
                found,
            );
        }
        for v in texts(r.principal.as_deref()) {
            let found = is_sealed && v != r.principal;
            push(
                format!("principal={v:?}"),
                HistoryRow {
                    principal: v,
                    ..r.clone()
                },
                found,
            );
        }
        for v in texts(r.source_statement.as_deref()) {
            let found = is_sealed && v != r.source_statement;
            push(
                format!("source_statement={v:?}"),
                HistoryRow {
                    source_statement: v,
                    ..r.clone()
                },
                found,
            );
        }
        for v in texts(r.kind.as_deref()) {
            let found = (is_sealed || gives_kind) && v != r.kind;
            push(
                format!("kind={v:?}"),
                HistoryRow {
                    kind: v,
                    ..r.clone()
                },
                found,
            );
        }
        for v in texts(r.value.as_deref().map(|v| std::str::from_utf8(v).unwrap())) {
            let bytes = v.as_ref().map(|v| v.as_bytes().to_vec());
            // An answer is its bytes; an edit its digest: any other value is found.
            let found = is_sealed
                && match rows[i].value.as_deref() {
                    Some(b) => bytes.as_deref() != Some(b),
                    None => false,
                };
            push(
                format!("value={v:?}"),
                HistoryRow {
                    value: bytes,
                    ..r.clone()
                },
                found,
            );
        }
        for v in texts(r.delta.as_deref()) {
            // A step is no decision's, and the oldest kept is whole.
            let found = (is_sealed || i == 0) && v.is_some();
            push(
                format!("delta={v:?}"),
                HistoryRow {
                    delta: v,
                    ..r.clone()
                },
                found,
            );
        }
        for v in texts(r.attachment_path.as_deref()) {
            let found = is_sealed && v.as_deref().is_some_and(|p| !p.is_empty());
            push(
                format!("attachment_path={v:?}"),
                HistoryRow {
                    attachment_path: v,
                    ..r.clone()
                },
                found,
            );
        }
        for v in [false, true] {
            // A decision's version is no deletion, and says older are not kept only as the
            // oldest kept after a prune (here: version 1, or not the oldest). Another version
            // may say so (`doctor --fix` resuming history writes such a one).
            push(
                format!("deleted={v}"),
                HistoryRow {
                    deleted: v,
                    ..r.clone()
                },
                v && is_sealed,
            );
            push(
                format!("gap={v}"),
                HistoryRow {
                    gap: v,
                    ..r.clone()
                },
                v && is_sealed,
            );
        }
        for v in ints(Some(r.seq)) {
            let Some(v) = v else { continue };
            push(
                format!("seq={v}"),
                HistoryRow {
                    seq: v,
                    ..r.clone()
                },
                false,
            );
        }
        out
    }

    #[test]
    fn every_column_of_a_decisions_version_is_checked_and_no_other_is_judged() {
        let (report, draft, ans) = sealed();
        assert_eq!(problem(&report, "draft", None, &draft), None);
        assert_eq!(problem(&report, "ans", None, &ans), None);
        let mut cases = 0;
        for (name, rows, sealed_at) in [("draft", &draft, 3), ("ans", &ans, 0)] {
            for i in 0..rows.len() {
                for (what, changed, found) in changes(rows, i, sealed_at) {
                    let mut r2 = rows.clone();
                    r2[i] = changed;
                    let got = problem(&report, name, None, &r2);
                    assert_eq!(got.is_some(), found, "{name} v{}: {what}: {got:?}", i + 1);
                    cases += 1;
                }
                // Moved to another scope or renamed: gone from this one.
                let mut r2 = rows.clone();
                r2.remove(i);
                // Its own, or a hole (the oldest kept then starting past 1 unsaid).
                let gone = i == sealed_at || i + 1 < rows.len();
                let got = problem(&report, name, None, &r2);
                assert_eq!(got.is_some(), gone, "{name} v{} moved away: {got:?}", i + 1);
                // Written twice.
                let mut r2 = rows.clone();
                r2.insert(i, rows[i].clone());
                assert!(
                    problem(&report, name, None, &r2).is_some(),
                    "{name} v{} twice",
                    i + 1
                );
                cases += 2;
            }
        }
        // A version no decision wrote, in the answer's scope: found, unless it is `doctor
        // --fix` restating the answer (no writer, marked as after writes not kept).
        let mut more = ans.clone();
        more.push(row("ans", 2, Some("6"), None, 5));
        assert!(problem(&report, "ans", None, &more).is_some());
        let mut resumed = row("ans", 2, Some(r#"{"count":3}"#), None, 5);
        (resumed.gap, resumed.principal) = (true, None);
        more[1] = resumed.clone();
        assert_eq!(problem(&report, "ans", None, &more), None);
        for changed in [
            HistoryRow {
                gap: false,
                ..resumed.clone()
            },
            HistoryRow {
                principal: Some("mallory".into()),
                ..resumed.clone()
            },
            HistoryRow {
                value: Some(b"6".to_vec()),
                ..resumed.clone()
            },
            HistoryRow {
                deleted: true,
                ..resumed.clone()
            },
        ] {
            more[1] = changed;
            assert!(
                problem(&report, "ans", None, &more).is_some(),
                "{:?}",
                more[1]
            );
        }
        assert!(cases > 400, "{cases}");
    }
}
