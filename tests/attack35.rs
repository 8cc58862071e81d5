//! What helper-34 left open, and what helper-35 (the merged binary, no tests seen) found,
//! closed. A listing of one run's gates (`gates --run R`, MCP `gates_list` in a session's run,
//! `prose://runs/R/gates`, the page's run view) showed a `gates` row rewritten behind
//! prose-state's back as the decision it claims, and left a pending gate so rewritten out of
//! the pending list: a listing of one run, the page's run view and `doctor` now check the run
//! as `gates verify` does (its log, earlier openings' rows, the bindings its sealed openings
//! name), list a gate whose row is gone from its log, and call a pending gate no sealed event
//! opened `unsealed`. `import` and `fork` refuse a copy whose answer, edit, decided version or
//! earlier opening was changed; the sweep never decides an opening twice; `gates audit` marks
//! each row by its own seal; a raw version claiming an approver's edit is refused.

use crate::common::*;
use crate::serve::{add, Server};

on_both!(
    no_column_of_a_gates_row_changes_a_listing_unmarked,
    a_rewritten_gate_is_marked_in_the_mcp_listing_and_resource,
    the_run_page_shows_the_sealed_decision_and_the_tampering,
    an_import_refuses_a_copy_whose_answer_was_forged,
    gates_audit_marks_each_row_by_its_own_seal,
    a_listing_and_doctor_check_what_gates_verify_checks,
    a_gate_no_sealed_event_opened_is_listed_unsealed,
    a_deleted_gate_row_hides_no_gate,
    a_forged_edit_with_its_history_is_neither_forked_nor_imported,
    a_rewritten_earlier_opening_is_found_and_not_imported,
    a_sweep_never_decides_an_opening_its_log_decided,
    expiring_goes_by_the_sealed_deadline,
    a_raw_version_claiming_an_approvers_edit_is_refused,
    a_writer_killed_between_its_commit_and_the_anchor_s_move,
    a_bind_passed_off_as_an_approvers_edit_in_history_is_refused,
    a_binding_claiming_a_decision_no_opening_names_is_refused_by_every_reader,
    a_pending_gates_input_changed_in_place_is_never_decided_on,
    a_decision_with_no_event_is_tampered_without_the_key_too,
    a_reopen_written_only_into_the_row_is_tampered,
    a_bind_claims_no_spelling_of_a_decisions_statement,
    reading_a_run_while_a_gate_is_reopened_and_answered_raises_no_alarm,
    two_approvers_voting_at_once_with_an_edit_leave_no_stale_decision,
    a_fork_without_a_gate_carries_its_answer_as_a_plain_value,
    a_claim_under_a_new_name_is_found_by_verify_and_refused_by_every_read,
    the_version_an_edit_replaced_is_sealed_with_its_digest,
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
/// or marks it tampered or unattested: never a changed row unmarked, and one marked tampered
/// still shows every field its sealed log records as before. And the pending listing
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
                        // Marked tampered, it is still shown as its sealed log has it: every
                        // field the log records as it was, never the row's word.
                        if state == "tampered" {
                            for field in SEALED_FIELDS {
                                assert_eq!(
                                    g[field], before[id][field],
                                    "{case}: gate {id}'s {field} shown from its rewritten row: {g}"
                                );
                            }
                        }
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

/// What a gate's sealed log records of its row: a reader shows a tampered gate's as the log
/// has them (`gate_read::shown_row`).
const SEALED_FIELDS: [&str; 10] = [
    "status",
    "resolved_by",
    "resolved_at",
    "resolution_comment",
    "allow",
    "timeout",
    "timeout_at",
    "on_reject",
    "created_at",
    "instance",
];

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
    // The sealed status, marked where it is stated (helper-42).
    assert!(row.contains("<td>pending (TAMPERED)</td>"), "{row}");
}

/// A copy whose answer and edit were changed in place (their history left as the decision
/// wrote it) is not imported, on this machine, whose key sealed it: exit 9, one line, and
/// the project unchanged. Before, it came in, and every read of it refused afterwards.
fn an_import_refuses_a_copy_whose_answer_was_forged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    let out = forged_export(
        &p,
        &run,
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = '6' WHERE name = 'ans';",
    );
    let before = run.snapshot();
    let a = import_as_copy_1(&run, &out).failure();
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

