//! The README's Quickstart runs as written, in an empty directory, with the binary on PATH.

use crate::common::*;

#[test]
fn the_quickstart_runs_as_written_in_an_empty_directory() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("## Quickstart")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Quickstart section");
    let script = section
        .split("```sh\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("a sh block in the Quickstart");
    let p = Project::new();
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(p.root())
        .env("PATH", path)
        .env_remove("PROSE_RUN")
        .env_remove("PROSE_ROOT")
        .env_remove("OPENPROSE_POSTGRES_URL")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Quickstart failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Binding written: research"), "{stdout}");
    assert!(stdout.contains("Processed chunk into 3 parts"), "{stdout}");
}

/// docs/commands.md is the reference generated from the command-line definition, byte for
/// byte: a change to src/cli.rs that is not carried into it fails here, saying how to refresh.
#[test]
fn the_command_reference_is_generated_from_the_definition() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md");
    let generated = prose_state::cmd::docs::reference();
    if std::env::var_os("PROSE_STATE_BLESS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/commands.md is not the reference src/cli.rs generates; refresh it with: {}",
        prose_state::cmd::docs::REFERENCE_REFRESH
    );
}
