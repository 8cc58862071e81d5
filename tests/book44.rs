//! Issue 44: the principals book is its sealed log. The findings of the independent battery,
//! each through the binary on both backends:
//! 1. an agent cannot change a book pinned to the approver's signing key (neither with the
//!    command line, holding the audit key or not, nor by raw SQL): a token the signed log did
//!    not issue signs no one in to the page, and no decision it makes passes
//!    `gates wait --require-signed --key K`;
//! 2. a token hash replaced or a revocation undone in the rows admits no one, and a log cut
//!    at its end (a group removal, a revocation, the pin itself) is found by the anchor;
//! 3. a book copied into another project or server database admits no one there until it is
//!    re-bound.
//!
//! The property over every column is tests/book_forgery.rs.

use crate::common::*;
use crate::serve::{approve_as_shown, gate_path, post_as_shown, Server};

on_both!(
    a_row_the_log_did_not_issue_is_said_by_principals_and_doctor,
    a_token_is_one_the_sealed_log_issued,
    a_book_log_cut_at_its_end_admits_no_one,
    a_signed_book_is_out_of_an_agents_reach,
    a_book_copied_elsewhere_admits_no_one_until_rebound,
    an_approver_without_the_audit_key_holds_a_signed_book,
    the_approvers_anchor_holds_however_the_project_is_reached,
    a_page_session_ends_when_the_log_no_longer_issues_its_token,
    a_seal_naming_another_key_after_this_users_is_forged,
    the_page_signs_only_for_a_book_pinned_to_its_key,
    concurrent_signed_changes_keep_the_log_whole,
    a_signed_decision_stands_only_in_its_run_and_project,
    signed_mode_as_documented_passes_a_page_decision,
);

#[test]
fn a_servers_identity_is_not_answered_by_a_function_on_the_search_path() {
    if let Some(p) = Project::on(Backend::Postgres) {
        the_servers_identity_is_its_own(&p);
    }
}

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

/// The book as the test reads it, independent of the binary: every row of its log and its
/// principals, and its settings.
fn book_rows(p: &Project) -> Vec<String> {
    let tables = [
        ("book_log", "seq"),
        ("principals", "name"),
        ("settings", "key"),
    ];
    let mut out = Vec::new();
    match &p.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            for (t, order) in tables {
                for r in c
                    .query(
                        &format!(
                            "SELECT row_to_json(x)::text FROM openprose.{t} x ORDER BY {order}"
                        ),
                        &[],
                    )
                    .unwrap()
                {
                    out.push(format!("{t}: {}", r.get::<_, String>(0)));
                }
            }
        }
        None => {
            let c = rusqlite::Connection::open(p.root().join(".prose/principals.db")).unwrap();
            for (t, order) in tables {
                let mut s = c
                    .prepare(&format!("SELECT * FROM {t} ORDER BY {order}"))
                    .unwrap();
                let n = s.column_count();
                let rows = s
                    .query_map([], |r| {
                        Ok((0..n)
                            .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                            .collect::<Vec<_>>()
                            .join("|"))
                    })
                    .unwrap();
                out.extend(rows.map(|r| format!("{t}: {}", r.unwrap())));
            }
        }
    }
    out
}

/// Another OS user: a home of its own under the project, with a copy of this project's user's
/// audit key when `audit_key`.
fn other_user(p: &Project, name: &str, audit_key: bool) -> std::path::PathBuf {
    let home = p.root().join(name);
    std::fs::create_dir_all(home.join(".prose")).unwrap();
    if audit_key {
        std::fs::copy(
            test_home(p.root()).join(".prose/audit.key"),
            home.join(".prose/audit.key"),
        )
        .unwrap();
    }
    home
}

/// The newest row of the book's log, as (seq, hash), read by the test.
fn log_tip(p: &Project) -> (i64, String) {
    match &p.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            let r = c
                .query_one(
                    "SELECT seq, hash FROM openprose.book_log ORDER BY seq DESC LIMIT 1",
                    &[],
                )
                .unwrap();
            (r.get(0), r.get(1))
        }
        None => rusqlite::Connection::open(p.root().join(".prose/principals.db"))
            .unwrap()
            .query_row(
                "SELECT seq, hash FROM book_log ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap(),
    }
}

