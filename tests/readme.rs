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

/// README.md and every page under docs/.
fn pages() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A page's text with its fenced code blocks and inline code spans blanked out: what is left
/// is what a renderer reads as Markdown.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The anchors a page's headings get, by GitHub's rule: the heading's text in lower case,
/// spaces as hyphens, other characters but letters, digits, `_` and `-` dropped; a repeated
/// anchor gets `-1`, `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
                _ => None,
            })
            .collect();
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.push(anchor);
    }
    seen
}

/// Every relative link in README.md and docs/ leads to a file that exists, and every
/// `#anchor` to a heading of its page; and every page under docs/ is linked from the README.
#[test]
fn every_link_in_the_documentation_resolves() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    let mut linked_from_readme = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        let body = prose(&text);
        for (at, _) in body.match_indices("](") {
            let rest = &body[at + 2..];
            let Some(end) = rest.find(')') else {
                broken.push(format!("{}: an unclosed link", page.display()));
                continue;
            };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target, None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            let Ok(file) = file.canonicalize() else {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            };
            if page.ends_with("README.md") {
                linked_from_readme.push(file.clone());
            }
            if let Some(anchor) = anchor {
                let target_text = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&target_text).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    for page in pages().iter().skip(1) {
        if !linked_from_readme.contains(&page.canonicalize().unwrap()) {
            broken.push(format!(
                "{} is not linked from README.md",
                page.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