// helper-35 (the merged binary, no tests seen): 8 breaks.

/// The answer changed in place, or who wrote its version: `gates verify` says tampered, and so
/// do a listing of the run, the page's run view and `doctor`, which check the run as it does.
fn a_listing_and_doctor_check_what_gates_verify_checks(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    let snap = p.snapshot();
    for (sqlite, postgres) in [
        (
            "DROP TRIGGER bindings_version_update;
             UPDATE bindings SET value = '6' WHERE name = 'ans';",
            "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
             UPDATE openprose.bindings SET value = '6' WHERE run_id = '$RUN' AND name = 'ans';
             ALTER TABLE openprose.bindings ENABLE TRIGGER USER;",
        ),
        (
            "UPDATE binding_history SET principal = 'bob' WHERE name = 'ans';",
            "ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
             UPDATE openprose.binding_history SET principal = 'bob' WHERE run_id = '$RUN' AND name = 'ans';
             ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;",
        ),
    ] {
        run.view().raw(sqlite, postgres);
        let a = run.cmd().args(["gates", "verify"]).assert().failure();
        assert_eq!(code(&a), 9, "{sqlite}: {}", stderr(&a));
        let gates = listing(&run, "all").unwrap();
        let g = gates.iter().find(|g| g["id"] == "G").unwrap();
        assert_eq!(g["integrity"]["state"], "tampered", "{sqlite}: {g}");
        let a = run.cmd().args(["doctor"]).assert().failure();
        let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        assert!(out.contains("tampered"), "{sqlite}: {out}");
        p.restore(&snap);
    }
}

/// A pending gate no sealed event opened (a row inserted behind prose-state's back) is
/// `unsealed` in a listing, never `attested`; it is still waited on as pending.
fn a_gate_no_sealed_event_opened_is_listed_unsealed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    three_gates(&run);
    run.view().raw(
        "INSERT INTO gates (id, run_id, prompt, status) VALUES ('U', (SELECT id FROM run), 'inserted', 'pending')",
        "INSERT INTO openprose.gates (id, run_id, prompt, status) VALUES ('U', '$RUN', 'inserted', 'pending')",
    );
    let gates = listing(&run, "all").unwrap();
    let u = gates.iter().find(|g| g["id"] == "U").unwrap();
    assert_eq!(u["integrity"]["state"], "unsealed", "{u}");
    let a = run.cmd().args(["gates"]).assert().success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("pending (UNSEALED)"), "{out}");
    let a = run
        .cmd()
        .args(["gates", "wait", "U", "--timeout", "0"])
        .assert()
        .failure();
    assert_eq!(code(&a), 7, "{}", stderr(&a));
}

