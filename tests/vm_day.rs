//! The VM's real day, off the happy path: commands run from a subdirectory, `PROSE_RUN`
//! exported, the spec's own spellings.

use crate::common::*;

on_both!(
    the_root_is_found_from_a_subdirectory,
    prose_run_is_read_by_one_run_commands_and_narrows_no_listing,
);

fn pending_gate(run: &Run, id: &str) {
    run.cmd()
        .args(["gates", "create", id, "--prompt", "Go on?"])
        .assert()
        .success();
}

fn the_root_is_found_from_a_subdirectory(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    pending_gate(&run, "g");
    let deeper = p.root().join("src/deeper");
    std::fs::create_dir_all(&deeper).unwrap();
    let here = |args: &[&str]| {
        let mut c = p.cmd();
        c.current_dir(&deeper).args(args);
        c
    };
    let a = here(&["--json", "gates"]).assert().success();
    let v = stdout_json(&a);
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["run_id"], run.id.as_str());
    let a = here(&["--json", "runs"]).assert().success();
    assert_eq!(stdout_json(&a)[0]["id"], run.id.as_str());
    here(&["--run", &run.id, "bind", "from_below", "yes"])
        .assert()
        .success();
    assert_eq!(run.get("from_below", None), b"yes");
    // init from below makes the run in the root's .prose/, not a new one here
    let a = here(&["--json", "init"])
        .args(p.backend_flag())
        .assert()
        .success();
    let id = stdout_json(&a)["run_id"].as_str().unwrap().to_string();
    assert!(p.root().join(".prose/runs").join(&id).is_dir());
    assert!(!deeper.join(".prose").exists());
    assert!(!p.root().join("src/.prose").exists());
    // --root still overrides
    let a = here(&["--json", "--root", deeper.to_str().unwrap(), "runs"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a), serde_json::json!([]));
}

/// The user's prose home (audit key, user agents) is never taken for a project.
#[test]
fn the_prose_home_is_not_a_project() {
    let p = Project::new();
    // A home outside any project (the project's own .prose/ would be found above it).
    let outside = tempfile::tempdir().unwrap();
    let home = outside.path().join("home");
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let cmd = |args: &[&str]| {
        let mut c = p.cmd();
        c.current_dir(&work).env("HOME", &home).args(args);
        c
    };
    // A run made somewhere under the home creates the home's ~/.prose (its audit key).
    let run = p.init();
    pending_gate(&run, "g");
    let mut c = run.cmd();
    c.env("HOME", &home)
        .args(["approve", &run.id, "g", "--yes", "--as", "raymond"])
        .assert()
        .success();
    assert!(home.join(".prose/audit.key").is_file());
    // From ~/work, with no project above but the home: no runs, and init makes ~/work/.prose.
    let a = cmd(&["--json", "runs"]).assert().success();
    assert_eq!(stdout_json(&a), serde_json::json!([]));
    cmd(&["init", "--run-id", "w1"]).assert().success();
    assert!(work.join(".prose/runs/w1/state.db").is_file());
    assert!(!home.join(".prose/runs").exists());
}

