//! Authenticated principals: tokens issued once and kept only as hashes, decisions taken as
//! the token's principal, a project that requires a token, and every refusal leaving the
//! state as it was; on both backends (on PostgreSQL, from another machine of the team too).

use crate::common::*;

on_both!(
    a_token_decides_as_its_principal_and_is_kept_only_as_a_hash,
    a_project_that_requires_tokens_refuses_as_alone,
    bad_tokens_and_token_files_are_refused_and_change_nothing,
    concurrent_adds_issue_one_token_and_raw_rows_authenticate_nothing,
);

/// Issues a token and writes it where `--token-file` reads it.
fn add(p: &Project, name: &str, extra: &[&str]) -> (String, std::path::PathBuf) {
    let a = p
        .cmd()
        .args(["principals", "add", name])
        .args(extra)
        .assert()
        .success();
    let token = String::from_utf8(a.get_output().stdout.clone())
        .unwrap()
        .trim()
        .to_string();
    let file = p.root().join(format!("{}.token", name.replace(':', "_")));
    std::fs::write(&file, format!("{token}\n")).unwrap();
    (token, file)
}

fn gate(run: &Run, id: &str) {
    run.cmd()
        .args(["gates", "create", id, "--prompt", "Deploy?"])
        .assert()
        .success();
}

