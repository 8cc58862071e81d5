//! Issue 44, its first part: a token counts only as the principals book's sealed log issued it,
//! where this machine can check that log. Findings of the independent battery, through the
//! binary on both backends: a token hash replaced in the book's rows, a revocation undone in
//! the rows, and the log cut at its end admit no one. (A book this machine cannot check, one
//! sealed with another key, is still read from its rows: the rest of issue 44.)

use crate::common::*;

on_both!(
    a_token_is_one_the_sealed_log_issued,
    a_book_log_cut_at_its_end_admits_no_one,
);

/// Runs raw SQL on the project's principals book (SQLite's `.prose/principals.db`, or the
/// server's `openprose` tables).
fn book_sql(p: &Project, sqlite: &str, postgres: &str) {
    match &p.pg_url {
        Some(url) => postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .batch_execute(postgres)
            .unwrap(),
        None => rusqlite::Connection::open(p.root().join(".prose/principals.db"))
            .unwrap()
            .execute_batch(sqlite)
            .unwrap(),
    }
}

fn issue(p: &Project, name: &str, extra: &[&str]) -> String {
    let a = p
        .cmd()
        .args(["principals", "add", name])
        .args(extra)
        .assert()
        .success();
    String::from_utf8_lossy(&a.get_output().stdout)
        .trim()
        .to_string()
}

fn approve(run: &Run, gate: &str, token: &str) -> i32 {
    code(
        &run.cmd()
            .env("PROSE_TOKEN", token)
            .args(["approve", gate, "--yes"])
            .assert(),
    )
}

fn a_token_is_one_the_sealed_log_issued(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = issue(&p, "alice", &[]);
    let bob = issue(&p, "bob", &[]);
    let carol = issue(&p, "carol", &[]);
    for g in ["g1", "g2"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "ship?"])
            .assert()
            .success();
    }
    // bob's hash written over alice's row: bob's secret under alice's name is no token.
    book_sql(
        &p,
        "UPDATE principals SET token_hash = (SELECT token_hash FROM principals WHERE name = 'bob')
          WHERE name = 'alice'",
        "UPDATE openprose.principals SET token_hash =
           (SELECT token_hash FROM openprose.principals WHERE name = 'bob') WHERE name = 'alice'",
    );
    let forged = format!("alice.{}", bob.rsplit_once('.').unwrap().1);
    assert_eq!(approve(&run, "g1", &forged), 4);
    assert_ne!(
        approve(&run, "g1", &alice),
        0,
        "alice's old secret no longer matches"
    );
    // A revocation undone in the rows: still revoked.
    p.cmd()
        .args(["principals", "revoke", "carol"])
        .assert()
        .success();
    book_sql(
        &p,
        "UPDATE principals SET revoked_at = NULL WHERE name = 'carol'",
        "UPDATE openprose.principals SET revoked_at = NULL WHERE name = 'carol'",
    );
    assert_eq!(approve(&run, "g2", &carol), 4);
    assert_eq!(run.view().gate("g1").0, "pending");
    assert_eq!(run.view().gate("g2").0, "pending");
}

fn a_book_log_cut_at_its_end_admits_no_one(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    issue(&p, "alice", &["--group", "release"]);
    let carol = issue(&p, "carol", &["--group", "release"]);
    p.cmd()
        .args(["principals", "group", "remove", "release", "carol"])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates",
            "create",
            "rel",
            "--prompt",
            "release?",
            "--allow",
            "group:release",
        ])
        .assert()
        .success();
    book_sql(
        &p,
        "DELETE FROM book_log WHERE seq = (SELECT max(seq) FROM book_log)",
        "DELETE FROM openprose.book_log WHERE seq = (SELECT max(seq) FROM openprose.book_log)",
    );
    assert_eq!(
        approve(&run, "rel", &carol),
        9,
        "the cut is found by the anchor"
    );
    let w = run
        .cmd()
        .args(["gates", "wait", "rel", "--timeout", "0"])
        .assert();
    assert_eq!(code(&w), 7);
}
