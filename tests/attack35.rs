//! What helper-34 left open, closed: a listing of one run's gates (`gates --run R`, MCP
//! `gates_list` in a session's run, `prose://runs/R/gates`, the page's run view) showed a
//! `gates` row rewritten behind prose-state's back as the decision it claims ("approved by
//! bob"), and left a pending gate so rewritten out of the pending list. A listing of one run is
//! now checked against that run's sealed log: every gate marked where its row and its log
//! disagree, listed by the status its log gives it.

use crate::common::*;
use crate::serve::{add, Server};

on_both!(
    no_column_of_a_gates_row_changes_a_listing_unmarked,
    a_rewritten_gate_is_marked_in_the_mcp_listing_and_resource,
    the_run_page_shows_the_sealed_decision_and_the_tampering,
    an_import_refuses_a_copy_whose_answer_was_forged,
    gates_audit_marks_each_row_by_its_own_seal,
);

/// Pending `P` (allow alice, a deadline, on_reject, metadata), approved `A` (a comment),
/// rejected `R` (a reason).
fn three_gates(run: &Run) {
    run.cmd()
        .args([
            "gates",
            "create",
            "P",
            "--prompt",
            "pending one",
            "--allow",
            "alice",
        ])
        .args(["--timeout", "1d", "--on-reject", "continue"])
        .args(["--metadata", r#"{"k":"v"}"#])
        .assert()
        .success();
    for g in ["A", "R"] {
        run.cmd()
            .args([
                "gates",
                "create",
                g,
                "--prompt",
                "decided one",
                "--allow",
                "alice,carol",
            ])
            .assert()
            .success();
    }
    run.cmd()
        .args(["approve", "A", "--as", "alice", "-y", "--comment", "fine"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "R", "--as", "carol", "-y", "--reason", "no"])
        .assert()
        .success();
}

/// A gate's listed JSON without what the clock moves.
fn listed(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    v.as_object_mut().unwrap().remove("time_left_seconds");
    v
}

/// The gates of a one-run listing by id, or the listing's exit code when it refused.
fn listing(run: &Run, status: &str) -> Result<Vec<serde_json::Value>, i32> {
    let a = run
        .cmd()
        .args(["--json", "gates", "--status", status])
        .assert();
    let out = a.get_output();
    if !out.status.success() {
        return Err(code(&a));
    }
    Ok(serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone())
}

/// For every column of the `gates` table (read from the database's own catalog, so that a
/// column added later is covered), two changes behind the tool's back: the value perturbed
/// (text extended, a number or a time moved by one, NULL given a value), and the values
/// rotated among the three gates (each given the next one's, a status or decider another gate
/// legitimately has). After each, a listing of the one run shows each gate exactly as before,
/// or marks it tampered or unattested: never a changed row unmarked. And the pending listing
/// still lists the pending gate: a row rewritten to a decision hides nothing. A listing that
/// refuses outright says tampered (exit 9).
fn no_column_of_a_gates_row_changes_a_listing_unmarked(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    three_gates(&run);
    let before: std::collections::HashMap<String, serde_json::Value> = listing(&run, "all")
        .unwrap()
        .iter()
        .map(|g| (g["id"].as_str().unwrap().to_string(), listed(g)))
        .collect();
    assert_eq!(before.len(), 3);
    for g in before.values() {
        assert_eq!(g["integrity"]["state"], "attested", "{g}");
    }
    let snap = p.snapshot();
    let columns = run.view().columns("gates");
    assert!(columns.len() >= 10, "{columns:?}");
    let (mut cases, mut refused) = (0, 0);
    for (column, ty) in &columns {
        // The id is what a row is found by (another id is another gate); the execution id
        // is a number each store assigns, no part of a decision.
        if matches!(column.as_str(), "id" | "run_id" | "execution_id") {
            continue;
        }
        for rotate in [false, true] {
            let (sqlite, postgres) = if rotate {
                rotation(column)
            } else {
                perturbation(column, ty)
            };
            // A change the database's own constraints refuse cannot be made behind the
            // tool's back: nothing to list.
            if run.view().try_raw(&sqlite, &postgres).is_err() {
                refused += 1;
                continue;
            }
            cases += 1;
            let case = format!("{column} ({ty}), rotated: {rotate}");
            match listing(&run, "all") {
                Err(c) => assert_eq!(c, 9, "{case}: refused with {c}"),
                Ok(gates) => {
                    assert_eq!(gates.len(), 3, "{case}: {gates:?}");
                    for g in &gates {
                        let id = g["id"].as_str().unwrap();
                        let state = g["integrity"]["state"].as_str().unwrap_or("none");
                        assert!(
                            matches!(state, "tampered" | "unattested") || listed(g) == before[id],
                            "{case}: gate {id} listed unmarked as {g}, before {}",
                            before[id]
                        );
                    }
                }
            }
            match listing(&run, "pending") {
                Err(c) => assert_eq!(c, 9, "{case}: pending listing refused with {c}"),
                Ok(gates) => assert!(
                    gates.iter().any(|g| g["id"] == "P"),
                    "{case}: the pending gate left the pending listing: {gates:?}"
                ),
            }
            p.restore(&snap);
        }
    }
    assert!(
        cases >= 20,
        "{cases} made, {refused} refused by the database"
    );
}

/// A column's value changed a little, in each backend's dialect, for every gate of the run.
fn perturbation(column: &str, ty: &str) -> (String, String) {
    let ty = ty.to_ascii_lowercase();
    let sqlite = if ty.contains("int") {
        format!("UPDATE gates SET {column} = COALESCE({column} + 1, 1)")
    } else {
        // A time moves by a second (in the form SQLite writes it); other text is extended.
        format!(
            "UPDATE gates SET {column} = COALESCE(strftime('%Y-%m-%d %H:%M:%S', {column}, '+1 second'), {column} || 'x', 'x')"
        )
    };
    let set = if ty.contains("int") {
        format!("COALESCE({column} + 1, 1)")
    } else if ty.contains("timestamp") {
        format!("COALESCE({column} + interval '1 second', now())")
    } else if ty.contains("bool") {
        format!("NOT COALESCE({column}, false)")
    } else {
        format!("COALESCE({column} || 'x', 'x')")
    };
    let postgres = format!(
        "ALTER TABLE openprose.gates DISABLE TRIGGER USER;
         UPDATE openprose.gates SET {column} = {set} WHERE run_id = '$RUN';
         ALTER TABLE openprose.gates ENABLE TRIGGER USER;"
    );
    (sqlite, postgres)
}

/// A column's values rotated among the gates P, A and R (P takes A's, A takes R's, R takes
/// P's).
fn rotation(column: &str) -> (String, String) {
    let sqlite = format!(
        "CREATE TEMP TABLE v AS SELECT id, {column} AS c FROM gates;
         UPDATE gates SET {column} = (SELECT c FROM v WHERE v.id =
             CASE gates.id WHEN 'P' THEN 'A' WHEN 'A' THEN 'R' ELSE 'P' END);
         DROP TABLE v;"
    );
    let postgres = format!(
        "ALTER TABLE openprose.gates DISABLE TRIGGER USER;
         CREATE TEMP TABLE v AS SELECT id, {column} AS c FROM openprose.gates WHERE run_id = '$RUN';
         UPDATE openprose.gates g SET {column} = (SELECT c FROM v WHERE v.id =
             CASE g.id WHEN 'P' THEN 'A' WHEN 'A' THEN 'R' ELSE 'P' END)
           WHERE g.run_id = '$RUN';
         DROP TABLE v;
         ALTER TABLE openprose.gates ENABLE TRIGGER USER;"
    );
    (sqlite, postgres)
}

/// The pending gate `P` rewritten as approved by bob: (SQLite, PostgreSQL).
const APPROVED_BY_BOB: (&str, &str) = (
    "UPDATE gates SET status = 'approved', resolved_by = 'bob', resolved_at = '2026-01-01 00:00:00' WHERE id = 'P'",
    "UPDATE openprose.gates SET status = 'approved', resolved_by = 'bob', resolved_at = now()
     WHERE run_id = '$RUN' AND id = 'P'",
);

/// Over MCP (rmcp's client), in the run's session: `gates_list` (pending, as a model calls
/// it) still lists `P`, marked tampered, and so does the run's gates resource.
fn a_rewritten_gate_is_marked_in_the_mcp_listing_and_resource(b: Backend) {
    use rmcp::ServiceExt;
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    three_gates(&run);
    run.view().raw(APPROVED_BY_BOB.0, APPROVED_BY_BOB.1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["--run", &run.id, "mcp", "--role", "vm", "--agent", "vm"])
            .current_dir(p.root())
            .env("HOME", test_home(p.root()))
            .stderr(std::process::Stdio::null());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        let client = ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await.unwrap();
        let r = client
            .call_tool(rmcp::model::CallToolRequestParams::new("gates_list"))
            .await
            .unwrap();
        let page = r.structured_content.clone().unwrap_or_default();
        let gates = page["gates"].as_array().cloned().unwrap_or_default();
        let p_gate = gates.iter().find(|g| g["id"] == "P");
        assert!(p_gate.is_some(), "{r:?}");
        assert_eq!(p_gate.unwrap()["integrity"]["state"], "tampered", "{r:?}");
        let read = client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "prose://runs/{}/gates",
                run.id
            )))
            .await
            .unwrap();
        let text = match &read.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("{other:?}"),
        };
        let listed: serde_json::Value = serde_json::from_str(&text).unwrap();
        let p_gate = listed["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == "P")
            .cloned()
            .unwrap();
        assert_eq!(p_gate["integrity"]["state"], "tampered", "{p_gate}");
        for g in listed["gates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["id"] != "P")
        {
            assert_eq!(g["integrity"]["state"], "attested", "{g}");
        }
        client.cancel().await.unwrap();
    });
}

