use crate::common::*;

on_both!(
    hostile_binding_names_are_refused_and_nothing_changes,
    get_of_an_invalid_name_is_a_usage_error,
    invalid_utf8_values_are_refused_small_or_large,
    bind_refusals_leave_the_db_unchanged,
    a_busy_timeout_out_of_range_is_a_usage_error,
);

/// Names that could leave attachments/ or are otherwise unusable.
fn hostile_names() -> Vec<String> {
    vec![
        String::new(),
        "../escape".into(),
        "..".into(),
        "a/b".into(),
        "/etc/passwd".into(),
        "a\\b".into(),
        ".hidden".into(),
        "a..b".into(),
        "x\ny".into(),
        "x\ty".into(),
        "x\u{1b}[31m".into(),
        "name with spaces".into(),
        "'; DROP TABLE bindings; --".into(),
        "x' OR '1'='1".into(),
        "\"quoted\"".into(),
        // Linux caps one argument at 128 KiB (MAX_ARG_STRLEN), so this is as long as a name
        // can arrive; names come only from argv.
        "a".repeat(120_000),
        "a".repeat(201),
        "1starts_with_digit".into(),
    ]
}

fn hostile_binding_names_are_refused_and_nothing_changes(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.exec(1, "x", "executing", None);
    run.bind("keep", "me", None);
    let before = run.snapshot();
    for name in hostile_names() {
        for extra in [
            vec![],
            vec!["--attach-over", "0"],
            vec!["--execution-id", "1"],
        ] {
            let a = run
                .cmd()
                .arg("bind")
                .args(&extra)
                .args(["--", &name, "value"])
                .assert()
                .failure();
            let shown: String = name.chars().take(20).collect();
            assert_eq!(code(&a), 2, "{shown:?}: {}", stderr(&a));
            let err = stderr(&a);
            assert!(err.contains("invalid binding name"), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.len() < 400,
                "error message is short even for a 1 MB name"
            );
            assert_eq!(run.snapshot(), before, "{shown:?}");
        }
    }
    assert!(!p.root().join("escape.md").exists());
    assert!(!run.dir.join("escape.md").exists());
}

fn get_of_an_invalid_name_is_a_usage_error(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    for name in hostile_names() {
        let a = run.cmd().args(["get", "--", &name]).assert().failure();
        assert_eq!(code(&a), 2, "{}", stderr(&a));
        assert!(stderr(&a).contains("invalid binding name"));
        assert_eq!(stderr(&a).lines().count(), 1);
    }
}

fn invalid_utf8_values_are_refused_small_or_large(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    let before = run.snapshot();
    let mut big = vec![b'a'; 300_000];
    big[250_000] = 0xff;
    let mut truncated = "é".repeat(100).into_bytes();
    truncated.push(0xe2); // the first byte of a three-byte character, then the end
    for value in [
        b"\xff\xfe".to_vec(),
        b"ok then \xc3".to_vec(),
        big,
        truncated,
    ] {
        for extra in [vec![], vec!["--attach-over", "10"]] {
            let a = run
                .cmd()
                .args(["bind", "v"])
                .args(&extra)
                .write_stdin(value.clone())
                .assert()
                .failure();
            assert_eq!(code(&a), 2);
            assert!(stderr(&a).contains("not valid UTF-8"), "{}", stderr(&a));
            assert_eq!(run.snapshot(), before);
        }
    }
    let f = p.write("bin.dat", b"\x00\x01\xff");
    let a = run
        .cmd()
        .args(["bind", "v", "--file"])
        .arg(&f)
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
    assert_eq!(run.snapshot(), before);
}