/// A row an agent holding the audit key forges after the log's newest row, chained and sealed
/// as prose-state seals in an unpinned book: issuing `name` the token whose hash is `hash`.
fn forged_issue(p: &Project, agent_home: &std::path::Path, name: &str, hash: &str) {
    use prose_state::testing::book::{sealed, BookEvent, Change, Voucher};
    let key = prose_state::testing::read_key(&agent_home.join(".prose"))
        .unwrap()
        .unwrap();
    let (seq, prev) = log_tip(p);
    let tip = BookEvent {
        seq,
        at: String::new(),
        actor: None,
        event: String::new(),
        principal: None,
        grp: None,
        value: None,
        prev_hash: String::new(),
        hash: prev,
        seal: String::new(),
    };
    let digest = format!("sha256:{}", sha256_hex(hash.as_bytes()));
    let c = Change {
        event: "add",
        principal: Some(name),
        grp: None,
        value: Some(&digest),
        actor: Some("mallory"),
        at: "2026-11-28 12:00:00",
    };
    let e = sealed(Some(&tip), &c, Voucher::Audit(&key));
    let (sqlite, pg) = (
        format!(
            "INSERT INTO principals (name, kind, token_hash, created_at) VALUES ('{name}', 'user', '{hash}', '2026-11-28 12:00:00');
             INSERT INTO book_log (seq, at, actor, event, principal, value, prev_hash, hash, seal)
             VALUES ({}, '{}', 'mallory', 'add', '{name}', '{digest}', '{}', '{}', '{}');",
            e.seq, e.at, e.prev_hash, e.hash, e.seal
        ),
        format!(
            "INSERT INTO openprose.principals (name, kind, token_hash, created_at) VALUES ('{name}', 'user', '{hash}', '2026-11-28 12:00:00');
             INSERT INTO openprose.book_log (seq, at, actor, event, principal, value, prev_hash, hash, seal)
             VALUES ({}, '{}', 'mallory', 'add', '{name}', '{digest}', '{}', '{}', '{}');",
            e.seq, e.at, e.prev_hash, e.hash, e.seal
        ),
    );
    book_sql(p, &sqlite, &pg);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Signing in to a page: the status of the sign-in (303 signed in).
fn sign_in(s: &Server, token: &str) -> u16 {
    s.request("POST", "/login", None, &[("token", token)])
        .status
}

fn a_signed_book_is_out_of_an_agents_reach(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // The approver (this project's user in the test, holding the serve key) pins its key.
    let alice = issue(&p, "alice", &["--group", "release"]);
    let a = p
        .cmd()
        .args(["--json", "principals", "require", "--signed"])
        .assert()
        .success();
    let key = stdout_json(&a)["signed_key"].as_str().unwrap().to_string();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "ship?"])
        .assert()
        .success();
    // Agents run as other users: one with a copy of the audit key, one with no key at all.
    let with_key = other_user(&p, ".agent-with-key", true);
    let without = other_user(&p, ".agent", false);
    // An agent's scratch book issues eve a token (the agent's own, unpinned project).
    let scratch = Project::new();
    let a = scratch
        .cmd()
        .env("HOME", &with_key)
        .args(["principals", "add", "eve"])
        .assert()
        .success();
    let eve = String::from_utf8_lossy(&a.get_output().stdout)
        .trim()
        .to_string();
    let eve_hash = {
        let c = rusqlite::Connection::open(scratch.root().join(".prose/principals.db")).unwrap();
        c.query_row(
            "SELECT token_hash FROM principals WHERE name = 'eve'",
            [],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
    };
    let before = book_rows(&p);
    for home in [&with_key, &without] {
        for args in [
            &["principals", "revoke", "alice"][..],
            &["principals", "add", "eve"],
            &["principals", "group", "add", "release", "bob"],
            &["principals", "group", "remove", "release", "alice"],
            &["principals", "policy", "--separate-duties", "on"],
            &["principals", "require", "--off"],
            &["principals", "require", "--signed"],
        ] {
            let a = p.cmd().env("HOME", home).args(args).assert();
            assert_eq!(code(&a), 4, "{args:?}: {}", stderr(&a));
            assert!(stderr(&a).contains(&key), "{args:?}: {}", stderr(&a));
            assert_eq!(book_rows(&p), before, "{args:?} changed the book");
        }
    }
    // The page, run by the approver, signs alice in.
    let s = Server::start(&p);
    assert_eq!(sign_in(&s, &alice), 303);
    drop(s);
    // Settings rows say nothing: unpinned and not required in the rows, still pinned.
    book_sql(
        &p,
        "UPDATE settings SET value = '' WHERE key = 'signed_key';
         UPDATE settings SET value = '0' WHERE key = 'require'",
        "UPDATE openprose.settings SET value = '' WHERE key = 'signed_key';
         UPDATE openprose.settings SET value = '0' WHERE key = 'require'",
    );
    let listed = stdout_json(&p.cmd().args(["--json", "principals"]).assert().success());
    assert_eq!(listed["signed_key"], key.as_str());
    assert_eq!(listed["require"], true);
    let a = run
        .cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["approve", "g", "--yes"])
        .assert();
    assert_ne!(code(&a), 0, "{}", stderr(&a));
    // Raw SQL, with the audit key: eve's row and an `add` row chained and sealed after the
    // log's newest. Unsigned after the pin, it breaks the log: no one signs in, eve least.
    // The page, running while the row is forged, and started after.
    let s = Server::start(&p);
    forged_issue(&p, &with_key, "eve", &eve_hash);
    assert_ne!(sign_in(&s, &eve), 303, "eve is not the signed log's");
    assert_ne!(sign_in(&s, &alice), 303, "a broken book admits no one");
    drop(s);
    let a = p.cmd().args(["serve", "--listen", "127.0.0.1:0"]).assert();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let w = run
        .cmd()
        .args([
            "gates",
            "wait",
            "g",
            "--timeout",
            "0",
            "--require-signed",
            "--key",
            &key,
        ])
        .assert();
    assert_ne!(code(&w), 0);
    let a = p.cmd().args(["principals", "list"]).assert();
    assert!(stderr(&a).contains("not signed by"), "{}", stderr(&a));
    let d = p.cmd().args(["doctor"]).assert();
    assert_eq!(code(&d), 1);
    assert!(
        String::from_utf8_lossy(&d.get_output().stdout).contains("principals book"),
        "{}",
        String::from_utf8_lossy(&d.get_output().stdout)
    );
    assert_eq!(run.view().gate("g").0, "pending");
}

