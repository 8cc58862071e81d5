//! What an outside attack on the merged binary found (helper-32, which had not seen the tests),
//! each closed: PostgreSQL operators of the database's own put ahead of the built-in ones; an
//! audit log numbered to the last integer; a `bind` claiming a decision's statement; a finished
//! run whose decided gate could no longer be read.

use crate::common::*;

on_both!(
    a_log_numbered_to_the_end_is_refused_not_a_panic,
    a_bind_does_not_claim_a_decisions_statement,
    a_decided_gate_of_a_finished_run_is_read,
);

/// [`answered_and_edited`], as the decision left it.
fn decided(run: &Run) {
    answered_and_edited(run, &[]);
}

/// A database writer's own `>` operators (bigint and integer, always false), and the
/// database's `search_path` set to find them before `pg_catalog`'s: before the gate opened (so
/// that the read which keeps what the openings name would find nothing) and after. Then `ans`
/// and `doc` forged. prose-state's sessions find names in `pg_catalog` alone: every read is
/// refused (exit 9), on this machine and on a teammate's holding the key but no anchor, and
/// the bind over the answer is refused as ever (exit 4).
#[test]
fn postgres_operators_of_the_databases_own_change_no_statement() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    let hijack = |arg: &str| {
        format!(
            "CREATE FUNCTION public.never_{arg}(a {arg}, b {arg}) RETURNS boolean LANGUAGE sql
               IMMUTABLE AS $f$ SELECT false $f$;
             CREATE OPERATOR public.> (LEFTARG = {arg}, RIGHTARG = {arg},
               FUNCTION = public.never_{arg});"
        )
    };
    run.view().raw(
        "",
        &format!(
            "{}
             DO $d$ BEGIN
               EXECUTE format('ALTER DATABASE %I SET search_path = public, pg_catalog',
                              current_database());
             END $d$;",
            hijack("bigint")
        ),
    );
    decided(&run);
    run.view().raw(
        "",
        &format!(
            "{}
             ALTER TABLE openprose.bindings DISABLE TRIGGER USER;
             UPDATE openprose.bindings SET value = '666', source_statement = 'let ans = 666'
              WHERE run_id = '$RUN' AND name = 'ans';
             UPDATE openprose.binding_history SET value = '666', source_statement = 'let ans = 666'
              WHERE run_id = '$RUN' AND name = 'ans';
             UPDATE openprose.bindings SET value = 'forged', source_statement = 'let doc'
              WHERE run_id = '$RUN' AND name = 'doc';
             UPDATE openprose.binding_history SET value = 'forged', source_statement = 'let doc'
              WHERE run_id = '$RUN' AND name = 'doc' AND n = 2;",
            hijack("integer")
        ),
    );
    for args in [
        vec!["get", "ans"],
        vec!["--json", "get", "ans"],
        vec!["history", "ans"],
        vec!["get", "doc"],
        vec!["history", "doc"],
    ] {
        run.refuses(&args, 9, "");
    }
    run.refuses(&["bind", "ans", "7"], 4, "only a decision");
    // A teammate with the team's key and no anchor of the run reads the same.
    let mate = p.elsewhere();
    let key = |p: &Project| test_home(p.root()).join(".prose").join("audit.key");
    std::fs::create_dir_all(key(&mate).parent().unwrap()).unwrap();
    std::fs::copy(key(&p), key(&mate)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(key(&mate), std::fs::Permissions::from_mode(0o600)).unwrap();
    for args in [["get", "ans"], ["history", "ans"], ["get", "doc"]] {
        let a = mate
            .cmd()
            .args(["--run", &run.id])
            .args(args)
            .assert()
            .failure();
        assert_eq!(code(&a), 9, "{args:?}: {}", stderr(&a));
        assert!(a.get_output().stdout.is_empty(), "{args:?} printed");
    }
}

/// The last audit row's number set to the largest integer: every command that would append
/// after it says the log was changed (exit 9, one line), never a panic, and writes nothing.
fn a_log_numbered_to_the_end_is_refused_not_a_panic(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    decided(&run);
    run.view().raw(
        "DROP TRIGGER gate_audit_log_no_update;
         UPDATE gate_audit_log SET seq = 9223372036854775807
          WHERE seq = (SELECT MAX(seq) FROM gate_audit_log);",
        "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER USER;
         UPDATE openprose.gate_audit_log SET seq = 9223372036854775807
          WHERE run_id = '$RUN' AND seq = (SELECT MAX(seq) FROM openprose.gate_audit_log
                                           WHERE run_id = '$RUN');",
    );
    for args in [
        vec!["resume"],
        vec!["gates", "show", "G"],
        vec!["gates", "create", "H", "--prompt", "x"],
        vec!["approve", "G", "-y", "--as", "bob"],
    ] {
        run.refuses(&args, 9, "");
    }
}

/// `approve G:` is the statement a decision writes under: a `bind` that claims it (to pass a
/// value off as an approver's edit, or to make a state the tool calls tampered) is refused as
/// bad input (exit 2), with nothing written.
fn a_bind_does_not_claim_a_decisions_statement(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    decided(&run);
    for name in ["doc", "x"] {
        run.refuses(
            &[
                "bind",
                name,
                "forged",
                "--as",
                "alice",
                "--source",
                "approve G:",
            ],
            2,
            "the statement gate \"G\"'s decision writes under",
        );
    }
    // Any other statement is the program's to name.
    run.cmd()
        .args(["bind", "x", "1", "--source", "approve the plan"])
        .assert()
        .success();
    assert_eq!(run.get("x", None), b"1");
}

/// A run finished after its gate was approved with an answer and an edit: `resume` and
/// `gates wait` hand over the decision (exit 0), with no consumption written to the finished
/// run, rather than reading it again forever (`resume` once exited 75, `gates wait` never
/// returned).
fn a_decided_gate_of_a_finished_run_is_read(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    decided(&run);
    run.cmd()
        .args(["finish", "--status", "completed"])
        .assert()
        .success();
    let before = run.snapshot();
    run.cmd().args(["resume"]).assert().success();
    let a = run
        .cmd()
        .args(["gates", "wait", "G", "--timeout", "0"])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(out.contains("approved"), "{out}");
    assert_eq!(run.snapshot(), before, "a finished run was written");
}
