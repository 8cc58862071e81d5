//! The domain's vocabulary, shared by commands and stores: binding kinds, execution statuses,
//! the rules for names and run ids, and the one timestamp format.

pub use crate::cli::{Kind, Status};
use crate::error::{shown, usage};
use anyhow::Result;

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::Output => "output",
            Kind::Let => "let",
            Kind::Const => "const",
        }
    }
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Executing => "executing",
            Status::Started => "started",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Iteration => "iteration",
            Status::Joined => "joined",
            Status::Exited => "exited",
            Status::Retry => "retry",
        }
    }

    /// Whether the record marks something ending (its time goes to `completed_at`) rather
    /// than beginning or waiting (its time goes to `started_at`). Every record prose-state
    /// appends carries exactly one of the two, so an event's time is
    /// `COALESCE(completed_at, started_at)`.
    pub fn is_ending(self) -> bool {
        matches!(
            self,
            Status::Completed
                | Status::Failed
                | Status::Skipped
                | Status::Iteration
                | Status::Joined
                | Status::Exited
        )
    }
}

/// The longest binding name accepted: its attachment file name (`{name}__{execution_id}.md`)
/// must stay under the 255-byte file name limit of common filesystems.
pub const MAX_NAME_BYTES: usize = 200;

/// Checks a binding name. Names become attachment file names, so nothing that could leave
/// `attachments/` or hide there is allowed: the first character is a letter or `_`, the rest
/// letters, digits, `_`, `.` or `-`, with no `..`. The spec's `anon_001` and
/// `research.findings` are valid.
pub fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(usage(format!(
            "invalid binding name ({why}): {}",
            shown(name)
        )))
    };
    let Some(first) = name.chars().next() else {
        return bad("empty");
    };
    if name.len() > MAX_NAME_BYTES {
        return bad(&format!("longer than {MAX_NAME_BYTES} bytes"));
    }
    if !(first.is_alphabetic() || first == '_') {
        return bad("must start with a letter or _");
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return bad(&format!("character {c:?} not allowed"));
    }
    if name.contains("..") {
        return bad("contains ..");
    }
    Ok(())
}

/// Checks a run id given to `init --run-id`: it becomes a directory name under
/// `.prose/runs/`, so letters, digits, `_`, `.` and `-` only, starting with a letter or digit.
pub fn check_run_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !id.contains("..");
    if ok {
        Ok(())
    } else {
        Err(usage(format!(
            "invalid run id (letters, digits, _ . - only, at most 128, starting with a letter or digit): {}",
            shown(id)
        )))
    }
}

/// A new run id in the spec's format `{YYYYMMDD}-{HHMMSS}-{random6}`.
pub fn new_run_id() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let suffix: String = (0..6)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{}-{suffix}", chrono::Utc::now().format("%Y%m%d-%H%M%S"))
}

/// Now, in UTC, in the exact text form of SQLite's `datetime('now')`, so that values written
/// by prose-state and by the spec's raw SQL compare and sort together.
pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

/// Checks that metadata is a JSON object; returns it unchanged (stored as given).
pub fn check_metadata(text: &str) -> Result<()> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(other) => Err(usage(format!(
            "invalid --metadata (must be a JSON object, got {}): {}",
            json_type(&other),
            shown(text)
        ))),
        Err(e) => Err(usage(format!(
            "invalid --metadata (not JSON: {e}): {}",
            shown(text)
        ))),
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "research",
            "anon_001",
            "research.findings",
            "_x",
            "résumé",
            "a-b",
        ] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "../x", "a/b", "a\\b", "a..b", ".hidden", "a\0b", "a\nb", "1abc", "a b",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"a".repeat(MAX_NAME_BYTES + 1)).is_err());
    }

    #[test]
    fn run_ids() {
        assert!(check_run_id(&new_run_id()).is_ok());
        assert_eq!(new_run_id().len(), "20260116-143052-a7b3c9".len());
        for bad in ["", "..", "../x", "a/b", "-x", ".x", "a..b"] {
            assert!(check_run_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn metadata() {
        assert!(check_metadata(r#"{"a": 1}"#).is_ok());
        for bad in ["[]", "1", "\"x\"", "{", "null", ""] {
            assert!(check_metadata(bad).is_err(), "{bad:?}");
        }
    }
}
