//! Issue 28, item 8: what the binary says about itself is true.

use crate::common::*;

on_both!(
    bind_json_always_reports_the_version,
    approve_with_no_login_name_says_how_to_name_one
);

fn version_of(run: &Run, args: &[&str]) -> i64 {
    let out = run
        .cmd()
        .arg("--json")
        .arg("bind")
        .args(args)
        .assert()
        .success();
    let v = stdout_json(&out);
    v["version"]
        .as_i64()
        .unwrap_or_else(|| panic!("no version: {v}"))
}

fn bind_json_always_reports_the_version(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let first = version_of(&run, &["plain", "one"]);
    let second = version_of(&run, &["plain", "two"]);
    assert!(second > first, "{first} then {second}");
    let appended = version_of(&run, &["list", "--append", "1"]);
    let again = version_of(&run, &["list", "--append", "2"]);
    assert!(again > appended);
    // The version reported is the one `get --json` shows, and --if-version takes.
    let got = stdout_json(
        &run.cmd()
            .args(["--json", "get", "plain"])
            .assert()
            .success(),
    );
    assert_eq!(got["version"].as_i64(), Some(second));
    let checked = version_of(
        &run,
        &["plain", "three", "--if-version", &second.to_string()],
    );
    assert!(checked > second);
}

fn approve_with_no_login_name_says_how_to_name_one(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", "ok?"])
        .assert()
        .success();
    let a = run
        .cmd()
        .env_remove("USER")
        .env_remove("LOGNAME")
        .args(["approve", "deploy", "--yes"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    let err = stderr(&a);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("--as NAME") && err.contains("PROSE_PRINCIPAL=NAME"),
        "{err}"
    );
    assert_eq!(run.view().gate("deploy").0, "pending");
}

/// A typo gets the name it is closest to, in the one line every usage error is.
#[test]
fn typos_get_did_you_mean() {
    let p = Project::new();
    let run = p.init();
    for (args, want) in [
        (&["aprove", "deploy"][..], "did you mean 'approve'?"),
        (
            &[
                "exec-append",
                "--index",
                "1",
                "--text",
                "x",
                "--stauts",
                "completed",
            ][..],
            "did you mean '--status'?",
        ),
        (
            &["bind", "x", "y", "--exec-id", "3"][..],
            "did you mean '--execution-id'?",
        ),
        (&["gates", "wiat", "deploy"][..], "did you mean 'wait'?"),
    ] {
        let a = run.cmd().args(args).assert().failure();
        assert_eq!(code(&a), 2, "{args:?}");
        let err = stderr(&a);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert_eq!(count_rows(&p, &run, "execution", "1 = 1"), 0);
    assert_eq!(count_rows(&p, &run, "bindings", "1 = 1"), 0);
}

/// Every subcommand's help ends with the exit codes (docs/cli.md promises it), and the usage of a
/// gate command reads `[RUN] GATE`.
#[test]
fn every_help_ends_with_the_exit_codes_and_usage_lines_are_true() {
    let p = Project::new();
    let help = |args: &[&str]| {
        let out = p.cmd().args(args).arg("--help").assert().success();
        String::from_utf8(out.get_output().stdout.clone()).unwrap()
    };
    let top = help(&[]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| l.len() > 2 && !l[2..].starts_with(' '))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() > 20, "{commands:?}");
    let mut checked = 0;
    for c in &commands {
        let h = help(&[c]);
        assert!(
            h.trim_end().ends_with("nothing written: retry."),
            "{c} --help:\n{h}"
        );
        checked += 1;
        // And their subcommands'.
        for sub in h
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter(|l| l.len() > 2 && !l[2..].starts_with(' '))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .filter(|s| s != "help")
        {
            let h = help(&[c, &sub]);
            assert!(
                h.trim_end().ends_with("nothing written: retry."),
                "{c} {sub} --help:\n{h}"
            );
            checked += 1;
        }
    }
    assert!(checked > 30);
    for (args, usage) in [
        (
            &["gates", "wait"][..],
            "Usage: prose-state gates wait [OPTIONS] [RUN] GATE\n",
        ),
        (
            &["gates", "show"][..],
            "Usage: prose-state gates show [OPTIONS] [RUN] GATE\n",
        ),
        (
            &["approve"][..],
            "Usage: prose-state approve [OPTIONS] [RUN] GATE\n",
        ),
        (
            &["reject"][..],
            "Usage: prose-state reject [OPTIONS] [RUN] GATE\n",
        ),
    ] {
        assert!(help(args).contains(usage), "{args:?}");
    }
}
