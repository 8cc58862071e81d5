//! Issue 49, as a property: no one who can write a run's database, without the audit key, can
//! make the program read an answer, or an edit, that no sealed decision gave. A gate with a
//! response binding is approved with an answer, and a gate about an input is approved with an
//! edit, through the binary. Then each case applies a seeded random sequence of raw changes to
//! the response binding's row (every column: its value spelled every way JSON allows, its
//! scope, name, kind, attachment path and times) and to the edited input's value, and checks:
//! - `get` of the response binding prints exactly the bytes the decision wrote, or exits 9;
//! - `gates show` of the edited gate stands (exit 0) only while the input holds exactly the
//!   edit's bytes, and is stale (exit 11) otherwise.
//!
//! Its first version found that a response binding moved to the root by SQL was read from
//! there by a lookup from its own frame (seed 3): a lookup now checks every response binding
//! it passes.
//!
//! `PROSE_RESPONSE_FORGERY_CASES=N` sets the number of cases per backend (default 40); a
//! failure prints its seed, and `PROSE_RESPONSE_FORGERY_SEED=S` replays that case.

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

on_both!(
    no_raw_write_puts_words_in_a_deciders_mouth,
    no_raw_write_hides_what_a_decision_wrote
);

const ANSWER: &str = r#"{"note":"ok","size":3}"#;
const EDIT: &str = "hello, better world";

