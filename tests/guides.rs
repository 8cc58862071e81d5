//! The guides (`prose-state guide vm|subagent|approver`) cannot rot: every command line in
//! them runs, as written, against a real run. The VM's guide is played from top to bottom in
//! one shell; each subagent guide it prints is played where it is printed; each approver line
//! is played by a person (PROSE_PRINCIPAL=alice) just before the VM waits on the gate it names.
//! A line that says `# exits N` must exit N; every other line must succeed.

use crate::common::{self, Project, BIN};

const GATES: &[&str] = &["deploy", "review"];

/// The printed guide, as the binary prints it.
fn guide(p: &Project, who: &str) -> String {
    let out = p.cmd().args(["guide", who]).assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

/// The command lines of a guide's ```sh blocks.
fn command_lines(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in markdown.lines() {
        match (inside, line.trim_end()) {
            (false, "```sh") => inside = true,
            (true, "```") => inside = false,
            (true, l) if !l.trim().is_empty() => lines.push(l.to_string()),
            _ => {}
        }
    }
    assert!(!inside, "an unclosed block");
    lines
}

/// A line as the test shell runs it: `cmd   # exits N` must exit N.
fn checked(line: &str) -> String {
    let quoted = format!("'{}'", line.replace('\'', "'\\''"));
    match line.split_once("# exits ") {
        Some((cmd, rest)) => {
            let code: u8 = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap();
            format!(
                "echo \"+ \"{quoted}\nset +e\n{cmd}\nrc=$?\nset -e\n[ \"$rc\" = {code} ] || {{ echo \"exited $rc, not {code}: \"{quoted} >&2; exit 1; }}\n"
            )
        }
        None => format!("echo \"+ \"{quoted}\n{line}\n"),
    }
}

/// Which gate a line waits for, or names.
fn gate_of(line: &str) -> Option<&'static str> {
    GATES
        .iter()
        .copied()
        .find(|g| line.split_whitespace().any(|w| w.trim_matches('"') == *g))
}

#[test]
fn every_command_in_the_guides_runs() {
    let p = Project::new();
    let bin_dir = p.root().join(".bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.join("prose-state")).unwrap();
    p.write("program.prose", b"let research = session: researcher\n");

    let vm = command_lines(&guide(&p, "vm"));
    let approver = command_lines(&guide(&p, "approver"));
    let subagent_unfilled = command_lines(&guide(&p, "subagent"));
    assert!(vm.len() > 30 && approver.len() >= 6 && subagent_unfilled.len() >= 4);

    let mut script = String::from("set -euo pipefail\n");
    let mut approver_left: Vec<&String> = approver.iter().collect();
    let mut subagents = 0;
    for line in &vm {
        // A person decides, before the VM waits on the gate.
        if line.contains("gates wait") {
            let gate = gate_of(line);
            let (now, later): (Vec<&String>, Vec<&String>) = approver_left
                .iter()
                .partition(|l| gate_of(l).is_none_or(|g| Some(g) == gate));
            approver_left = later;
            script.push_str("(\nexport PROSE_PRINCIPAL=alice\n");
            for l in now {
                script.push_str(&checked(l));
            }
            script.push_str(")\n");
        }
        script.push_str(&checked(line));
        // The subagent runs the block the VM printed for it, filled in.
        if line.starts_with("prose-state guide subagent") {
            subagents += 1;
            let printed = format!("subagent{subagents}.md");
            script.push_str(&format!(
                "{line} > {printed}\n\
                 grep -q -- '--run '\"$PROSE_RUN\" {printed}\n\
                 awk '/^```sh$/{{f=1;next}} /^```$/{{f=0}} f' {printed} > subagent{subagents}.sh\n\
                 [ -s subagent{subagents}.sh ]\n\
                 ( set -euo pipefail; set -x; . ./subagent{subagents}.sh )\n"
            ));
        }
    }
    script.push_str("(\nexport PROSE_PRINCIPAL=alice\n");
    for l in approver_left {
        script.push_str(&checked(l));
    }
    script.push_str(")\necho GUIDES-RAN\n");
    assert!(subagents >= 2, "the VM guide spawns subagents");

    let mut c = std::process::Command::new("bash");
    c.arg("-c")
        .arg(&script)
        .current_dir(p.root())
        .env("HOME", common::test_home(p.root()))
        .env(
            "PATH",
            format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
        )
        .stdin(std::process::Stdio::null());
    for var in common::CLEARED_ENV {
        c.env_remove(var);
    }
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("GUIDES-RAN"),
        "the guides' commands failed:\n{script}\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // What the guides did is in the run: the subagents' outputs, the agent's memory, the
    // gates decided by the person and reopened by the VM, the run interrupted.
    let run_id = std::fs::read_dir(p.root().join(".prose/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    let get = |args: &[&str]| {
        let out = p
            .cmd()
            .args(["--run", &run_id, "--json"])
            .args(args)
            .assert()
            .success();
        common::stdout_json(&out)
    };
    assert_eq!(
        get(&["get", "research"])["value"],
        "# Findings\nEverything the VM asked for, in full.\n"
    );
    assert_eq!(
        get(&["agent", "memory", "captain"])["memory"],
        "What I know so far.\n"
    );
    let review = get(&["gates", "show", "review", "--as", "bob"]);
    assert_eq!(
        (review["status"].as_str(), review["instance"].as_i64()),
        (Some("pending"), Some(2))
    );
    let deploy = get(&["gates", "show", "deploy", "--as", "bob"]);
    assert_eq!(
        (deploy["status"].as_str(), deploy["resolved_by"].as_str()),
        (Some("approved"), Some("alice"))
    );
}