fn a_book_copied_elsewhere_admits_no_one_until_rebound(b: Backend) {
    let Some(p1) = Project::on(b) else { return };
    let Some(p2) = Project::on(b) else { return };
    // One user's two projects (one audit key): p1's book is sealed as p2's would be.
    let a = p1
        .cmd()
        .env("HOME", test_home(p2.root()))
        .args(["principals", "add", "alice"])
        .assert()
        .success();
    let alice = String::from_utf8_lossy(&a.get_output().stdout)
        .trim()
        .to_string();
    let bob = issue(&p2, "bob", &[]);
    let run = p2.init();
    for g in ["g1", "g2"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "ship?"])
            .assert()
            .success();
    }
    // p1's book put in p2's place: its file, or its rows copied into p2's database.
    match (&p1.pg_url, &p2.pg_url) {
        (Some(u1), Some(u2)) => {
            let mut c1 = postgres::Client::connect(u1, postgres::NoTls).unwrap();
            let mut c2 = postgres::Client::connect(u2, postgres::NoTls).unwrap();
            let mut script =
                String::from("DELETE FROM openprose.book_log; DELETE FROM openprose.principals;");
            for t in ["book_log", "principals"] {
                for r in c1
                    .query(
                        &format!("SELECT row_to_json(x)::text FROM openprose.{t} x"),
                        &[],
                    )
                    .unwrap()
                {
                    let json: String = r.get(0);
                    script += &format!(
                        "INSERT INTO openprose.{t} SELECT * FROM json_populate_record(NULL::openprose.{t}, '{}');",
                        json.replace('\'', "''")
                    );
                }
            }
            c2.batch_execute(&script).unwrap();
        }
        _ => {
            std::fs::copy(
                p1.root().join(".prose/principals.db"),
                p2.root().join(".prose/principals.db"),
            )
            .unwrap();
        }
    }
    let before = run.before_refusal("g1");
    assert_eq!(approve(&run, "g1", &alice), 9, "the copied book is p1's");
    run.refused(&before, 1, "a token of a book bound elsewhere");
    assert_ne!(approve(&run, "g1", &bob), 0);
    let d = p2.cmd().args(["doctor"]).assert();
    assert_eq!(code(&d), 1);
    assert!(
        String::from_utf8_lossy(&d.get_output().stdout).contains("bound to"),
        "{}",
        String::from_utf8_lossy(&d.get_output().stdout)
    );
    // Moved on purpose: whoever may change the book re-binds it here.
    let a = p2
        .cmd()
        .args(["--json", "principals", "rebind"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a)["change"], "bound");
    assert_eq!(approve(&run, "g2", &alice), 0);
    // And p1's own book is untouched by all this.
    p1.cmd()
        .env("HOME", test_home(p2.root()))
        .args(["principals", "list"])
        .assert()
        .success();
}