fn prose_run_is_read_by_one_run_commands_and_narrows_no_listing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let a_run = p.init();
    let b_run = p.init();
    pending_gate(&a_run, "g");
    pending_gate(&b_run, "g");
    pending_gate(&b_run, "h");
    let with_env = |args: &[&str]| {
        let mut c = p.cmd();
        c.env("PROSE_RUN", &a_run.id).args(args);
        c
    };
    // Listings show every run, whatever PROSE_RUN says.
    let a = with_env(&["--json", "gates"]).assert().success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 3);
    let a = with_env(&["--json", "gates", "--pending"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 3);
    let a = with_env(&["--json", "runs"]).assert().success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 2);
    // --run on the command line narrows them.
    let a = with_env(&["--json", "--run", &b_run.id, "gates"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a).as_array().unwrap().len(), 2);
    // Commands on one run take it from PROSE_RUN: the gate alone is enough.
    let a = with_env(&["--json", "gates", "show", "g", "--as", "raymond"])
        .assert()
        .success();
    assert_eq!(stdout_json(&a)["run_id"], a_run.id.as_str());
    with_env(&["approve", "g", "--approve", "--yes", "--as", "raymond"])
        .assert()
        .success();
    assert_eq!(a_run.view().gate("g").0, "approved");
    assert_eq!(b_run.view().gate("g").0, "pending");
    with_env(&["gates", "wait", "g"]).assert().success();
    with_env(&[
        "reject", &b_run.id, "h", "--yes", "--as", "raymond", "--reason", "no",
    ])
    .assert()
    .success();
    assert_eq!(b_run.view().gate("h").0, "rejected");
    // Without PROSE_RUN or --run, a lone gate names no run: exit 2.
    let before = b_run.snapshot();
    let a = p
        .cmd()
        .args(["approve", "g", "--yes", "--as", "raymond"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
    assert_eq!(b_run.snapshot(), before);
}

on_both!(
    an_agent_made_the_spec_way_is_listed,
    a_timed_out_gate_tells_one_time_and_iso_deadlines_show_time_left,
    init_quiet_prints_the_id_alone,
);

fn an_agent_made_the_spec_way_is_listed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // The spec's way: segments inserted directly; its `UPDATE agents` matches no row.
    run.view().raw(
        "PRAGMA foreign_keys = OFF;
         INSERT INTO agent_segments (agent_name, segment_number, prompt, summary)
         VALUES ('scout', 1, 'look', 'looked'), ('scout', 2, 'look again', 'saw');
         UPDATE agents SET memory = 'm' WHERE name = 'scout';",
        "INSERT INTO openprose.agent_segments (agent_name, run_id, segment_number, prompt, summary)
         VALUES ('scout', '$RUN', 1, 'look', 'looked'), ('scout', '$RUN', 2, 'look again', 'saw');
         UPDATE openprose.agents SET memory = 'm' WHERE name = 'scout' AND run_id = '$RUN';",
    );
    let a = run
        .cmd()
        .args(["--json", "agent", "--scope", "execution", "list"])
        .assert()
        .success();
    let v = stdout_json(&a);
    let scout = v
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "scout")
        .unwrap_or_else(|| panic!("scout missing: {v}"));
    assert_eq!(scout["segments"], 2, "{scout}");
    let a = run.cmd().args(["--json", "resume"]).assert().success();
    let agents = stdout_json(&a)["agents"].clone();
    assert!(
        agents
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "scout"),
        "{agents}"
    );
}

fn a_timed_out_gate_tells_one_time_and_iso_deadlines_show_time_left(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args([
            "gates",
            "create",
            "soon",
            "--prompt",
            "p",
            "--timeout",
            "1s",
        ])
        .assert()
        .success();
    advance_clock(p.root(), 2);
    let a = run.cmd().args(["gates", "wait", "soon"]).assert().failure();
    assert_eq!(code(&a), 6);
    let (_, timeout_at) = run.view().gate_times("soon");
    let a = run
        .cmd()
        .args(["--json", "gates", "audit", "--gate", "soon"])
        .assert()
        .success();
    let v = stdout_json(&a);
    let event = v
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "timeout")
        .unwrap();
    let a = run
        .cmd()
        .args(["--json", "gates", "show", "soon", "--as", "raymond"])
        .assert()
        .success();
    let g = stdout_json(&a);
    // The gate's resolved_at, its deadline and its timeout event agree.
    assert_eq!(g["resolved_at"], event["timestamp"], "{g} {event}");
    assert_eq!(g["resolved_at"].as_str(), timeout_at.as_deref());
    assert!(event["metadata"].as_str().unwrap().contains("swept_at"));
    // A deadline raw SQL wrote in ISO form (as the spec's schema comment asks) shows its time
    // left.
    run.cmd()
        .args(["gates", "create", "iso", "--prompt", "p", "--timeout", "2h"])
        .assert()
        .success();
    let iso = (chrono_like_now_plus_hours(1)).to_string();
    run.view().raw(
        &format!("UPDATE gates SET timeout_at = '{iso}' WHERE id = 'iso'"),
        &format!(
            "UPDATE openprose.gates SET timeout_at = '{iso}' WHERE run_id = '$RUN' AND id = 'iso'"
        ),
    );
    // The project's listing (the catalog's copy of the rows, vouching for nothing) reads it.
    let a = p.cmd().args(["--json", "gates"]).assert().success();
    let v = stdout_json(&a);
    let left = v
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == "iso")
        .unwrap()["time_left_seconds"]
        .as_i64();
    assert!(left.is_some_and(|s| (3000..=3600).contains(&s)), "{v}");
    // The run's own listing checks the gate against its sealed log: the deadline the log
    // gives it (two hours), marked tampered, never the row's.
    let a = run.cmd().args(["--json", "gates"]).assert().success();
    let v = stdout_json(&a);
    let g = v
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == "iso")
        .unwrap();
    assert_eq!(g["integrity"]["state"], "tampered", "{v}");
    let left = g["time_left_seconds"].as_i64();
    assert!(left.is_some_and(|s| (6600..=7200).contains(&s)), "{v}");
}

