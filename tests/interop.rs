//! The database prose-state writes stays readable by the spec's own SQL, and rows the spec's
//! raw SQL writes are read by prose-state. Run through SQLite directly and, where it is
//! installed, through the sqlite3 CLI the spec's agents use.

use crate::common::*;

/// The sqlite3 CLI, if installed. Under CI it must be (.ci/run installs it).
fn sqlite3() -> Option<&'static str> {
    let found = std::process::Command::new("sqlite3")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "sqlite3 CLI missing under CI=true"
        );
        eprintln!("NOTE: sqlite3 CLI not installed: interop checked through SQLite only");
        return None;
    }
    Some("sqlite3")
}

fn cli(db: &std::path::Path, args: &[&str], sql: &str) -> String {
    let out = std::process::Command::new("sqlite3")
        .args(args)
        .arg(db)
        .arg(sql)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_specs_read_queries_work_on_a_prose_state_db() {
    let p = Project::new();
    let run = p.init();
    let e42 = run.exec(1, "do outer", "executing", None);
    let e43 = run.exec(2, "do inner", "executing", Some(e42));
    run.bind("research", "AI safety research covers alignment", None);
    run.bind("result", "root result", None);
    run.bind("result", "scoped result", Some(e42));

    let read = "SELECT value FROM bindings WHERE name = 'research'";
    let scope = format!(
        "WITH RECURSIVE scope_chain AS (
           SELECT id, parent_id FROM execution WHERE id = {e43}
           UNION ALL
           SELECT e.id, e.parent_id
           FROM execution e
           JOIN scope_chain s ON e.id = s.parent_id
         )
         SELECT b.value FROM bindings b
         LEFT JOIN scope_chain s ON b.execution_id = s.id
         WHERE b.name = 'result'
           AND (b.execution_id IN (SELECT id FROM scope_chain) OR b.execution_id IS NULL)
         ORDER BY
           CASE WHEN b.execution_id IS NULL THEN 1 ELSE 0 END,
           s.id DESC NULLS LAST
         LIMIT 1"
    );
    let c = run.conn();
    let v: String = c.query_row(read, [], |r| r.get(0)).unwrap();
    assert_eq!(v, "AI safety research covers alignment");
    let v: String = c.query_row(&scope, [], |r| r.get(0)).unwrap();
    assert_eq!(v, "scoped result");
    assert_eq!(run.get("result", Some(e43)), b"scoped result");

    if sqlite3().is_some() {
        assert_eq!(
            cli(&run.db, &["-json"], read),
            "[{\"value\":\"AI safety research covers alignment\"}]\n"
        );
        assert_eq!(cli(&run.db, &[], &scope), "scoped result\n");
        // and prose-state's query prints what sqlite3 -json prints
        let ours = run.cmd().args(["query", read]).assert().success();
        assert_eq!(
            String::from_utf8(ours.get_output().stdout.clone()).unwrap(),
            cli(&run.db, &["-json"], read)
        );
    }
}

#[test]
fn rows_written_by_the_specs_raw_sql_are_read_by_get() {
    let p = Project::new();
    let run = p.init();
    let insert = "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value, source_statement, updated_at)
      VALUES ('research', NULL, 'let', 'AI safety research covers alignment, robustness...',
              'let research = session: researcher', datetime('now'))";
    let exec = "INSERT INTO execution (statement_index, statement_text, status, started_at)
      VALUES (3, 'session \"Research AI safety\"', 'executing', datetime('now'))";
    let scoped = |id: i64| {
        format!(
            "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value, source_statement, updated_at)
             VALUES ('result', {id}, 'let', 'Processed chunk into 3 sub-parts...', 'let result = session \"Process chunk\"', datetime('now'))"
        )
    };
    match sqlite3() {
        Some(_) => {
            cli(&run.db, &[], insert);
            cli(&run.db, &[], insert); // REPLACE against the unique key: still one row
            cli(&run.db, &[], exec);
            cli(&run.db, &[], &scoped(1));
        }
        None => {
            let c = run.conn();
            c.execute(insert, []).unwrap();
            c.execute(insert, []).unwrap();
            c.execute(exec, []).unwrap();
            c.execute(&scoped(1), []).unwrap();
        }
    }
    assert_eq!(
        run.get("research", None),
        b"AI safety research covers alignment, robustness..."
    );
    assert_eq!(
        run.get("result", Some(1)),
        b"Processed chunk into 3 sub-parts..."
    );
    let n: i64 = run
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM bindings WHERE name = 'research'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    // prose-state then upserts the same row, not a second one
    run.bind("research", "updated by prose-state", None);
    let n: i64 = run
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM bindings WHERE name = 'research'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    // and appends after the raw execution row
    assert_eq!(run.exec(3, "session", "completed", None), 2);
}
