//! The worked examples of the documentation, run line by line as they are written.

use crate::common::{on_both, sh, Backend, Project};

on_both!(the_history_worked_example_runs_as_written);

/// The first ```sh block after `marker` in `doc`, as lines a shell runs one by one.
fn example(doc: &str, marker: &str) -> Vec<String> {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(doc))
        .unwrap();
    let at = text.find(marker).expect("the worked example");
    text[at..]
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap()
        .replace("\\\n", " ")
        .lines()
        .map(str::to_string)
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// docs/history.md's worked example: each line's exit code is the one its comment says (0
/// when it says none), and what it says it shows is there.
fn the_history_worked_example_runs_as_written(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let lines = example("docs/history.md", "**A worked example: a bad draft");
    let mut script = String::from("PATH=\"$(dirname \"$BIN\"):$PATH\"\n");
    for l in &lines {
        script += &format!("{l}\necho \"EXIT $?\"\n");
    }
    let out = sh(p.root(), &script).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let codes: Vec<i32> = text
        .lines()
        .filter_map(|l| l.strip_prefix("EXIT "))
        .map(|c| c.trim().parse().unwrap())
        .collect();
    let want: Vec<i32> = lines
        .iter()
        .map(|l| {
            l.split("# exit ")
                .nth(1)
                .map_or(0, |c| c.split(':').next().unwrap().trim().parse().unwrap())
        })
        .collect();
    assert_eq!(
        codes,
        want,
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the page says the example shows.
    assert!(text.contains("agent:writer"), "{text}");
    assert!(
        text.contains("12→ let draft = session: writer ✓ · agent:vm"),
        "{text}"
    );
    assert!(text.contains("Gates decided by then: review"), "{text}");
    assert!(text.contains("STALE"), "{text}");
    assert!(text.contains("→ reopen"), "{text}");
}