/// The approval page run as another user, with no audit key: the pin it signs vouches for
/// the book before it, so its sign-ins are checked against the log whole; a cut of the pin
/// (back to an unpinned book the agent's user could change) is found by the approver's
/// anchor, and no decision made after it passes `gates wait --require-signed --key K`.
fn an_approver_without_the_audit_key_holds_a_signed_book(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = issue(&p, "alice", &[]);
    let approver = other_user(&p, ".approver", false);
    let as_approver = |args: &[&str]| p.cmd().env("HOME", &approver).args(args).assert();
    // Unauthorized, the approver's pin is refused; the project's user (the audit key's
    // holder) authorizes the approver's key, which the approver then pins.
    let a = as_approver(&["principals", "require", "--signed"]);
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    let approver_key = String::from_utf8_lossy(
        &as_approver(&["serve", "--show-key"])
            .success()
            .get_output()
            .stdout,
    )
    .trim()
    .to_string();
    p.cmd()
        .args(["principals", "require", "--signed", "--key", &approver_key])
        .assert()
        .success();
    let pinned = as_approver(&["--json", "principals", "require", "--signed"]).success();
    let key = stdout_json(&pinned)["signed_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !approver.join(".prose/audit.key").exists(),
        "no audit key was made"
    );
    // Changes are the approver's now: a token it issues is signed into the log.
    let bob = String::from_utf8_lossy(
        &as_approver(&["principals", "add", "bob"])
            .success()
            .get_output()
            .stdout,
    )
    .trim()
    .to_string();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "ship?"])
        .assert()
        .success();
    let page = |p: &Project| {
        let mut c = p.std_cmd();
        c.env("HOME", &approver)
            .args(["serve", "--listen", "127.0.0.1:0"]);
        Server::of(&mut c, "http")
    };
    let s = page(&p);
    assert_eq!(
        sign_in(&s, &alice),
        303,
        "issued before the pin, vouched for by it"
    );
    assert_eq!(sign_in(&s, &bob), 303);
    drop(s);
    // The agent's user cuts the log back to before the pin.
    book_sql(
        &p,
        "DELETE FROM book_log WHERE seq >= (SELECT min(seq) FROM book_log WHERE grp = 'signed_key')",
        "DELETE FROM openprose.book_log WHERE seq >= (SELECT min(seq) FROM openprose.book_log WHERE grp = 'signed_key')",
    );
    let a = as_approver(&["principals", "list"]);
    assert!(stderr(&a).contains("no longer holds row"), "{}", stderr(&a));
    let a = p
        .cmd()
        .env("HOME", &approver)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .assert();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    // Unpinned on the agent's side, a command-line decision is made, and is not signed.
    let a = run
        .cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["approve", "g", "--yes"])
        .assert();
    if code(&a) == 0 {
        let w = run
            .cmd()
            .args([
                "gates",
                "wait",
                "g",
                "--timeout",
                "0",
                "--require-signed",
                "--key",
                &key,
            ])
            .assert();
        assert_eq!(code(&w), 10, "{}", stderr(&w));
    }
}

