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

/// The lines of a guide's ```sh blocks under one `## ` heading.
fn section_lines(markdown: &str, heading: &str) -> Vec<String> {
    let start = markdown
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading}"));
    let rest = &markdown[start + 4..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    command_lines(&rest[..end])
}

/// Runs lines in one shell in the project, with the binary on PATH; stdout on success.
fn play(p: &Project, lines: &[String]) -> String {
    let bin_dir = p.root().join(".bin");
    if !bin_dir.exists() {
        std::fs::create_dir_all(&bin_dir).unwrap();
        std::os::unix::fs::symlink(BIN, bin_dir.join("prose-state")).unwrap();
    }
    let mut script = String::from("set -euo pipefail\n");
    for l in lines {
        script.push_str(&checked(l));
    }
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
    assert!(
        out.status.success(),
        "{script}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Issue 28, item 1: the VM guide's block recipe, followed word for word, leaves the block
/// closed, and `resume` continues after it.
#[test]
fn the_guides_block_recipe_leaves_no_block_open() {
    let p = Project::new();
    p.write("program.prose", b"do process(chunk)\n");
    let vm = guide(&p, "vm");
    let mut lines = section_lines(&vm, "Start");
    lines.extend(section_lines(&vm, "Blocks and frames"));
    lines.push("prose-state --json resume".into());
    let out = play(&p, &lines);
    let doc: serde_json::Value =
        serde_json::from_str(out.lines().rfind(|l| l.starts_with('{')).unwrap()).unwrap();
    // The block and the `if` after it are both ended, and what the `if`'s body bound is
    // read at the root (issue 45, items 1 and 4).
    assert!(doc["position"]["current"].is_null(), "{doc}");
    assert!(
        doc["position"]["open"].as_array().unwrap().is_empty(),
        "{doc}"
    );
    assert_eq!(
        doc["position"]["after"]["statement_text"],
        "if **the plan needs work**:"
    );
    assert_eq!(doc["position"]["after"]["status"], "completed");
    assert!(out.contains("Ship as planned"), "{out}");
}

/// Issue 28, item 2: the guides name only the language's on_reject actions (a bare string is
/// a throw), and say what a bare string means.
#[test]
fn the_guides_use_only_the_languages_on_reject_actions() {
    let p = Project::new();
    let vm = guide(&p, "vm");
    let mut seen = 0;
    for line in command_lines(&vm) {
        let Some((_, rest)) = line.split_once("--on-reject '") else {
            continue;
        };
        let action = rest.split('\'').next().unwrap();
        let word = action.split_whitespace().next().unwrap_or("");
        assert!(
            ["throw", "retry", "continue", "session"].contains(&word),
            "not an on_reject action of the language: {action:?}"
        );
        seen += 1;
    }
    assert!(seen >= 2);
    assert!(!vm.contains("--on-reject stop"));
    assert!(
        vm.contains("A `\"message\"` alone is a `throw` of it"),
        "the guide says what a message alone means"
    );
    // The spec logs on completion: no statement is logged at its start.
    assert!(!vm.contains("when a statement starts"));
}

/// Issue 28, item 3: subagents write without files of fixed names, so parallel ones sharing a
/// directory cannot overwrite each other; `--scope` fills in where a persistent agent's
/// memory lives.
#[test]
fn subagents_write_no_files_and_name_their_agents_scope() {
    let p = Project::new();
    let run = p.init();
    let printed = |args: &[&str]| {
        let out = run
            .cmd()
            .args(["guide", "subagent"])
            .args(args)
            .assert()
            .success();
        String::from_utf8(out.get_output().stdout.clone()).unwrap()
    };
    let before: Vec<_> = std::fs::read_dir(p.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".home")
        .collect();
    let mut blocks = Vec::new();
    for (name, agent, scope) in [
        ("a", "scout", "execution"),
        ("b", "keeper", "project"),
        ("c", "mentor", "user"),
    ] {
        let g = printed(&["--name", name, "--agent", agent, "--scope", scope]);
        let lines = command_lines(&g);
        let agent_lines: Vec<_> = lines.iter().filter(|l| l.contains(" agent ")).collect();
        assert_eq!(agent_lines.len(), 3, "{g}");
        for l in agent_lines {
            assert_eq!(
                l.contains(&format!("--scope {scope}")),
                scope != "execution",
                "{l}"
            );
        }
        assert!(
            !g.contains("> output.md") && !g.contains("memory.md"),
            "{g}"
        );
        blocks.push(lines);
    }
    // The three subagents at once, in one directory.
    let children: Vec<_> = blocks
        .into_iter()
        .map(|lines| {
            let script = format!(
                "set -euo pipefail\n{}",
                lines.iter().map(|l| format!("{l}\n")).collect::<String>()
            );
            let mut c = std::process::Command::new("bash");
            c.arg("-c")
                .arg(script)
                .current_dir(p.root())
                .env("HOME", common::test_home(p.root()));
            c.env(
                "PATH",
                format!(
                    "{}:{}",
                    std::path::Path::new(BIN).parent().unwrap().display(),
                    std::env::var("PATH").unwrap()
                ),
            );
            for var in common::CLEARED_ENV {
                c.env_remove(var);
            }
            c.spawn().unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // The test's HOME lives in the project directory: the user-scope agent store is there.
    let after: Vec<_> = std::fs::read_dir(p.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".home")
        .collect();
    assert_eq!(
        before, after,
        "a subagent wrote a file in the shared directory"
    );
    for name in ["a", "b", "c"] {
        assert_eq!(
            run.get(name, None),
            b"# Findings\nEverything the VM asked for, in full.\n"
        );
    }
    let memory = |scope: &str, agent: &str| {
        let out = run
            .cmd()
            .args(["--json", "agent", "--scope", scope, "memory", agent])
            .assert()
            .success();
        common::stdout_json(&out)["memory"].clone()
    };
    assert_eq!(memory("execution", "scout"), "What I know so far.\n");
    assert_eq!(memory("project", "keeper"), "What I know so far.\n");
    assert_eq!(memory("user", "mentor"), "What I know so far.\n");
}

/// Issue 28, item 7: every guide fits the same bound as `resume`.
#[test]
fn every_guide_is_bounded() {
    let p = Project::new();
    for who in ["vm", "subagent", "approver"] {
        let g = guide(&p, who);
        assert!(g.len() <= 16 * 1024, "guide {who}: {} bytes", g.len());
    }
}