/// A spelling of JSON text near the answer: the answer itself, or the same JSON written
/// otherwise (spaces, key order, number forms, escapes, a byte order mark, a newline), or
/// another answer.
fn spelling(rng: &mut StdRng) -> String {
    let ws = |rng: &mut StdRng| [" ", "\n", "\t", "\r\n", ""][rng.random_range(0..5)].to_string();
    let size = [
        "3", "3.0", "3e0", "30e-1", "3E+0", "\"3\"", "4", "-3", "03", "3 ",
    ][rng.random_range(0..10)];
    let note = [
        "\"ok\"",
        "\"\\u006fk\"",
        "\"OK\"",
        "\"ok \"",
        "\"o\\u006b\"",
    ][rng.random_range(0..5)];
    let key = ["\"size\"", "\"\\u0073ize\"", "\"Size\""][rng.random_range(0..3)];
    match rng.random_range(0..8) {
        0 => ANSWER.to_string(),
        1 => format!(
            "{{{}\"note\"{}:{}{note}{},{key}:{}{size}{}}}",
            ws(rng),
            ws(rng),
            ws(rng),
            ws(rng),
            ws(rng),
            ws(rng)
        ),
        2 => format!("{{{key}:{size},\"note\":{note}}}"),
        3 => format!("\u{feff}{ANSWER}"),
        4 => format!("{ANSWER}{}", ws(rng)),
        5 => format!(
            "{{\"note\":\"ok\",\"size\":3,\"extra\":{}}}",
            rng.random_range(0..9)
        ),
        6 => ["", "null", "{}", "[]", "3"][rng.random_range(0..5)].to_string(),
        _ => format!("{{\"note\":{note},\"size\":{size}}}"),
    }
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// One raw change, as (SQLite, PostgreSQL) statements.
fn change(rng: &mut StdRng, block: i64) -> (String, String) {
    let (set, which) = match rng.random_range(0..9) {
        0..=2 => (format!("value = {}", quoted(&spelling(rng))), "size"),
        3 => (
            ["execution_id = NULL", "execution_id = execution_id + 1"][rng.random_range(0..2)]
                .to_string(),
            "size",
        ),
        4 => (
            ["name = 'Size'", "name = 'size '", "name = 'siz'"][rng.random_range(0..3)].to_string(),
            "size",
        ),
        5 => (
            [
                "attachment_path = 'attachments/size.bin'",
                "attachment_path = ''",
            ][rng.random_range(0..2)]
            .to_string(),
            "size",
        ),
        6 => (
            [
                "kind = 'const'",
                "kind = 'input'",
                "source_statement = 'x'",
                "updated_at = '2030-01-01 00:00:00'",
            ][rng.random_range(0..4)]
            .to_string(),
            "size",
        ),
        _ => {
            let v = [
                EDIT,
                "hello, better world ",
                "hello world",
                "Hello, better world",
            ][rng.random_range(0..4)];
            (format!("value = {}", quoted(v)), "draft")
        }
    };
    let scope = match which {
        "size" => format!("execution_id = {block}"),
        _ => "execution_id IS NULL".to_string(),
    };
    (
        format!("UPDATE bindings SET {set} WHERE name = '{which}' AND {scope}"),
        format!(
            "UPDATE openprose.bindings SET {set} WHERE run_id = '$RUN' AND name = '{which}' AND {scope}"
        ),
    )
}

/// The rows as the decisions left them, put back between cases.
fn restore(run: &Run, block: i64) {
    // The statement and time the decision wrote it with too: a row is its version's whole.
    let size = |history: &str, run: &str| {
        format!(
            "value = {}, execution_id = {block}, name = 'size', attachment_path = NULL, kind = 'let',
             source_statement = 'approve g:',
             updated_at = (SELECT h.written_at FROM {history} h WHERE {run} h.name = 'size'
                             AND h.n = 1 AND h.execution_id = {block})",
            quoted(ANSWER)
        )
    };
    let find = format!(
        "(name IN ('size', 'Size', 'size ', 'siz') AND (execution_id IS NULL OR execution_id >= {block}) AND kind IS DISTINCT FROM 'x' AND name <> 'draft')"
    );
    // Each raw write left a version in history (its trigger's): an answer's history holds
    // only what decisions wrote, so those go too.
    let forged_versions = format!(
        "DELETE FROM binding_history WHERE name IN ('Size', 'size ', 'siz')
            OR (name = 'size' AND (n > 1 OR execution_id IS DISTINCT FROM {block}))
            OR (name = 'draft' AND n > 2);"
    );
    // Only one row of those names is the response binding's (the root has none of them).
    run.view().raw(
        &format!(
            "UPDATE bindings SET {} WHERE {};
             UPDATE bindings SET value = {} WHERE name = 'draft' AND execution_id IS NULL;
             {}",
            size("binding_history", ""),
            find.replace("IS DISTINCT FROM", "IS NOT"),
            quoted(EDIT),
            forged_versions.replace("IS DISTINCT FROM", "IS NOT")
        ),
        &format!(
            "UPDATE openprose.bindings SET {} WHERE run_id = '$RUN' AND {find};
             UPDATE openprose.bindings SET value = {} WHERE run_id = '$RUN' AND name = 'draft' AND execution_id IS NULL;
             {}",
            size("openprose.binding_history", "h.run_id = '$RUN' AND"),
            quoted(EDIT),
            forged_versions.replace("binding_history WHERE", "openprose.binding_history WHERE run_id = '$RUN' AND")
        ),
    );
}

/// Gate `g`, in a block, answered by alice into `size`; gate `e`, about `draft`, approved by
/// bob with an edit. The block's execution id.
fn decided(run: &Run) -> i64 {
    let block = run.exec(1, "do review:", "executing", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "How big?"])
        .args(["--response-schema", r#"{"type":"object"}"#])
        .args(["--response-binding", "size"])
        .args(["--execution-id", &block.to_string()])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "--as", "alice", "-y", "--response"])
        .arg(r#"{ "note": "ok", "size": 3 }"#)
        .assert()
        .success();
    run.bind("draft", "hello world", None);
    run.cmd()
        .args([
            "gates", "create", "e", "--prompt", "Publish?", "--inputs", "draft",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "e", "--as", "bob", "-y"])
        .args(["--edit", &format!("draft={EDIT}")])
        .assert()
        .success();
    block
}

fn no_raw_write_puts_words_in_a_deciders_mouth(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = decided(&run);
    // The decision wrote the answer as compact JSON.
    assert_eq!(run.get("size", Some(block)), ANSWER.as_bytes());
    let cases = std::env::var("PROSE_RESPONSE_FORGERY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40u64);
    let seeds: Vec<u64> = match std::env::var("PROSE_RESPONSE_FORGERY_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..cases).collect(),
    };
    let (mut caught, mut stood) = (0, 0);
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut draft_written = false;
        for _ in 0..rng.random_range(1..=3) {
            let (lite, pg) = change(&mut rng, block);
            draft_written |= lite.contains("name = 'draft'");
            run.view().raw(&lite, &pg);
        }
        let fail = |why: String| {
            panic!("{b:?}: seed {seed} (replay with PROSE_RESPONSE_FORGERY_SEED={seed}): {why}")
        };
        let a = run
            .cmd()
            .args(["get", "size", "--execution-id", &block.to_string()])
            .assert();
        let out = a.get_output().stdout.clone();
        match code(&a) {
            0 if out == ANSWER.as_bytes() => stood += 1,
            9 => caught += 1,
            other => fail(format!(
                "get printed {:?} with exit {other}: {}",
                String::from_utf8_lossy(&out),
                stderr(&a)
            )),
        }
        let held = match &run.pg_url {
            Some(url) => Some(
                postgres::Client::connect(url, postgres::NoTls)
                    .unwrap()
                    .query_one(
                        "SELECT value FROM openprose.bindings
                         WHERE run_id = $1 AND name = 'draft' AND execution_id IS NULL",
                        &[&run.id],
                    )
                    .unwrap()
                    .get::<_, String>(0),
            ),
            None => Some(
                run.conn()
                    .query_row(
                        "SELECT value FROM bindings WHERE name = 'draft' AND execution_id IS NULL",
                        [],
                        |r| r.get::<_, String>(0),
                    )
                    .unwrap(),
            ),
        };
        let a = run.cmd().args(["gates", "show", "e"]).assert();
        // The edit written over by raw SQL: stale (11) where the write claims nothing, tampered
        // (9) where its trigger kept the edit's statement (`approve e:`) on a version no
        // decision wrote.
        match (code(&a), held.as_deref()) {
            (0, Some(EDIT)) | (11, _) => {}
            (9, Some(_)) if draft_written => {}
            (c, h) => fail(format!(
                "gates show e: exit {c} with draft {h:?}: {}",
                stderr(&a)
            )),
        }
        restore(&run, block);
        assert_eq!(
            run.get("size", Some(block)),
            ANSWER.as_bytes(),
            "seed {seed}: not restored"
        );
    }
    // Both outcomes were reached: the property was exercised, not passed vacuously.
    if std::env::var("PROSE_RESPONSE_FORGERY_SEED").is_err() {
        assert!(caught > 0 && stood > 0, "caught {caught}, stood {stood}");
    }
}

/// A JSON member `"key":value` spelled as a raw write might respell it to hide it from a
/// reader: the key or the value changed, escaped, cased or padded, the member doubled or
/// dropped, from the grammar of a JSON member rather than a list of known attacks.
fn member(rng: &mut StdRng, key: &str, value: &str) -> String {
    // A `\u` escape of one of its characters, or another case, or a space, or nothing.
    let respell = |rng: &mut StdRng, text: &str| -> String {
        let chars: Vec<char> = text.chars().collect();
        let i = rng.random_range(0..chars.len());
        match rng.random_range(0..5) {
            0 => text.to_string(),
            1 => chars
                .iter()
                .enumerate()
                .map(|(j, c)| match j == i {
                    true => format!("\\u{:04x}", *c as u32),
                    false => c.to_string(),
                })
                .collect(),
            2 => text.to_uppercase(),
            3 => format!("{text} "),
            _ => chars
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, c)| *c)
                .collect(),
        }
    };
    let k = format!("\"{}\"", respell(rng, key));
    let v = match value.strip_prefix('[') {
        // An array of names: emptied, its one name respelled, as a string, or with another.
        Some(inner) => {
            let name = inner.trim_end_matches(']').trim_matches('"');
            match rng.random_range(0..4) {
                0 => "[]".to_string(),
                1 => format!("[\"{}\"]", respell(rng, name)),
                2 => format!("\"{name}\""),
                _ => format!("[\"x\",\"{}\"]", respell(rng, name)),
            }
        }
        None => {
            let name = value.trim_matches('"');
            match rng.random_range(0..4) {
                0 => "null".to_string(),
                1 => format!("[\"{name}\"]"),
                _ => format!("\"{}\"", respell(rng, name)),
            }
        }
    };
    match rng.random_range(0..5) {
        0 => format!("{k}:{v},\"{key}\":{value}"),
        1 => format!("\"{key}\":{value},{k}:{v}"),
        2 => format!("\"x\":{v}"),
        _ => format!("{k}:{v}"),
    }
}