/// The approver's anchor of a signed book is named by the book's place, not by how a path or
/// URL was spelled: wiped by the agents and made anew (the agents' `principals add` then
/// works, unpinned), the book is refused by the approver from the project's root, from a
/// subdirectory, with `--root`, and (PostgreSQL) through another spelling of the server's URL;
/// the approver's own next change does not begin it anew either. A dropped log table is the
/// same cut. (Second battery, H1, H2, H4, L1.)
fn the_approvers_anchor_holds_however_the_project_is_reached(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    p.init();
    issue(&p, "alice", &[]);
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    let agent = other_user(&p, ".agent", true);
    book_sql(
        &p,
        "DELETE FROM book_log; DELETE FROM principals; DELETE FROM settings;",
        "DELETE FROM openprose.book_log; DELETE FROM openprose.principals; DELETE FROM openprose.settings;",
    );
    p.cmd()
        .env("HOME", &agent)
        .args(["principals", "add", "evil"])
        .assert()
        .success();
    std::fs::create_dir_all(p.root().join("sub")).unwrap();
    let root = p.root().to_str().unwrap().to_string();
    let reached: Vec<(std::path::PathBuf, Vec<String>)> = vec![
        (p.root().to_path_buf(), vec![]),
        (p.root().join("sub"), vec![]),
        (std::env::temp_dir(), vec!["--root".into(), root.clone()]),
    ];
    for (dir, extra) in &reached {
        for args in [
            &["principals", "list"][..],
            &["serve", "--listen", "127.0.0.1:0"],
        ] {
            let a = p.cmd().current_dir(dir).args(extra).args(args).assert();
            let why = stderr(&a);
            assert!(
                why.contains("no longer holds row"),
                "{dir:?} {args:?}: {why}"
            );
            if args[0] == "serve" {
                assert_eq!(code(&a), 9, "{why}");
            }
        }
    }
    if let Some(url) = &p.pg_url {
        let spelled = format!("{url}?application_name=other");
        let a = p
            .cmd()
            .env("OPENPROSE_POSTGRES_URL", &spelled)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .assert();
        assert_eq!(code(&a), 9, "{}", stderr(&a));
    }
    // The approver's own change to the emptied book is refused, not begun anew.
    let before = book_rows(&p);
    let a = p.cmd().args(["principals", "add", "dave"]).assert();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert_eq!(book_rows(&p), before);
    // A log table dropped is a log cut (SQLite: a missing table reads as empty).
    if p.pg_url.is_none() {
        book_sql(&p, "DROP TABLE book_log", "");
        let a = p.cmd().args(["principals", "list"]).assert();
        assert!(stderr(&a).contains("no longer holds row"), "{}", stderr(&a));
        let a = p.cmd().args(["principals", "add", "dave"]).assert();
        assert_eq!(code(&a), 9, "{}", stderr(&a));
    }
}

/// A page session is checked against the book's sealed log on every request: the approver
/// revokes alice (signed), the agents undo it in the rows, and her open session is ended, its
/// approval refused; a log broken under a session ends it too. (Second battery, H3.)
fn a_page_session_ends_when_the_log_no_longer_issues_its_token(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = issue(&p, "alice", &[]);
    let bob = issue(&p, "bob", &[]);
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    for g in ["g1", "g2"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "ship?"])
            .assert()
            .success();
    }
    let s = Server::start(&p);
    let alice_session = s.login(&alice);
    let bob_session = s.login(&bob);
    let shown = s.get(&gate_path(&run, "g1"), Some(&alice_session)).body;
    p.cmd()
        .args(["principals", "revoke", "alice"])
        .assert()
        .success();
    book_sql(
        &p,
        "UPDATE principals SET revoked_at = NULL WHERE name = 'alice'",
        "UPDATE openprose.principals SET revoked_at = NULL WHERE name = 'alice'",
    );
    let r = post_as_shown(&s, &alice_session, &run, "g1", &shown);
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(s.get("/", Some(&alice_session)).status, 401);
    // bob is still signed in, until the log breaks under his session.
    assert_eq!(s.get("/", Some(&bob_session)).status, 200);
    let shown = s.get(&gate_path(&run, "g2"), Some(&bob_session)).body;
    book_sql(
        &p,
        "UPDATE book_log SET at = '2020-01-01 00:00:00' WHERE seq = 2",
        "UPDATE openprose.book_log SET at = '2020-01-01 00:00:00' WHERE seq = 2",
    );
    let r = post_as_shown(&s, &bob_session, &run, "g2", &shown);
    assert_eq!(r.status, 401, "{}", r.body);
    drop(s);
    assert_eq!(run.view().gate("g1").0, "pending");
    assert_eq!(run.view().gate("g2").0, "pending");
}