/// Now plus some hours, in ISO 8601 with `T` and `Z`.
fn chrono_like_now_plus_hours(h: i64) -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("+{h} hour"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn init_quiet_prints_the_id_alone(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let a = p
        .cmd()
        .args(["init", "-q"])
        .args(p.backend_flag())
        .assert()
        .success();
    let id = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert_eq!(id.lines().count(), 1, "{id}");
    let id = id.trim();
    assert!(p.root().join(".prose/runs").join(id).is_dir());
    p.cmd()
        .args(["--run", id, "bind", "x", "1"])
        .assert()
        .success();
}

#[test]
fn help_names_every_exit_code() {
    let p = Project::new();
    for flag in ["-h", "--help"] {
        let a = p.cmd().arg(flag).assert().success();
        let out = String::from_utf8_lossy(&a.get_output().stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for code in [
            "5 gate rejected",
            "6 gate timed out",
            "7 gate still pending",
            "8 a",
            "9 tampered",
            "10 unattested",
            "75 busy",
        ] {
            assert!(out.contains(code), "{flag}: {code} missing:\n{out}");
        }
        assert!(out.contains("JSON Lines"), "{out}");
    }
}

on_both!(concurrent_appends_and_merges_all_land_and_versions_guard_writes);

fn concurrent_appends_and_merges_all_land_and_versions_guard_writes(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    // Sixteen subagents append to one root list at once, and merge into one object.
    let children: Vec<_> = (0..16)
        .flat_map(|i| {
            let mut append = run.std_cmd();
            append.args(["bind", "findings", "--append", &format!("{{\"n\": {i}}}")]);
            let mut merge = run.std_cmd();
            merge.args([
                "bind",
                "votes",
                "--merge",
                &format!("{{\"agent{i}\": {i}}}"),
            ]);
            [append, merge]
        })
        .map(|mut c| {
            c.stdout(std::process::Stdio::null())
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
    let list: serde_json::Value = serde_json::from_slice(&run.get("findings", None)).unwrap();
    let mut ns: Vec<i64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["n"].as_i64().unwrap())
        .collect();
    ns.sort_unstable();
    assert_eq!(ns, (0..16).collect::<Vec<_>>(), "every append landed");
    let votes: serde_json::Value = serde_json::from_slice(&run.get("votes", None)).unwrap();
    assert_eq!(votes.as_object().unwrap().len(), 16, "{votes}");
    // A plain string appends as a string; null removes a key.
    run.cmd()
        .args(["bind", "findings", "--append", "plain words"])
        .assert()
        .success();
    let list: serde_json::Value = serde_json::from_slice(&run.get("findings", None)).unwrap();
    assert_eq!(list[16], "plain words");
    run.cmd()
        .args(["bind", "votes", "--merge", "{\"agent0\": null}"])
        .assert()
        .success();
    let votes: serde_json::Value = serde_json::from_slice(&run.get("votes", None)).unwrap();
    assert!(votes.get("agent0").is_none());

    // Compare-and-set: the version read is the version written against.
    let version = |name: &str| {
        let a = run.cmd().args(["--json", "get", name]).assert().success();
        stdout_json(&a)["version"].as_i64().unwrap()
    };
    let v = version("votes");
    run.cmd()
        .args(["bind", "votes", "{}", "--if-version", &v.to_string()])
        .assert()
        .success();
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "bind",
            "votes",
            "{\"stale\": 1}",
            "--if-version",
            &v.to_string(),
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    // A raw writer's UPDATE moves the version too, so a stale compare-and-set fails after it.
    let v = version("votes");
    run.view().raw(
        "UPDATE bindings SET value = '{\"raw\": true}' WHERE name = 'votes'",
        "UPDATE openprose.bindings SET value = '{\"raw\": true}' WHERE run_id = '$RUN' AND name = 'votes'",
    );
    assert!(version("votes") > v);
    let before = run.snapshot();
    let a = run
        .cmd()
        .args([
            "bind",
            "votes",
            "--merge",
            "{\"x\": 1}",
            "--if-version",
            &v.to_string(),
        ])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    assert_eq!(run.snapshot(), before);
    // --if-version 0: only if the binding does not exist yet.
    run.cmd()
        .args(["bind", "fresh", "one", "--if-version", "0"])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["bind", "fresh", "two", "--if-version", "0"])
        .assert()
        .failure();
    assert_eq!(code(&a), 4);
    // Wrong shapes are refused and change nothing.
    let before = run.snapshot();
    for (args, want) in [
        (vec!["bind", "fresh", "--append", "x"], 4), // not JSON
        (vec!["bind", "votes", "--append", "x"], 4), // an object, not an array
        (vec!["bind", "findings", "--merge", "{\"a\": 1}"], 4), // an array, not an object
        (vec!["bind", "votes", "--merge", "[1]"], 2), // the patch is not an object
        (vec!["bind", "votes", "--merge", "{bad"], 2),
        (vec!["bind", "votes", "v", "--append", "x"], 2),
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), want, "{args:?}: {}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{args:?}");
    }
}

