//! The worked examples of the documentation, run line by line as they are written.

use crate::common::{on_both, run_documented, Backend, Project};

on_both!(the_history_worked_example_runs_as_written);

/// docs/history.md's worked example: each line's exit code is the one its comment says (0
/// when it says none), and what the page says it shows is there.
fn the_history_worked_example_runs_as_written(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let text = run_documented(
        p.root(),
        "docs/history.md",
        "**A worked example: a bad draft",
        false,
    );
    assert!(text.contains("agent:writer"), "{text}");
    assert!(
        text.contains("12→ let draft = session: writer ✓ · agent:vm"),
        "{text}"
    );
    assert!(text.contains("Gates decided by then: review"), "{text}");
    assert!(text.contains("STALE"), "{text}");
    assert!(text.contains("→ reopen"), "{text}");
}