/// In a book this user's audit key seals, a row after its last one that names another key
/// (made up by a writer without the key) is forged, not another user's: the token it issues
/// is refused, as tampering. (Second battery, M1.)
fn a_seal_naming_another_key_after_this_users_is_forged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    issue(&p, "alice", &[]);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "ship?"])
        .assert()
        .success();
    // evil's token and hash, made in a scratch project; its `add` row chained by hand with a
    // seal naming a key no one has.
    let scratch = Project::new();
    let evil = issue(&scratch, "evil", &[]);
    let hash: String = rusqlite::Connection::open(scratch.root().join(".prose/principals.db"))
        .unwrap()
        .query_row("SELECT token_hash FROM principals", [], |r| r.get(0))
        .unwrap();
    let nobody = other_user(&p, ".nobody", false);
    let made_up = nobody.join(".prose/audit.key");
    std::fs::write(&made_up, "00".repeat(32)).unwrap();
    std::fs::set_permissions(
        &made_up,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    forged_issue(&p, &nobody, "evil", &hash);
    let before = run.before_refusal("g");
    assert_eq!(approve(&run, "g", &evil), 9);
    run.refused(&before, 1, "a token issued by a row with a made-up seal");
}

/// The page signs a decision only while the book is pinned to its key: in a project with no
/// pin its approvals are unsigned, and `gates wait --require-signed --key K` refuses them
/// (10), so a book the agents made, or pointed the project at, yields no signed decision.
fn the_page_signs_only_for_a_book_pinned_to_its_key(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = issue(&p, "alice", &[]);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "ship?"])
        .assert()
        .success();
    let key = String::from_utf8_lossy(
        &p.cmd()
            .args(["serve", "--show-key"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .trim()
    .to_string();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    approve_as_shown(&s, &cookie, &run, "g");
    drop(s);
    let events = run.view().events("g");
    let approved = events.iter().find(|e| e.0 == "approved").unwrap();
    assert!(approved.2["signature"].is_null(), "{:?}", approved.2);
    let w = run
        .cmd()
        .args([
            "gates",
            "wait",
            "g",
            "--timeout",
            "0",
            "--require-signed",
            "--key",
            &key,
        ])
        .assert();
    assert_eq!(code(&w), 10, "{}", stderr(&w));
}

/// Changes to a signed book made at once, by the approver in eight processes, each chain
/// after the newest row and are signed: the log stays whole, and every change is in it.
fn concurrent_signed_changes_keep_the_log_whole(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    p.init();
    let names: Vec<String> = (0..8).map(|i| format!("u{i}")).collect();
    for n in &names {
        issue(&p, n, &[]);
    }
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    let children: Vec<_> = names
        .iter()
        .map(|n| {
            p.std_cmd()
                .args(["principals", "group", "add", "ops", n])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let a = p
        .cmd()
        .args(["--json", "principals", "group", "list"])
        .assert()
        .success();
    let members: Vec<String> = stdout_json(&a)["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    assert_eq!(members, names);
    let d = p.cmd().args(["doctor"]).assert();
    assert_eq!(
        code(&d),
        0,
        "{}",
        String::from_utf8_lossy(&d.get_output().stdout)
    );
}

/// A page-signed decision stands only for the run and project it was made in: a fork of
/// another run, made (by an agent holding the audit key) under the id a VM waits on, carries
/// that run's signed decision, which `gates wait --require-signed --key K` refuses (10) unless
/// the VM names the run it forked from (`--accept-carried-from RUN`; another run's name does
/// not do); carried into another project pinned to the same key, it does not verify even then
/// (its signature names its project: 10), nor with that project's id written over this one's.
/// (Second battery, finding 1; third, findings 1 and 3.)
fn a_signed_decision_stands_only_in_its_run_and_project(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let source = p.init();
    let bob = issue(&p, "bob", &[]);
    let a = p
        .cmd()
        .args(["--json", "principals", "require", "--signed"])
        .assert()
        .success();
    let key = stdout_json(&a)["signed_key"].as_str().unwrap().to_string();
    source
        .cmd()
        .args(["gates", "create", "deploy", "--prompt", "Deploy build 41?"])
        .assert()
        .success();
    // The record the gate was opened at, where a fork carries it from.
    let record = stdout_json(
        &source
            .cmd()
            .args(["--json", "gates", "show", "deploy", "--as", "x"])
            .assert()
            .success(),
    )["execution_id"]
        .as_i64()
        .unwrap()
        .to_string();
    let s = Server::start(&p);
    let cookie = s.login(&bob);
    approve_as_shown(&s, &cookie, &source, "deploy");
    drop(s);
    let wait = |run: &str, root: &std::path::Path, extra: &[&str]| {
        let a = p
            .cmd()
            .current_dir(root)
            .args(["--run", run, "gates", "wait", "deploy", "--timeout", "0"])
            .args(["--require-signed", "--key", &key])
            .args(extra)
            .assert();
        (code(&a), stderr(&a))
    };
    assert_eq!(wait(&source.id, p.root(), &[]).0, 0);
    // The agent's fork, under the id the VM waits on.
    source
        .cmd()
        .args(["fork", "--at", &record, "--run-id", "vm-run"])
        .assert()
        .success();
    let (c, why) = wait("vm-run", p.root(), &[]);
    assert_eq!(c, 10, "{why}");
    assert!(why.contains("carried"), "{why}");
    let a = p
        .cmd()
        .args([
            "--run", "vm-run", "gates", "verify", "--signed", "--key", &key,
        ])
        .assert();
    assert_eq!(code(&a), 10);
    assert_eq!(
        wait("vm-run", p.root(), &["--accept-carried-from", "elsewhere"]).0,
        10
    );
    assert_eq!(
        wait("vm-run", p.root(), &["--accept-carried-from", &source.id]).0,
        0
    );
    // Another project of the same user, pinned to the same key: a fork of this project's
    // run carried into it does not verify there.
    if p.pg_url.is_none() {
        let other = Project::new();
        other.init();
        let home = test_home(p.root());
        let in_other = |args: &[&str]| {
            other.cmd().env("HOME", &home).args(args).assert().success();
        };
        in_other(&["principals", "add", "carol"]);
        in_other(&["principals", "require", "--signed"]);
        in_other(&[
            "--run",
            source.dir.to_str().unwrap(),
            "fork",
            "--at",
            &record,
            "--run-id",
            "x1",
        ]);
        let other_wait = || {
            other
                .cmd()
                .env("HOME", &home)
                .args(["--run", "x1", "gates", "wait", "deploy", "--timeout", "0"])
                .args(["--require-signed", "--key", &key])
                .args(["--accept-carried-from", &source.id])
                .assert()
        };
        let a = other_wait();
        assert_eq!(code(&a), 10, "{}", stderr(&a));
        assert!(stderr(&a).contains("another project"), "{}", stderr(&a));
        // This project's id written over the other's: it is still another directory.
        std::fs::copy(
            p.root().join(".prose/project-id"),
            other.root().join(".prose/project-id"),
        )
        .unwrap();
        assert_eq!(code(&other_wait()), 10);
    }
}

/// On PostgreSQL the book's place (and a signature's) is the server's `system_identifier` and
/// the database's name, read from `pg_catalog` by name: functions of the same names put
/// earlier on the database's search path answer nothing, so a book (or a signed decision) of
/// another database does not pass for this one's. (Third battery, finding 2.)
fn the_servers_identity_is_its_own(p: &Project) {
    p.init();
    let token = issue(p, "alice", &[]);
    let url = p.pg_url.as_ref().unwrap();
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let db: String = c
        .query_one("SELECT current_database()::text", &[])
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "CREATE SCHEMA shadow;
         CREATE FUNCTION shadow.current_database() RETURNS name LANGUAGE sql STABLE
             AS $$ SELECT 'elsewhere'::name $$;
         CREATE FUNCTION shadow.pg_control_system()
             RETURNS TABLE (system_identifier bigint) LANGUAGE sql STABLE
             AS $$ SELECT 42::bigint $$;
         ALTER DATABASE \"{db}\" SET search_path = shadow, pg_catalog, public;"
    ))
    .unwrap();
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "ship?"])
        .assert()
        .success();
    // Bound to the server and database as they are: the shadows change nothing.
    p.cmd().args(["principals", "list"]).assert().success();
    assert_eq!(approve(&run, "g", &token), 0);
}

/// Signed mode set up as docs/approval-page.md says, with the approver a user of its own
/// holding a copy of the project's audit key: the page's approval passes the VM's
/// `gates wait --require-signed --key K` (0). An approver that holds an audit key of its own
/// (not the project's) still pins, and reads the book it pinned. (Third battery, findings 4
/// and 5.)
fn signed_mode_as_documented_passes_a_page_decision(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    issue(&p, "alice", &[]);
    let approver = other_user(&p, ".approver", true);
    let as_approver = |args: &[&str]| p.cmd().env("HOME", &approver).args(args).assert();
    let key = String::from_utf8_lossy(
        &as_approver(&["serve", "--show-key"])
            .success()
            .get_output()
            .stdout,
    )
    .trim()
    .to_string();
    p.cmd()
        .args(["principals", "require", "--signed", "--key", &key])
        .assert()
        .success();
    as_approver(&["principals", "require", "--signed"]).success();
    let bob = String::from_utf8_lossy(
        &as_approver(&["principals", "add", "bob"])
            .success()
            .get_output()
            .stdout,
    )
    .trim()
    .to_string();
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "ship?"])
        .assert()
        .success();
    let mut c = p.std_cmd();
    c.env("HOME", &approver)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let s = Server::of(&mut c, "http");
    let cookie = s.login(&bob);
    approve_as_shown(&s, &cookie, &run, "deploy");
    drop(s);
    let w = run
        .cmd()
        .args([
            "gates",
            "wait",
            "deploy",
            "--timeout",
            "0",
            "--require-signed",
            "--key",
            &key,
        ])
        .assert();
    assert_eq!(code(&w), 0, "{}", stderr(&w));
    // An approver with an audit key of its own pins another project of this user's.
    let Some(q) = Project::on(b) else { return };
    q.init();
    q.cmd()
        .env("HOME", test_home(p.root()))
        .args(["principals", "add", "carol"])
        .assert()
        .success();
    let own = other_user(&p, ".approver-own-key", false);
    std::fs::write(own.join(".prose/audit.key"), "11".repeat(32)).unwrap();
    std::fs::set_permissions(
        own.join(".prose/audit.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let own_key = String::from_utf8_lossy(
        &q.cmd()
            .env("HOME", &own)
            .args(["serve", "--show-key"])
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .trim()
    .to_string();
    q.cmd()
        .env("HOME", test_home(p.root()))
        .args(["principals", "require", "--signed", "--key", &own_key])
        .assert()
        .success();
    for args in [
        &["principals", "require", "--signed"][..],
        &["principals", "list"],
    ] {
        q.cmd().env("HOME", &own).args(args).assert().success();
    }
    q.cmd()
        .env("HOME", test_home(p.root()))
        .args(["principals", "list"])
        .assert()
        .success();
}

/// A principal's row inserted behind prose-state's back (helper-42): its token is refused, and
/// `principals` and `doctor` say so (`not_issued` in JSON, a warning, a problem), where the
/// row was listed like an issued one and `doctor` said healthy.
fn a_row_the_log_did_not_issue_is_said_by_principals_and_doctor(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    p.init();
    issue(&p, "alice", &[]);
    let listed = p.cmd().args(["--json", "principals"]).assert().success();
    assert!(
        stdout_json(&listed).get("not_issued").is_none(),
        "alice was issued"
    );
    p.cmd().args(["doctor"]).assert().success();
    book_sql(
        &p,
        "INSERT INTO principals (name, kind, token_hash, created_at)
         SELECT 'eve', kind, token_hash, created_at FROM principals WHERE name = 'alice'",
        "INSERT INTO openprose.principals (name, kind, token_hash, created_at)
         SELECT 'eve', kind, token_hash, created_at FROM openprose.principals WHERE name = 'alice'",
    );
    let listed = p.cmd().args(["--json", "principals"]).assert().success();
    let v = stdout_json(&listed);
    let not: Vec<&str> = v["not_issued"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(not, ["eve"], "{v}");
    assert!(
        stderr(&listed).contains("principal \"eve\" was not issued"),
        "{}",
        stderr(&listed)
    );
    let doctor = p.cmd().args(["doctor"]).assert().failure();
    assert!(
        stdout_or_err(&doctor).contains("principal \"eve\""),
        "{}",
        stdout_or_err(&doctor)
    );
}

fn stdout_or_err(a: &assert_cmd::assert::Assert) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&a.get_output().stdout),
        stderr(a)
    )
}