/// One raw change that could hide a decision's product from the lookup that protects it, as
/// (SQLite, PostgreSQL) statements, the append-only and version triggers dropped first: an
/// opening's member naming the binding respelled ([`member`]), an opening deleted, or the
/// statement the value says it was written under cleared or respelled; with the value itself
/// forged more often than not.
fn hiding(rng: &mut StdRng, block: i64) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let (gate, key, value) = match rng.random_range(0..2) {
        0 => ("g", "response_binding", "\"size\""),
        _ => ("e", "inputs", "[\"draft\"]"),
    };
    let opening = format!("gate_id = '{gate}' AND event_type = 'created'");
    match rng.random_range(0..4) {
        0 => out.push((
            format!("DELETE FROM gate_audit_log WHERE {opening}"),
            format!("DELETE FROM openprose.gate_audit_log WHERE run_id = '$RUN' AND {opening}"),
        )),
        1 => {}
        _ => {
            let from = format!("\"{key}\":{value}");
            let to = member(rng, key, value);
            let set = format!("metadata = replace(metadata, '{from}', {})", quoted(&to));
            out.push((
                format!("UPDATE gate_audit_log SET {set} WHERE {opening}"),
                format!(
                    "UPDATE openprose.gate_audit_log SET {set} WHERE run_id = '$RUN' AND {opening}"
                ),
            ));
        }
    }
    let (name, scope, forged) = match gate {
        "g" => (
            "size",
            format!("execution_id = {block}"),
            r#"{"note":"ok","size":4}"#,
        ),
        _ => (
            "draft",
            "execution_id IS NULL".to_string(),
            "hello, forged world",
        ),
    };
    let mut sets = Vec::new();
    if rng.random_bool(0.7) {
        sets.push(format!("value = {}", quoted(forged)));
    }
    match rng.random_range(0..4) {
        0 => sets.push("source_statement = NULL".to_string()),
        1 => sets.push(format!("source_statement = 'APPROVE {gate}:'")),
        2 => sets.push(format!("source_statement = 'approve {gate} :'")),
        _ => {}
    }
    if !sets.is_empty() {
        let set = sets.join(", ");
        let which = format!("name = '{name}' AND {scope}");
        out.push((
            format!(
                "UPDATE bindings SET {set} WHERE {which};
                 UPDATE binding_history SET {set} WHERE {which} AND n = (SELECT MAX(n) FROM binding_history WHERE {which})"
            ),
            format!(
                "UPDATE openprose.bindings SET {set} WHERE run_id = '$RUN' AND {which};
                 UPDATE openprose.binding_history SET {set} WHERE run_id = '$RUN' AND {which}
                    AND n = (SELECT MAX(n) FROM openprose.binding_history WHERE run_id = '$RUN' AND {which})"
            ),
        ));
    }
    out
}

