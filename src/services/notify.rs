//! Notifications: a command of the project's, run when a gate opens, is decided or times out.
//!
//! The rules (`store::rules`) queue a notice where they change a gate; the store hands what a
//! transaction queued here once it is durable (`store::effects`), and drops what a transaction
//! that never committed queued. So a notice is sent for exactly the changes that were
//! committed, on either backend, and the rule of what is notified lives in the rules alone.
//!
//! The command is `PROSE_GATE_HOOK` (run by `sh -c`), else `.prose/hooks/on-gate` when that
//! file exists. Each notice runs it once, with the notice's JSON on stdin and its event, run
//! and gate in the environment, in a session of its own, never waited for: it runs after the
//! commit, and nothing it does (hang, fail, be missing) can block or fail the write. A run
//! that exits non-zero, or cannot start, is logged in `.prose/hooks/on-gate.log`, which also
//! takes the command's own output.

use crate::store::effects::Notice;
use std::ffi::OsString;
use std::io::{Seek, Write};
use std::path::Path;

/// The environment the hook does not inherit: credentials of this process's own.
const SECRET_ENV: &[&str] = &[
    "OPENPROSE_POSTGRES_URL",
    "DATABASE_URL",
    "PGPASSWORD",
    "PROSE_TOKEN",
];

/// The file a project's hook is, under `.prose/`.
pub const HOOK_FILE: &str = "hooks/on-gate";
/// Its log, under `.prose/`.
pub const LOG_FILE: &str = "hooks/on-gate.log";

/// What announces a commit's notices to the hook of the project whose `.prose/` is
/// `prose_dir` (`Context` wires it into the stores it opens).
pub fn announcer(prose_dir: &Path) -> impl Fn(Vec<Notice>) + Send + Sync + 'static {
    let prose = prose_dir.to_path_buf();
    move |notices| deliver(&prose, notices)
}

/// Sends what a transaction just committed (the store calls it, once the commit is durable:
/// see `store::effects`).
fn deliver(prose: &Path, notices: Vec<Notice>) {
    if notices.is_empty() {
        return;
    }
    let prose = prose.to_path_buf();
    // The hook runs in the project's root: its path, and the log's, must not depend on ours.
    let prose = std::path::absolute(&prose).unwrap_or(prose);
    let Some(command) = hook(&prose) else { return };
    for n in &notices {
        let Err(e) = spawn(&prose, &command, n) else {
            continue;
        };
        if let Ok(mut log) = open_log(&prose) {
            let _ = writeln!(
                log,
                "{} on-gate {} run {} gate {}: could not start: {e:#}",
                crate::model::now().replacen(' ', "T", 1) + "Z",
                n.event.as_str(),
                n.gate.run_id.as_deref().unwrap_or(""),
                n.gate.id
            );
        }
    }
}

/// The command to run: `PROSE_GATE_HOOK` by the shell, else the project's hook file.
fn hook(prose: &Path) -> Option<Vec<OsString>> {
    if let Some(cmd) = std::env::var_os("PROSE_GATE_HOOK").filter(|c| !c.is_empty()) {
        return Some(vec!["/bin/sh".into(), "-c".into(), cmd]);
    }
    let file = prose.join(HOOK_FILE);
    // Run by its path, as the user put it there (sh reports one that is not executable).
    std::fs::symlink_metadata(&file)
        .is_ok()
        .then(|| vec![file.into_os_string()])
}

/// Runs after the hook: a non-zero exit is logged with the notice it was for.
const WRAPPER: &str = r#""$@"; s=$?; [ "$s" -eq 0 ] || printf '%s on-gate %s run %s gate %s: exit %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$PROSE_GATE_EVENT" "$PROSE_RUN_ID" "$PROSE_GATE_ID" "$s" >&2"#;

fn spawn(prose: &Path, command: &[OsString], n: &Notice) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let run_id = n.gate.run_id.clone().unwrap_or_default();
    // The gate's page, when the project says where `prose-state serve` is reached.
    let url = gate_page(&run_id, &n.gate.id);
    let mut body = serde_json::json!({
        "event": n.event.as_str(),
        "run_id": run_id,
        "gate": &n.gate,
    });
    if let Some(u) = &url {
        body["url"] = u.as_str().into();
    }
    let stdin = sealed_input(&serde_json::to_vec(&body)?)?;
    let out = open_log(prose)?;
    let mut c = std::process::Command::new("/bin/sh");
    c.arg("-c")
        .arg(WRAPPER)
        .arg("on-gate")
        .args(command)
        .current_dir(
            prose
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("/")),
        )
        .stdin(stdin)
        .stdout(out.try_clone()?)
        .stderr(out)
        .env("PROSE_GATE_EVENT", n.event.as_str())
        .env("PROSE_RUN_ID", &run_id)
        .env("PROSE_GATE_ID", &n.gate.id);
    if let Some(u) = &url {
        c.env("PROSE_GATE_URL", u);
    }
    for var in SECRET_ENV {
        c.env_remove(var);
    }
    // A session of its own: a terminal's hangup or Ctrl-C does not reach it.
    // SAFETY: setsid is async-signal-safe, and nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = c.spawn()?;
    // Reaped by a thread of its own in a long-lived process (the MCP server); a command that
    // exits first leaves it to init.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

/// The notice as a file with no name (read from its start), so that a hook that never
/// reads its stdin cannot block the writer on a full pipe.
fn sealed_input(bytes: &[u8]) -> anyhow::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: a valid C string; the descriptor returned is new and owned by the File.
    let fd = unsafe { libc::memfd_create(c"prose-state-gate".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    f.write_all(bytes)?;
    f.rewind()?;
    Ok(f)
}

fn open_log(prose: &Path) -> std::io::Result<std::fs::File> {
    let path = prose.join(LOG_FILE);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::store::seal::owner_only()
        .create(true)
        .append(true)
        .open(path)
}

/// A gate's page on the approval page (`prose-state serve`), when the project says where it
/// is reached (`PROSE_SERVE_URL`, http or https).
pub fn gate_page(run_id: &str, gate_id: &str) -> Option<String> {
    std::env::var("PROSE_SERVE_URL")
        .ok()
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .map(|base| {
            format!(
                "{}/runs/{}/gates/{}",
                base.trim_end_matches('/'),
                crate::output::url_segment(run_id),
                crate::output::url_segment(gate_id)
            )
        })
}