/// Every principal row as stored: (name, kind, token_hash, revoked).
fn stored(p: &Project) -> Vec<(String, String, String, bool)> {
    match &p.pg_url {
        Some(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
            c.query(
                "SELECT name, kind, token_hash, revoked_at IS NOT NULL
                 FROM openprose.principals ORDER BY name",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
        }
        None => {
            let c = rusqlite::Connection::open(p.root().join(".prose/principals.db")).unwrap();
            let mut s = c
                .prepare(
                    "SELECT name, kind, token_hash, revoked_at IS NOT NULL
                     FROM principals ORDER BY name",
                )
                .unwrap();
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        }
    }
}

fn a_token_decides_as_its_principal_and_is_kept_only_as_a_hash(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let (token, file) = add(&p, "alice", &[]);
    let (name, secret) = token.rsplit_once('.').unwrap();
    assert_eq!(name, "alice");
    assert_eq!(secret.len(), 64, "{token}");
    // Kept as an Argon2id hash, never the secret.
    let rows = stored(&p);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_str()), ("alice", "user"));
    assert!(rows[0].2.starts_with("$argon2id$"), "{}", rows[0].2);
    assert!(!rows[0].2.contains(secret));
    if b == Backend::Sqlite {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(p.root().join(".prose/principals.db"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    // Listing shows neither the token nor its hash.
    let list = p
        .cmd()
        .args(["--json", "principals", "list"])
        .assert()
        .success();
    let out = String::from_utf8(list.get_output().stdout.clone()).unwrap();
    assert!(!out.contains(secret) && !out.contains("argon2"), "{out}");
    assert_eq!(stdout_json(&list)["principals"][0]["name"], "alice");

    // The token decides, as alice, whatever the login name; the audit says so.
    gate(&run, "deploy");
    run.cmd()
        .env("USER", "mallory")
        .args(["approve", "deploy", "--yes", "--token-file"])
        .arg(&file)
        .assert()
        .success();
    let (status, by, _, _) = run.view().gate("deploy");
    assert_eq!(
        (status.as_str(), by.as_deref()),
        ("approved", Some("alice"))
    );
    let events = run.view().events("deploy");
    let (kind, principal, metadata) = events.last().unwrap();
    assert_eq!(
        (kind.as_str(), principal.as_deref()),
        ("approved", Some("alice"))
    );
    assert_eq!(metadata["authenticated"], "token");

    // PROSE_TOKEN does the same; an agent's token never decides a user gate (refused and
    // audit-logged, as any such attempt).
    let (bot_token, _) = add(&p, "bot", &["--agent"]);
    assert!(bot_token.starts_with("agent:bot."), "{bot_token}");
    gate(&run, "second");
    let a = run
        .cmd()
        .env("PROSE_TOKEN", &bot_token)
        .args(["approve", "second", "--yes"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert_eq!(run.view().gate("second").0, "pending");
    let events = run.view().events("second");
    assert_eq!(events.last().unwrap().0, "refused");
    assert_eq!(events.last().unwrap().1.as_deref(), Some("agent:bot"));
    run.cmd()
        .env("PROSE_TOKEN", &token)
        .args(["reject", "second", "--yes", "--reason", "not now"])
        .assert()
        .success();
    assert_eq!(run.view().gate("second").1.as_deref(), Some("alice"));

    // Revoked: the token no longer works; a new one can be issued, and the old one stays dead.
    p.cmd()
        .args(["principals", "revoke", "alice"])
        .assert()
        .success();
    gate(&run, "third");
    let before = run.before_refusal("third");
    let a = run
        .cmd()
        .args(["approve", "third", "--yes", "--token-file"])
        .arg(&file)
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    run.refused(&before, 1, "a revoked token");
    let (fresh, _) = add(&p, "alice", &[]);
    assert_ne!(fresh, token);
    run.cmd()
        .env("PROSE_TOKEN", &token)
        .args(["approve", "third", "--yes"])
        .assert()
        .code(4);
    run.cmd()
        .env("PROSE_TOKEN", &fresh)
        .args(["approve", "third", "--yes"])
        .assert()
        .success();
}

fn a_project_that_requires_tokens_refuses_as_alone(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let (token, _) = add(&p, "alice", &[]);
    p.cmd().args(["principals", "require"]).assert().success();
    gate(&run, "deploy");
    let before = run.view().gate("deploy");
    for (args, attempted) in [
        (
            vec!["approve", "deploy", "--yes", "--as", "alice"],
            "approve",
        ),
        (
            vec![
                "reject", "deploy", "--yes", "--as", "alice", "--reason", "no",
            ],
            "reject",
        ),
        (vec!["approve", "deploy", "--yes"], "approve"),
    ] {
        let seen = run.view().events("deploy").len();
        let a = run
            .cmd()
            .env("USER", "alice")
            .args(&args)
            .assert()
            .failure();
        assert_eq!(code(&a), 4, "{args:?}: {}", stderr(&a));
        assert!(stderr(&a).contains("requires an authenticated decision"));
        assert!(
            stderr(&a).contains("this attempt was logged"),
            "{}",
            stderr(&a)
        );
        // Refused like a decision the gate's rules refuse: one audit row, as the principal
        // claimed, unauthenticated; the gate as it was.
        assert_eq!(
            run.view().gate("deploy"),
            before,
            "{args:?} changed the gate"
        );
        let events = run.view().events("deploy");
        assert_eq!(events.len(), seen + 1, "{args:?}");
        let (kind, principal, metadata) = events.last().unwrap();
        assert_eq!(
            (kind.as_str(), principal.as_deref()),
            ("refused", Some("alice"))
        );
        assert_eq!(metadata["client"], "cli");
        assert!(metadata.get("authenticated").is_none(), "{metadata}");
        assert_eq!(metadata["attempted"], attempted);
    }
    run.cmd().args(["gates", "verify"]).assert().success();
    // A gate that does not exist: refused, nothing written.
    let before = run.snapshot();
    let a = run
        .cmd()
        .args(["approve", "nope", "--yes", "--as", "alice"])
        .assert()
        .code(4);
    assert!(!stderr(&a).contains("logged"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    // On PostgreSQL the team's principals are the server's: another machine, given the
    // team's audit key (as machines that attest each other's decisions are), is held to the
    // same rule and accepts the same token.
    let other = p.elsewhere();
    if b == Backend::Postgres {
        let home = test_home(other.root()).join(".prose");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::copy(
            test_home(p.root()).join(".prose/audit.key"),
            home.join("audit.key"),
        )
        .unwrap();
        let there = other.run(&run.id);
        there
            .cmd()
            .args(["approve", "deploy", "--yes", "--as", "alice"])
            .assert()
            .code(4);
        there
            .cmd()
            .env("PROSE_TOKEN", &token)
            .args(["approve", "deploy", "--yes"])
            .assert()
            .success();
    } else {
        run.cmd()
            .env("PROSE_TOKEN", &token)
            .args(["approve", "deploy", "--yes"])
            .assert()
            .success();
    }
    assert_eq!(run.view().gate("deploy").1.as_deref(), Some("alice"));
    let list = p.cmd().args(["--json", "principals"]).assert().success();
    assert_eq!(stdout_json(&list)["require"], true);
    // Lifted: --as decides again.
    p.cmd()
        .args(["principals", "require", "--off"])
        .assert()
        .success();
    gate(&run, "next");
    run.cmd()
        .args(["approve", "next", "--yes", "--as", "bob"])
        .assert()
        .success();
    // A finished run takes no more writes, a refusal's audit row included: a refused token
    // there writes nothing at all.
    run.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    let before = run.snapshot();
    let a = run
        .cmd()
        .env("PROSE_TOKEN", "alice.00")
        .args(["approve", "next", "--yes"])
        .assert()
        .code(4);
    assert!(!stderr(&a).contains("logged"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before, "a finished run was written");
}

fn bad_tokens_and_token_files_are_refused_and_change_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // No principals yet: any token is refused.
    gate(&run, "deploy");
    let before = run.before_refusal("deploy");
    run.cmd()
        .env("PROSE_TOKEN", "alice.00")
        .args(["approve", "deploy", "--yes"])
        .assert()
        .code(4);
    run.refused(&before, 1, "a token with no principals");
    let (token, _) = add(&p, "alice", &[]);
    add(&p, "bob", &[]);
    let secret = token.rsplit_once('.').unwrap().1;
    let flipped: String = secret
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    let big = p.write("big.token", &vec![b'a'; 5000]);
    let empty = p.write("empty.token", b"\n");
    let binary = p.write("binary.token", b"\xff\xfe\n");
    let cases: Vec<(Vec<String>, Option<String>, i32)> = vec![
        // Another principal's name with alice's secret, a wrong secret, no secret, no dot,
        // a name in look-alike characters, control and bidi characters.
        (vec![], Some(format!("bob.{secret}")), 4),
        (vec![], Some(format!("alice.{flipped}")), 4),
        (vec![], Some("alice.".into()), 4),
        (vec![], Some(secret.to_string()), 4),
        (vec![], Some(format!("\u{ff41}lice.{secret}")), 4),
        (vec![], Some(format!("alice\u{202e}.{secret}")), 4),
        (vec![], Some(format!("al\u{200b}ice.{secret}")), 4),
        // The token is alice's, --as says otherwise.
        (vec!["--as".into(), "bob".into()], Some(token.clone()), 2),
        (vec!["--token-file".into(), "missing.token".into()], None, 3),
        (
            vec!["--token-file".into(), big.display().to_string()],
            None,
            2,
        ),
        (
            vec!["--token-file".into(), empty.display().to_string()],
            None,
            2,
        ),
        (
            vec!["--token-file".into(), binary.display().to_string()],
            None,
            2,
        ),
    ];
    for (args, env, want) in cases {
        let mut c = run.cmd();
        c.args(["approve", "deploy", "--yes"]).args(&args);
        if let Some(t) = &env {
            c.env("PROSE_TOKEN", t);
        }
        let before = run.before_refusal("deploy");
        let a = c.assert().failure();
        assert_eq!(code(&a), want, "{args:?} {env:?}: {}", stderr(&a));
        let err = stderr(&a);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains(secret), "the secret was echoed: {err}");
        // A token refused (4) is audit-logged, with no secret in the row; bad arguments and
        // files (2, 3) write nothing.
        let logged = run.refused(
            &before,
            usize::from(want == 4),
            &format!("{args:?} {env:?}"),
        );
        for (_, _, metadata) in &logged {
            assert!(metadata.get("authenticated").is_none(), "{metadata}");
            assert!(!metadata.to_string().contains(secret), "{metadata}");
        }
    }
    // Names outside the grammar are never issued a token.
    let rows = stored(&p);
    for name in ["system", "", "agent:", "-x", "a/b", "\u{fc}ber"] {
        p.cmd().args(["principals", "add", name]).assert().code(2);
    }
    // A spelling that normalises to alice (case, fullwidth letters, a zero-width space, a
    // bidi override) is alice, who has one.
    for name in ["Alice", "\u{ff41}lice", "al\u{200b}ice", "al\u{202e}ice"] {
        p.cmd().args(["principals", "add", name]).assert().code(4);
    }
    assert_eq!(stored(&p), rows);
    // Revoking someone who has no token is "not found"; nothing changes.
    p.cmd()
        .args(["principals", "revoke", "carol"])
        .assert()
        .code(3);
    assert_eq!(stored(&p), rows);
}

/// Ten `principals add carol` at once: exactly one token is issued, and it is the one kept.
/// A row written behind the tool's back whose hash is not one authenticates nothing.
fn concurrent_adds_issue_one_token_and_raw_rows_authenticate_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // The book exists first (its creation is not what is raced).
    add(&p, "alice", &[]);
    let children: Vec<_> = (0..10)
        .map(|_| {
            p.std_cmd()
                .args(["principals", "add", "carol"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let issued: Vec<String> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string())
        .collect();
    assert_eq!(issued.len(), 1, "{issued:?}");
    gate(&run, "deploy");
    run.cmd()
        .env("PROSE_TOKEN", &issued[0])
        .args(["approve", "deploy", "--yes"])
        .assert()
        .success();
    assert_eq!(run.view().gate("deploy").1.as_deref(), Some("carol"));

    // A raw row whose hash is not one authenticates nobody, with any secret.
    let secret = issued[0].rsplit_once('.').unwrap().1.to_string();
    let sql = format!(
        "INSERT INTO {t} (name, kind, token_hash, created_at) VALUES
           ('eve', 'user', 'not-a-hash', '2026-01-01 00:00:00')",
        t = "{t}"
    );
    match &p.pg_url {
        Some(url) => postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .batch_execute(&sql.replace("{t}", "openprose.principals"))
            .unwrap(),
        None => rusqlite::Connection::open(p.root().join(".prose/principals.db"))
            .unwrap()
            .execute_batch(&sql.replace("{t}", "principals"))
            .unwrap(),
    }
    gate(&run, "second");
    let before = run.before_refusal("second");
    run.cmd()
        .env("PROSE_TOKEN", format!("eve.{secret}"))
        .args(["approve", "second", "--yes"])
        .assert()
        .code(4);
    run.refused(
        &before,
        1,
        "a token of a row written behind the tool's back",
    );
}