/// The page's run view, after `P`'s row was rewritten: `P` shows as its sealed log has it
/// (pending, decided by no one), marked TAMPERED; bob is named nowhere as its decider.
fn the_run_page_shows_the_sealed_decision_and_the_tampering(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    three_gates(&run);
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let page = s.get(&format!("/runs/{}", run.id), Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("TAMPERED"), "{}", page.body);
    run.view().raw(APPROVED_BY_BOB.0, APPROVED_BY_BOB.1);
    let page = s.get(&format!("/runs/{}", run.id), Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("TAMPERED"), "{}", page.body);
    assert!(!page.body.contains(">bob<"), "{}", page.body);
    let row = page
        .body
        .split("<tr>")
        .find(|r| r.contains(">P</a>"))
        .unwrap_or_default()
        .to_string();
    assert!(row.contains("<td>pending</td>"), "{row}");
}

/// A copy whose answer and edit were changed in place (their history left as the decision
/// wrote it) is not imported, on this machine, whose key sealed it: exit 9, one line, and
/// the project unchanged. Before, it came in, and every read of it refused afterwards.
fn an_import_refuses_a_copy_whose_answer_was_forged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    let out = p.root().join("copy");
    run.cmd()
        .args(["export", "-o"])
        .arg(&out)
        .assert()
        .success();
    let copy = rusqlite::Connection::open(out.join("state.db")).unwrap();
    copy.execute_batch(
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = '6' WHERE name = 'ans';",
    )
    .unwrap();
    drop(copy);
    let before = run.snapshot();
    let a = run
        .cmd()
        .args(["import", "--run-id", "copy-1", "--vouch"])
        .arg(&out)
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert_eq!(stderr(&a).trim().lines().count(), 1, "{}", stderr(&a));
    assert!(stderr(&a).contains("ans"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    let a = p
        .cmd()
        .args(["--run", "copy-1", "get", "ans"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
}

/// `gates audit` marks each row by what its own seal says: a decision inserted by raw SQL
/// (the spec's way, unsealed) is `unattested`, a sealed row whose comment was changed is
/// `broken`, the others `attested`; the table has a SEAL column and says what it checks.
fn gates_audit_marks_each_row_by_its_own_seal(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    three_gates(&run);
    run.view().raw(
        "INSERT INTO gate_audit_log (gate_id, run_id, event_type, principal, metadata)
           VALUES ('P', (SELECT id FROM run), 'approved', 'bob', '{\"instance\":1}');
         DROP TRIGGER gate_audit_log_no_update;
         UPDATE gate_audit_log SET comment = 'changed' WHERE gate_id = 'A' AND event_type = 'approved';",
        "INSERT INTO openprose.gate_audit_log (gate_id, run_id, event_type, principal, metadata)
           VALUES ('P', '$RUN', 'approved', 'bob', '{\"instance\":1}');
         ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER USER;
         UPDATE openprose.gate_audit_log SET comment = 'changed'
          WHERE run_id = '$RUN' AND gate_id = 'A' AND event_type = 'approved';
         ALTER TABLE openprose.gate_audit_log ENABLE TRIGGER USER;",
    );
    let a = run
        .cmd()
        .args(["--json", "gates", "audit"])
        .assert()
        .success();
    let rows = stdout_json(&a);
    let seal_of = |gate: &str, event: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["gate_id"] == gate && r["event_type"] == event)
            .map(|r| r["sealed"].as_str().unwrap().to_string())
    };
    assert_eq!(
        seal_of("P", "approved").as_deref(),
        Some("unattested"),
        "{rows}"
    );
    assert_eq!(
        seal_of("A", "approved").as_deref(),
        Some("broken"),
        "{rows}"
    );
    assert_eq!(
        seal_of("R", "rejected").as_deref(),
        Some("attested"),
        "{rows}"
    );
    assert_eq!(
        seal_of("P", "created").as_deref(),
        Some("attested"),
        "{rows}"
    );
    let a = run.cmd().args(["gates", "audit"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.lines().next().unwrap().contains("SEAL"), "{out}");
    let bob = out.lines().find(|l| l.contains("bob")).unwrap();
    assert!(bob.trim_end().ends_with("UNATTESTED"), "{out}");
    assert!(stderr(&a).contains("gates verify"), "{}", stderr(&a));
}