/// Issue 49, the lookup's side: whatever raw SQL does to hide an opening from the narrow read
/// of the log by a binding's name (respelling the member that names it, deleting the opening,
/// clearing the statement the value says it was written under), `get` prints what a sealed
/// decision wrote (its answer, its approver's edit) or refuses (exit 9): never a forged value
/// with exit 0. What names a binding is told from the sealed log and this machine's anchor.
fn no_raw_write_hides_what_a_decision_wrote(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let block = decided(&run);
    let decided = p.snapshot();
    let cases = std::env::var("PROSE_RESPONSE_FORGERY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16u64);
    let seeds: Vec<u64> = match std::env::var("PROSE_RESPONSE_FORGERY_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..cases).collect(),
    };
    let mut caught = 0;
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        run.view().raw(
            "DROP TRIGGER gate_audit_log_no_update;
             DROP TRIGGER gate_audit_log_no_delete;
             DROP TRIGGER bindings_version_update;
             DROP TRIGGER binding_history_version;",
            "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER USER;
             ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
             ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;",
        );
        let mut applied = Vec::new();
        for _ in 0..rng.random_range(1..=2) {
            for (lite, pg) in hiding(&mut rng, block) {
                run.view().raw(&lite, &pg);
                applied.push(lite);
            }
        }
        let fail = |why: String| {
            panic!(
                "{b:?}: seed {seed} (replay with PROSE_RESPONSE_FORGERY_SEED={seed}), after {applied:?}: {why}"
            )
        };
        let block_id = block.to_string();
        for (args, want) in [
            (vec!["get", "size", "--execution-id", &block_id], ANSWER),
            (vec!["get", "draft"], EDIT),
        ] {
            let a = run.cmd().args(&args).assert();
            let out = a.get_output().stdout.clone();
            match code(&a) {
                0 if out == want.as_bytes() => {}
                9 => caught += 1,
                other => fail(format!(
                    "{args:?} printed {:?} with exit {other}: {}",
                    String::from_utf8_lossy(&out),
                    stderr(&a)
                )),
            }
        }
        p.restore(&decided);
    }
    if std::env::var("PROSE_RESPONSE_FORGERY_SEED").is_err() {
        assert!(caught > 0, "no case was caught");
    }
}