/// A gate row deleted behind prose-state's back: still listed (from its sealed log, marked
/// tampered, under every status), and `gates show` and `gates wait` say tampered (9), not
/// "no such gate" (3).
fn a_deleted_gate_row_hides_no_gate(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    three_gates(&run);
    run.view().raw(
        "DELETE FROM gates WHERE id = 'A'",
        "DELETE FROM openprose.gates WHERE run_id = '$RUN' AND id = 'A'",
    );
    for status in ["all", "approved", "pending"] {
        let gates = listing(&run, status).unwrap();
        let a = gates.iter().find(|g| g["id"] == "A");
        assert!(a.is_some(), "{status}: {gates:?}");
        assert_eq!(a.unwrap()["integrity"]["state"], "tampered", "{status}");
    }
    for args in [
        vec!["gates", "show", "A"],
        vec!["gates", "wait", "A", "--timeout", "0"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
    let a = run.cmd().args(["gates", "show", "nope"]).assert().failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    // resume shows it from its log, its next step stop, and exits 9.
    let a = run.cmd().args(["--json", "resume"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let v = stdout_json(&a);
    let g = v["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == "A")
        .cloned();
    assert!(g.is_some(), "{v}");
    assert_eq!(g.unwrap()["next_step"]["action"], "stop", "{v}");
}

/// An edited input changed by raw SQL whose trigger versions the write and copies the edit's
/// statement (`approve G:`): version 3 claims to be the approver's edit, which G's sealed
/// decision wrote as version 2. `get`, `resume` refuse it (9); a later `bind` of the program's
/// own is read as it is.
fn a_raw_version_claiming_an_approvers_edit_is_refused(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    run.cmd()
        .args(["gates", "wait", "G", "--timeout", "0"])
        .assert()
        .success();
    run.view().raw(
        "UPDATE bindings SET value = 'evil' WHERE name = 'doc'",
        "UPDATE openprose.bindings SET value = 'evil' WHERE run_id = '$RUN' AND name = 'doc'",
    );
    for args in [vec!["get", "doc"], vec!["resume"]] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        assert!(!String::from_utf8_lossy(&a.get_output().stdout).contains("evil"));
    }
    // A later bind of the program's own is its value, and the history it follows still holds
    // the forged claim: `gates verify` refuses the run, so no reader of the name shows it.
    run.bind("doc", "mine", None);
    for args in [vec!["get", "doc"], vec!["gates", "verify"]] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
}

/// The edited input forged in place with its kept version rewritten to agree: `fork` and
/// `import` (of an export so forged) refuse it (9), as `gates verify` does, writing nothing.
fn a_forged_edit_with_its_history_is_neither_forked_nor_imported(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    let out = forged_export(
        &p,
        &run,
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = 'evil' WHERE name = 'doc';
         UPDATE binding_history SET value = 'evil' WHERE name = 'doc' AND n = 2;",
    );
    let a = import_as_copy_1(&run, &out).failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let a = p
        .cmd()
        .args(["--run", "copy-1", "get", "doc"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    run.view().raw(
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = 'evil' WHERE name = 'doc';
         UPDATE binding_history SET value = 'evil' WHERE name = 'doc' AND n = 2;",
        "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
         ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
         UPDATE openprose.bindings SET value = 'evil' WHERE run_id = '$RUN' AND name = 'doc';
         UPDATE openprose.binding_history SET value = 'evil' WHERE run_id = '$RUN' AND name = 'doc' AND n = 2;
         ALTER TABLE openprose.bindings ENABLE TRIGGER USER;
         ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;",
    );
    let at = run.view().last_execution_id().to_string();
    let a = run
        .cmd()
        .args(["fork", "--at", &at, "--run-id", "f1"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let a = p
        .cmd()
        .args(["--run", "f1", "get", "doc"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
}

/// An earlier opening's row in `gate_instances` rewritten (a rejection turned into bob's
/// approval): `gates verify` and `doctor` find it, and an import of a copy so rewritten is
/// refused, as `gates wait --instance 1` refuses it.
fn a_rewritten_earlier_opening_is_found_and_not_imported(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "gates",
            "create",
            "X",
            "--prompt",
            "x",
            "--allow",
            "alice,carol",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "X", "--as", "carol", "-y", "--reason", "no"])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates",
            "create",
            "X",
            "--prompt",
            "x",
            "--allow",
            "alice,carol",
            "--reopen",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "X", "--as", "alice", "-y"])
        .assert()
        .success();
    run.cmd().args(["gates", "verify"]).assert().success();
    const REWRITE: &str = "UPDATE gate_instances SET status = 'approved', resolved_by = 'bob', resolution_comment = NULL WHERE gate_id = 'X' AND instance = 1";
    let out = forged_export(&p, &run, REWRITE);
    let a = import_as_copy_1(&run, &out).failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    run.view().raw(
        REWRITE,
        "UPDATE openprose.gate_instances SET status = 'approved', resolved_by = 'bob', resolution_comment = NULL
         WHERE run_id = '$RUN' AND gate_id = 'X' AND instance = 1",
    );
    let a = run
        .cmd()
        .args(["gates", "wait", "X", "--instance", "1", "--timeout", "0"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let a = run.cmd().args(["gates", "verify"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let a = run.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("tampered gate"), "{out}");
}

/// A gate timed out, its row then set back to pending behind prose-state's back: the sweep
/// decides nothing again (no second sealed `timeout`), so that putting the row back makes the
/// run whole again.
fn a_sweep_never_decides_an_opening_its_log_decided(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "T", "--prompt", "t", "--timeout", "1m"])
        .assert()
        .success();
    advance_clock(p.root(), 120);
    let a = run
        .cmd()
        .args(["gates", "wait", "T", "--timeout", "0"])
        .assert()
        .failure();
    assert_eq!(code(&a), 6, "{}", stderr(&a));
    let row = run.view().gate("T");
    const PENDING: (&str, &str) = (
        "UPDATE gates SET status = 'pending', resolved_at = NULL, resolved_by = NULL WHERE id = 'T'",
        "UPDATE openprose.gates SET status = 'pending', resolved_at = NULL, resolved_by = NULL
         WHERE run_id = '$RUN' AND id = 'T'",
    );
    run.view().raw(PENDING.0, PENDING.1);
    let before = run.view().events("T").len();
    run.cmd().args(["gates", "sweep"]).assert().success();
    assert_eq!(
        run.view().events("T").len(),
        before,
        "the sweep wrote on a decided opening"
    );
    // The row put back as it was: whole again.
    let (sqlite, postgres) = (
        format!(
            "UPDATE gates SET status = 'timeout', resolved_at = '{}', resolved_by = '{}' WHERE id = 'T'",
            row.3.clone().unwrap(),
            row.1.clone().unwrap()
        ),
        format!(
            "UPDATE openprose.gates SET status = 'timeout', resolved_at = '{}+00', resolved_by = '{}'
             WHERE run_id = '$RUN' AND id = 'T'",
            row.3.clone().unwrap(),
            row.1.clone().unwrap()
        ),
    );
    run.view().raw(&sqlite, &postgres);
    run.cmd().args(["gates", "verify"]).assert().success();
}

/// `--expiring` of one run goes by the deadline a gate's sealed log gives it: the pending gate
/// whose row's deadline was moved a year on is still listed as expiring (marked), and one whose
/// row's deadline was brought near while its sealed one is far is not.
fn expiring_goes_by_the_sealed_deadline(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    three_gates(&run);
    run.cmd()
        .args([
            "gates",
            "create",
            "F",
            "--prompt",
            "far",
            "--timeout",
            "10d",
        ])
        .assert()
        .success();
    run.view().raw(
        "UPDATE gates SET timeout_at = '2027-12-01 00:00:00' WHERE id = 'P';
         UPDATE gates SET timeout_at = datetime('now', '+1 hour') WHERE id = 'F';",
        "UPDATE openprose.gates SET timeout_at = '2027-12-01 00:00:00+00' WHERE run_id = '$RUN' AND id = 'P';
         UPDATE openprose.gates SET timeout_at = now() + interval '1 hour' WHERE run_id = '$RUN' AND id = 'F';",
    );
    let a = run
        .cmd()
        .args(["--json", "gates", "--expiring", "2d"])
        .assert()
        .success();
    let gates = stdout_json(&a);
    let ids: Vec<&str> = gates
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"P"), "{gates}");
    assert!(!ids.contains(&"F"), "{gates}");
    let p_gate = gates
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == "P")
        .unwrap();
    assert_eq!(p_gate["integrity"]["state"], "tampered", "{p_gate}");
}

/// A writer killed between its commit and the anchor's move (the fault the test build injects:
/// it aborts there): the approval stands, every reader reads it without a false alarm (the
/// rows after the anchor are checked), the next write moves the anchor past it, and a forged
/// answer written while the anchor lagged is still refused.
fn a_writer_killed_between_its_commit_and_the_anchor_s_move(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("doc", "orig", None);
    run.cmd()
        .args(["gates", "create", "G", "--prompt", "P"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans", "--inputs", "doc"])
        .assert()
        .success();
    let a = run
        .cmd()
        .env("PROSE_STATE_TEST_DIE_AFTER_COMMIT", "1")
        .args(["approve", "G", "--as", "alice", "-y", "--response", "5"])
        .args(["--edit", "doc=edited"])
        .assert()
        .failure();
    assert!(
        a.get_output().status.code().is_none(),
        "it was not killed: {}",
        stderr(&a)
    );
    assert_eq!(run.get("ans", None), b"5");
    assert_eq!(run.get("doc", None), b"edited");
    for args in [
        vec!["gates", "show", "G"],
        vec!["history", "ans"],
        vec!["gates", "verify"],
        vec!["resume"],
        vec!["gates", "wait", "G", "--timeout", "0"],
    ] {
        let a = run.cmd().args(&args).assert();
        assert_eq!(code(&a), 0, "{args:?}: {}", stderr(&a));
    }
    // A forged answer while the anchor lags: refused all the same.
    let snap = p.snapshot();
    run.view().raw(
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = '6' WHERE name = 'ans';",
        "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
         UPDATE openprose.bindings SET value = '6' WHERE run_id = '$RUN' AND name = 'ans';
         ALTER TABLE openprose.bindings ENABLE TRIGGER USER;",
    );
    let a = run.cmd().args(["get", "ans"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    p.restore(&snap);
    // The next sealing write moves the anchor past it.
    run.cmd()
        .args(["gates", "create", "H", "--prompt", "Q"])
        .assert()
        .success();
    run.cmd().args(["gates", "verify"]).assert().success();
}

// helper-36 (the merged binary, no tests seen): 6 breaks.

/// A version the program bound, its writer and statement rewritten in the history to pass it
/// off as the approver's edit: `history`, `get --version` and `gates verify` refuse it (9).
fn a_bind_passed_off_as_an_approvers_edit_in_history_is_refused(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    run.cmd()
        .args(["gates", "wait", "G", "--timeout", "0"])
        .assert()
        .success();
    run.bind("doc", "program v3", None);
    run.view().raw(
        "UPDATE binding_history SET principal = 'alice', source_statement = 'approve G:'
         WHERE name = 'doc' AND n = 3",
        "ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
         UPDATE openprose.binding_history SET principal = 'alice', source_statement = 'approve G:'
          WHERE run_id = '$RUN' AND name = 'doc' AND n = 3;
         ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;",
    );
    for args in [
        vec!["history", "doc"],
        vec!["get", "doc", "--version", "3"],
        vec!["gates", "verify"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
}

/// A binding inserted under a name no opening names, claiming gate G's decision wrote it:
/// `resume` and `diff` refuse it (9), as `get` does; `doctor` reports it.
fn a_binding_claiming_a_decision_no_opening_names_is_refused_by_every_reader(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    let at = run.view().last_execution_id().to_string();
    run.cmd()
        .args(["fork", "--at", &at, "--run-id", "f1"])
        .assert()
        .success();
    run.view().raw(
        "INSERT INTO bindings (name, kind, value, source_statement) VALUES ('budget', 'let', '1000000', 'approve G:')",
        "INSERT INTO openprose.bindings (run_id, name, kind, value, source_statement)
         VALUES ('$RUN', 'budget', 'let', '1000000', 'approve G:')",
    );
    for args in [vec!["get", "budget"], vec!["resume"]] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
    let a = p.cmd().args(["diff", "f1", &run.id]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(!String::from_utf8_lossy(&a.get_output().stdout).contains("1000000"));
    let a = run.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("tampered binding"), "{out}");
}

/// The input of a gate still pending changed in place (its history left as it was): the gate
/// is shown tampered, `approve` refuses it (9) and writes no decision, and a copy so changed
/// is neither imported nor forked.
fn a_pending_gates_input_changed_in_place_is_never_decided_on(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("topic", "t1", None);
    run.cmd()
        .args([
            "gates", "create", "gp", "--prompt", "p", "--inputs", "topic",
        ])
        .assert()
        .success();
    let out = forged_export(
        &p,
        &run,
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = 'evil' WHERE name = 'topic';",
    );
    let a = import_as_copy_1(&run, &out).failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    run.view().raw(
        "DROP TRIGGER bindings_version_update;
         UPDATE bindings SET value = 'evil' WHERE name = 'topic';",
        "ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
         UPDATE openprose.bindings SET value = 'evil' WHERE run_id = '$RUN' AND name = 'topic';
         ALTER TABLE openprose.bindings ENABLE TRIGGER USER;",
    );
    let a = run.cmd().args(["gates", "show", "gp"]).assert().failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let before = run.view().events("gp").len();
    let a = run
        .cmd()
        .args(["approve", "gp", "--as", "alice", "-y"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    let events = run.view().events("gp");
    assert!(
        events[before..].iter().all(|e| e.0 != "approved"),
        "a decision was written: {events:?}"
    );
    assert_eq!(run.view().gate("gp").0, "pending");
    let gates = listing(&run, "all").unwrap();
    let g = gates.iter().find(|g| g["id"] == "gp").unwrap();
    assert_eq!(g["integrity"]["state"], "tampered", "{g}");
    let at = run.view().last_execution_id().to_string();
    let a = run
        .cmd()
        .args(["fork", "--at", &at, "--run-id", "f1"])
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
}

/// A bare `UPDATE gates` decision (no decision event at all) is tampered on a machine without
/// the key too: `gates wait --accept-unattested` there exits 9, not 0.
fn a_decision_with_no_event_is_tampered_without_the_key_too(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "gp", "--prompt", "p"])
        .assert()
        .success();
    run.view().raw(
        "UPDATE gates SET status = 'approved', resolved_by = 'bob', resolved_at = '2026-01-01 00:00:00' WHERE id = 'gp'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'bob', resolved_at = now()
         WHERE run_id = '$RUN' AND id = 'gp'",
    );
    let keyless = tempfile::tempdir().unwrap();
    for home in [test_home(p.root()), keyless.path().to_path_buf()] {
        let a = run
            .cmd()
            .env("HOME", &home)
            .args([
                "gates",
                "wait",
                "gp",
                "--timeout",
                "0",
                "--accept-unattested",
            ])
            .assert()
            .failure();
        assert_eq!(code(&a), 9, "{}: {}", home.display(), stderr(&a));
    }
}

/// A rejected gate moved by raw SQL to a second opening no event made (`instance = 2`,
/// pending): tampered (9) from every reader, never waited on as pending; `--instance 1` still
/// answers with that opening's sealed rejection.
fn a_reopen_written_only_into_the_row_is_tampered(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "gx", "--prompt", "p"])
        .assert()
        .success();
    run.cmd()
        .args(["reject", "gx", "--as", "carol", "-y", "--reason", "no"])
        .assert()
        .success();
    run.view().raw(
        "INSERT INTO gate_instances (gate_id, instance, run_id, execution_id, prompt, allow, timeout, timeout_at, on_reject, status, created_at, resolved_at, resolved_by, resolution_comment, metadata)
           SELECT id, instance, run_id, execution_id, prompt, allow, timeout, timeout_at, on_reject, status, created_at, resolved_at, resolved_by, resolution_comment, metadata FROM gates WHERE id = 'gx';
         UPDATE gates SET instance = 2, status = 'pending', resolved_at = NULL, resolved_by = NULL,
                          resolution_comment = NULL WHERE id = 'gx';",
        "INSERT INTO openprose.gate_instances (gate_id, instance, run_id, execution_id, prompt, allow, timeout, timeout_at, on_reject, status, created_at, resolved_at, resolved_by, resolution_comment, metadata)
           SELECT id, instance, run_id, execution_id, prompt, allow, timeout, timeout_at, on_reject, status, created_at, resolved_at, resolved_by, resolution_comment, metadata FROM openprose.gates WHERE run_id = '$RUN' AND id = 'gx';
         UPDATE openprose.gates SET instance = 2, status = 'pending', resolved_at = NULL,
                resolved_by = NULL, resolution_comment = NULL WHERE run_id = '$RUN' AND id = 'gx';",
    );
    for args in [
        vec![
            "gates",
            "wait",
            "gx",
            "--timeout",
            "0",
            "--accept-unattested",
        ],
        vec!["gates", "verify"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
    }
    let gates = listing(&run, "all").unwrap();
    let g = gates.iter().find(|g| g["id"] == "gx").unwrap();
    assert_eq!(g["integrity"]["state"], "tampered", "{g}");
}

/// `bind --source` claims no spelling a reader might take for a decision's statement:
/// padded, cased or followed by another line, it is refused (exit 2) as `approve G:` is, and
/// nothing is written; a statement that only begins so is the program's own.
fn a_bind_claims_no_spelling_of_a_decisions_statement(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let before = run.snapshot();
    for source in [
        " approve G:",
        "Approve G:",
        "approve G: ",
        "APPROVE G:\nmore",
        "approve g:\t",
    ] {
        let a = run
            .cmd()
            .args(["bind", "x", "1", "--source", source])
            .assert()
            .failure();
        assert_eq!(code(&a), 2, "{source:?}: {}", stderr(&a));
    }
    assert_eq!(run.snapshot(), before);
    run.cmd()
        .args(["bind", "x", "1", "--source", "approve G: the plan"])
        .assert()
        .success();
}

// helper-37 (the merged binary, no tests seen, hunting false alarms): 5 breaks.

/// A gate reopened and answered in a loop while `gates verify`, `doctor`, `gates show` and a
/// listing of the run read it: none of them reports tampering (each reads again when its
/// finding coincides with the log growing).
fn reading_a_run_while_a_gate_is_reopened_and_answered_raises_no_alarm(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let create = |reopen: bool| {
        let mut c = run.cmd();
        c.args(["gates", "create", "g", "--prompt", "p"])
            .args(["--response-schema", r#"{"type":"integer"}"#])
            .args(["--response-binding", "ans"]);
        if reopen {
            c.arg("--reopen");
        }
        c.assert().success();
    };
    create(false);
    run.cmd()
        .args(["approve", "g", "--as", "bob", "-y", "--response", "0"])
        .assert()
        .success();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for i in 1..=8 {
                create(true);
                run.cmd()
                    .args([
                        "approve",
                        "g",
                        "--as",
                        "bob",
                        "-y",
                        "--response",
                        &i.to_string(),
                    ])
                    .assert()
                    .success();
            }
        });
        let mut reads = 0;
        while !writer.is_finished() || reads < 4 {
            for args in [
                vec!["gates", "verify"],
                vec!["doctor"],
                vec!["gates", "show", "g"],
            ] {
                let a = run.cmd().args(&args).assert();
                assert!(
                    !matches!(code(&a), 9..=11) && (code(&a) == 0 || args[0] == "doctor"),
                    "{args:?}: {}{}",
                    String::from_utf8_lossy(&a.get_output().stdout),
                    stderr(&a)
                );
            }
            let gates = listing(&run, "all").unwrap();
            for g in &gates {
                assert_eq!(g["integrity"]["state"], "attested", "{g}");
            }
            reads += 1;
        }
        writer.join().unwrap();
    });
}

/// Two approvers of a two-approval gate vote at once, one editing its input: the deciding
/// vote seals the input as the edit left it (it reads again when the edit committed beside
/// it), so the decision stands: never stale (11).
fn two_approvers_voting_at_once_with_an_edit_leave_no_stale_decision(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = crate::serve::add(&p, "alice");
    let carol = crate::serve::add(&p, "carol");
    run.bind("x", "x0", None);
    for i in 0..6 {
        let gate = format!("q{i}");
        run.cmd()
            .args(["gates", "create", &gate, "--prompt", "p", "--inputs", "x"])
            .args(["--allow", "alice,carol", "--require", "2"])
            .assert()
            .success();
        std::thread::scope(|s| {
            let a = s.spawn(|| {
                run.cmd()
                    .env("PROSE_TOKEN", &alice)
                    .args(["approve", &gate, "--yes", "--edit", &format!("x=a{i}")])
                    .assert()
                    .success();
            });
            run.cmd()
                .env("PROSE_TOKEN", &carol)
                .args(["approve", &gate, "--yes"])
                .assert()
                .success();
            a.join().unwrap();
        });
        let a = run
            .cmd()
            .args(["gates", "wait", &gate, "--timeout", "0"])
            .assert();
        assert_eq!(code(&a), 0, "{gate}: {}", stderr(&a));
    }
}

/// A fork that does not carry a gate (its log not attested there after a prune) carries what
/// that gate's decision wrote as plain values: its reads stand (no claim of a decision the fork
/// does not hold), and the fork verifies.
fn a_fork_without_a_gate_carries_its_answer_as_a_plain_value(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("x", "x0", None);
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "p", "--inputs", "x"])
        .args(["--response-schema", r#"{"type":"integer"}"#])
        .args(["--response-binding", "ans"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "g", "--as", "bob", "-y", "--response", "7"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "wait", "g", "--timeout", "0"])
        .assert()
        .success();
    run.bind("x", "x1", None);
    run.bind("x", "x2", None);
    run.cmd()
        .args(["prune", "--history", "1", "--yes"])
        .assert()
        .success();
    let at = run.view().last_execution_id().to_string();
    let a = run
        .cmd()
        .args(["fork", "--at", &at, "--run-id", "fa"])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("not carried"), "{out}");
    let fa = p.run("fa");
    assert_eq!(fa.get("ans", None), b"7");
    fa.cmd().args(["resume"]).assert().success();
    fa.cmd().args(["gates", "verify"]).assert().success();
}

/// A binding inserted under a name no opening names, claiming gate g's decision wrote it:
/// its version is refused by `get --version` (9), `gates verify` finds it (9), and a copy
/// holding it is not imported.
fn a_claim_under_a_new_name_is_found_by_verify_and_refused_by_every_read(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    let forge =
        "INSERT OR REPLACE INTO bindings (name, execution_id, kind, value, source_statement)
         VALUES ('evil', NULL, 'let', 'rm -rf /', 'approve G:')";
    // An export of the run as it stands, forged afterwards: `import` refuses it.
    let out = forged_export(&p, &run, forge);
    let a = import_as_copy_1(&run, &out).failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    run.view().raw(
        forge,
        "INSERT INTO openprose.bindings (run_id, name, kind, value, source_statement)
         VALUES ('$RUN', 'evil', 'let', 'rm -rf /', 'approve G:')",
    );
    for args in [
        vec!["get", "evil", "--version", "1"],
        vec!["gates", "verify"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        assert!(!String::from_utf8_lossy(&a.get_output().stdout).contains("rm -rf"));
    }
    // The forged run itself is not exported (`export` checks it as `gates verify` does).
    let a = run
        .cmd()
        .args(["export", "-o"])
        .arg(p.root().join("copy2"))
        .assert()
        .failure();
    assert_eq!(code(&a), 9, "{}", stderr(&a));
    assert!(!p.root().join("copy2").exists());
}

/// The version an approver's edit replaced (`orig`, version 1, which no decision pinned)
/// rewritten in history to other bytes of the same size: the edit sealed its digest, so
/// `gates verify`, `doctor` and `get --version 1` find it (9), and `history` does not show it.
fn the_version_an_edit_replaced_is_sealed_with_its_digest(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    answered_and_edited(&run, &["--allow", "alice"]);
    let shown = stdout_json(&run.cmd().args(["gates", "show", "G", "--json"]).assert());
    assert_eq!(shown["edits"][0]["from_version"], 1, "{shown}");
    run.cmd().args(["gates", "verify"]).assert().success();
    let a = run.cmd().args(["get", "doc", "--version", "1"]).assert();
    assert_eq!(a.success().get_output().stdout, b"orig");
    run.view().raw(
        "UPDATE binding_history SET value = 'fake' WHERE name = 'doc' AND n = 1",
        "ALTER TABLE openprose.binding_history DISABLE TRIGGER USER;
         UPDATE openprose.binding_history SET value = 'fake'
          WHERE run_id = '$RUN' AND name = 'doc' AND n = 1;
         ALTER TABLE openprose.binding_history ENABLE TRIGGER USER;",
    );
    for args in [
        vec!["gates", "verify"],
        vec!["get", "doc", "--version", "1"],
        vec!["history", "doc"],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        assert!(!out.contains("fake"), "{args:?}: {out}");
    }
    let a = run.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("tampered"), "{out}");
}

/// The run exported into the project's `copy/`, then `sqlite` run on the copy's database
/// behind the tool's back (nothing when empty).
fn forged_export(p: &Project, run: &Run, sqlite: &str) -> std::path::PathBuf {
    let out = p.root().join("copy");
    run.cmd()
        .args(["export", "-o"])
        .arg(&out)
        .assert()
        .success();
    if !sqlite.is_empty() {
        let copy = rusqlite::Connection::open(out.join("state.db")).unwrap();
        copy.execute_batch(sqlite).unwrap();
    }
    out
}

/// `import --run-id copy-1 --vouch` of the copy at `out`, into the run's project.
fn import_as_copy_1(run: &Run, out: &std::path::Path) -> assert_cmd::assert::Assert {
    run.cmd()
        .args(["import", "--run-id", "copy-1", "--vouch"])
        .arg(out)
        .assert()
}