fn bind_refusals_leave_the_db_unchanged(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    let before = run.snapshot();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["bind", "v", "--file", "no/such/file"],
            3,
            "--file not found: no/such/file",
        ),
        (
            &["bind", "v", "x", "--execution-id", "7"],
            3,
            "execution not found: 7",
        ),
        (
            &["bind", "v", "x", "--execution-id", "0"],
            2,
            "--execution-id",
        ),
        (
            &["bind", "v", "x", "--execution-id", "-5"],
            2,
            "--execution-id",
        ),
        (
            &["bind", "v", "x", "--execution-id", "18446744073709551616"],
            2,
            "--execution-id",
        ),
        (&["bind", "v", "x", "--kind", "var"], 2, "--kind"),
        (
            &["bind", "v", "x", "--file", "other"],
            2,
            "cannot be used with",
        ),
        (
            &["bind", "v", "x", "--attach-over", "-1"],
            2,
            "--attach-over",
        ),
        (
            &["bind", "v", "x", "--attach-over", "99999999999999"],
            2,
            "--attach-over",
        ),
        (&["bind", "v", "--file", "."], 2, "--file is a directory: ."),
    ];
    for (args, want, msg) in cases {
        let a = run.cmd().args(*args).assert().failure();
        assert_eq!(code(&a), *want, "{args:?}: {}", stderr(&a));
        assert!(stderr(&a).contains(msg), "{args:?}: {}", stderr(&a));
        assert_eq!(stderr(&a).lines().count(), 1, "{}", stderr(&a));
        assert_eq!(run.snapshot(), before, "{args:?}");
    }
}

#[test]
fn invalid_utf8_in_arguments_is_a_usage_error() {
    use std::os::unix::ffi::OsStrExt;
    let p = Project::new();
    let run = p.init();
    let before = run.snapshot();
    let bad = std::ffi::OsStr::from_bytes(b"x\xff");
    for args in [
        vec![std::ffi::OsStr::new("bind"), bad, std::ffi::OsStr::new("v")],
        vec![std::ffi::OsStr::new("bind"), std::ffi::OsStr::new("v"), bad],
        vec![std::ffi::OsStr::new("get"), bad],
    ] {
        let a = run.cmd().args(&args).assert().failure();
        assert_eq!(code(&a), 2);
        assert_eq!(run.snapshot(), before);
    }
    let a = p
        .cmd()
        .arg("--run")
        .arg(bad)
        .args(["get", "x"])
        .assert()
        .failure();
    assert_eq!(code(&a), 2);
}

/// `--busy-timeout` (and PROSE_STATE_BUSY_TIMEOUT) past what SQLite and PostgreSQL take
/// (2147483647 ms) is exit 2 with one line naming the value and the range, on every command
/// that opens a run: never a panic (101) or a server error (1). The largest value works.
fn a_busy_timeout_out_of_range_is_a_usage_error(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    let before = run.snapshot();
    let commands: &[&[&str]] = &[
        &["bind", "x", "1"],
        &["get", "keep"],
        &["gates"],
        &["query", "SELECT 1"],
        &["stats"],
        &["doctor"],
        &["resume"],
    ];
    for bad in [
        "2147483648",
        "18446744073709551615",
        "99999999999999999999",
        "-1",
    ] {
        for args in commands {
            for by_env in [false, true] {
                let mut c = run.cmd();
                if by_env {
                    c.env("PROSE_STATE_BUSY_TIMEOUT", bad);
                } else {
                    c.arg(format!("--busy-timeout={bad}"));
                }
                let a = c.args(*args).assert().failure();
                let err = stderr(&a);
                assert_eq!(code(&a), 2, "{bad} {args:?} env={by_env}: {err}");
                assert_eq!(err.lines().count(), 1, "{err}");
                assert!(err.contains(bad) && err.contains("busy-timeout"), "{err}");
                if !bad.starts_with('-') && bad.len() < 20 {
                    assert!(err.contains("2147483647"), "{err}");
                }
            }
        }
    }
    assert_eq!(run.snapshot(), before);
    run.cmd()
        .args(["--busy-timeout", "2147483647", "bind", "x", "1"])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_STATE_BUSY_TIMEOUT", "2147483647")
        .args(["get", "x"])
        .assert()
        .success();
    // The MCP server takes the same option, and refuses it the same way at start.
    let a = p
        .cmd()
        .args([
            "mcp",
            "--role",
            "vm",
            "--agent",
            "bot",
            "--busy-timeout",
            "2147483648",
        ])
        .write_stdin("")
        .assert()
        .failure();
    assert_eq!(code(&a), 2, "{}", stderr(&a));
}