on_both!(a_decided_gate_opens_again_as_its_next_instance);

fn a_decided_gate_opens_again_as_its_next_instance(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let create = |prompt: &str, extra: &[&str]| {
        run.cmd()
            .args(["--json", "gates", "create", "deploy", "--prompt", prompt])
            .args(extra)
            .assert()
    };
    create("Deploy v1?", &[]).success();
    run.cmd()
        .args([
            "reject", "deploy", "--yes", "--as", "raymond", "--reason", "not yet",
        ])
        .assert()
        .success();
    // Without --reopen the id stays taken; with it, the gate opens as instance 2.
    let before = run.snapshot();
    let a = create("Deploy v2?", &[]).failure();
    assert_eq!(code(&a), 4);
    assert!(stderr(&a).contains("--reopen"), "{}", stderr(&a));
    assert_eq!(run.snapshot(), before);
    let a = create("Deploy v2?", &["--reopen"]).success();
    let v = stdout_json(&a);
    assert_eq!(v["instance"], 2, "{v}");
    assert_eq!(v["status"], "pending");
    // The spec's own SQL reads the current instance from the gates row.
    assert_eq!(run.view().gate("deploy").0, "pending");
    // A pending gate is not opened again: the same call is a safe retry, another one refused.
    create("Deploy v2?", &["--reopen"]).success();
    let before = run.snapshot();
    let a = create("Deploy v3?", &["--reopen"]).failure();
    assert_eq!(code(&a), 4);
    assert_eq!(run.snapshot(), before);
    // The new instance is decided on its own, and wait sees it.
    run.cmd()
        .args(["approve", "deploy", "--yes", "--as", "raymond"])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "wait", "deploy"])
        .assert()
        .success();
    // The log tells both instances apart, and verify is satisfied with each.
    let ev = run.view().events("deploy");
    let decided: Vec<(String, i64)> = ev
        .iter()
        .filter(|e| e.0 == "approved" || e.0 == "rejected")
        .map(|e| (e.0.clone(), e.2["instance"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        decided,
        vec![("rejected".to_string(), 1), ("approved".to_string(), 2)]
    );
    p.cmd().args(["gates", "verify"]).assert().success();
    // The first instance is kept, as it ended.
    let (sqlite, pg) = (
        "SELECT status FROM gate_instances WHERE gate_id = 'deploy' AND instance = 1",
        "SELECT status FROM openprose.gate_instances WHERE gate_id = 'deploy' AND instance = 1",
    );
    let status: String = match &run.pg_url {
        Some(url) => postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .query_one(pg, &[])
            .unwrap()
            .get(0),
        None => run.conn().query_row(sqlite, [], |r| r.get(0)).unwrap(),
    };
    assert_eq!(status, "rejected");
    // A timed-out gate opens again too (on_reject: retry).
    run.cmd()
        .args([
            "gates",
            "create",
            "soon",
            "--prompt",
            "p",
            "--timeout",
            "1s",
        ])
        .assert()
        .success();
    advance_clock(p.root(), 2);
    assert_eq!(
        code(&run.cmd().args(["gates", "wait", "soon"]).assert().failure()),
        6
    );
    run.cmd()
        .args([
            "gates",
            "create",
            "soon",
            "--prompt",
            "p",
            "--reopen",
            "--timeout",
            "1h",
        ])
        .assert()
        .success();
    let a = run
        .cmd()
        .args(["gates", "wait", "soon", "--timeout", "1s"])
        .assert()
        .failure();
    assert_eq!(
        code(&a),
        7,
        "the new instance is pending, not the old timeout"
    );
}
