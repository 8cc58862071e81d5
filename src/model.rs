//! The domain's vocabulary, shared by commands and stores: binding kinds, execution statuses,
//! the rules for names and run ids, and the one timestamp format.

use crate::error::{shown, usage};
use anyhow::Result;
pub use chrono::Timelike;

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

/// Checks an idempotency key (`exec-append --key`): 1 to 200 bytes, no control characters.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > 200 || key.chars().any(char::is_control) {
        return Err(usage(format!(
            "invalid --key (1 to 200 bytes, no control characters): {}",
            shown(key)
        )));
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

/// What kind of name becomes a path: each has its own grammar, and every one goes through
/// [`path_in`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathName {
    /// A binding name ([`check_name`]): part of an attachment's file name.
    Binding,
    /// An agent name ([`check_name`]).
    Agent,
    /// A run id ([`check_run_id`]): a directory under `.prose/runs/`.
    Run,
    /// A file name composed from checked parts (an attachment's `{name}@{scope}.{unique}.md`).
    File,
}

impl PathName {
    fn what(self) -> &'static str {
        match self {
            PathName::Binding => "binding name",
            PathName::Agent => "agent name",
            PathName::Run => "run id",
            PathName::File => "file name",
        }
    }
}

/// The longest name that becomes one path component: the file name limit of common
/// filesystems.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// The one place a name becomes a path: `dir/name`, whatever the name's source (the command
/// line, MCP, a URL, an import, a row read back from a database, which raw SQL may have
/// written). Refused (exit 2, naming it) unless the name is of its kind's grammar and is one
/// plain path component that stays in `dir` and hides nothing there: never empty, `.`, `..` or
/// `.`-led, never a separator, NUL, control, bidirectional or zero-width character, never an
/// absolute path, at most 255 bytes.
pub fn path_in(dir: &std::path::Path, name: &str, kind: PathName) -> Result<std::path::PathBuf> {
    match kind {
        PathName::Binding => check_name(name)?,
        PathName::Agent => check_name_as(name, "agent name")?,
        PathName::Run => check_run_id(name)?,
        PathName::File => {}
    }
    check_segment(name, kind.what())?;
    Ok(dir.join(name))
}

/// Whether `name` is one plain path component that stays where it is put (see [`path_in`]).
fn check_segment(name: &str, what: &str) -> Result<()> {
    let bad = |why: &str| Err(usage(format!("invalid {what} ({why}): {}", shown(name))));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_SEGMENT_BYTES {
        return bad(&format!("longer than {MAX_SEGMENT_BYTES} bytes"));
    }
    if name.starts_with('.') {
        return bad("starts with .");
    }
    if let Some(c) = name
        .chars()
        .find(|&c| matches!(c, '/' | '\\') || c.is_control() || is_invisible(c))
    {
        return bad(&format!("character {c:?} not allowed"));
    }
    let mut parts = std::path::Path::new(name).components();
    match (parts.next(), parts.next()) {
        (Some(std::path::Component::Normal(n)), None) if n == name => Ok(()),
        _ => bad("not one plain path component"),
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
    format!("{}-{suffix}", Timestamp::now().0.format("%Y%m%d-%H%M%S"))
}

/// A status column's vocabulary: the known values as variants, converted at the row
/// boundary, and `Other` for a value raw SQL wrote that is none of them, kept as written.
macro_rules! stored_status {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $name {
            $($variant,)*
            Other(String),
        }

        impl $name {
            pub fn parse(text: &str) -> Self {
                match text {
                    $($text => $name::$variant,)*
                    other => $name::Other(other.to_string()),
                }
            }

            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)*
                    $name::Other(s) => s,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        /// The command line takes the known values only (`Other` is what raw SQL wrote).
        impl clap::ValueEnum for $name {
            fn value_variants<'a>() -> &'a [Self] {
                const KNOWN: &[$name] = &[$($name::$variant,)*];
                KNOWN
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                match self {
                    $($name::$variant => Some(clap::builder::PossibleValue::new($text)),)*
                    $name::Other(_) => None,
                }
            }
        }
    };
}

stored_status! {
    /// A run's status. A status raw SQL wrote that is none of the four is not finished: such a
    /// run stays writable, like the spec's.
    RunStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Interrupted => "interrupted",
    }
}

impl RunStatus {
    /// `completed` and `failed` runs are closed to writes and keep their status.
    pub fn is_finished(&self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed)
    }
}

stored_status! {
    /// A gate's status. A status raw SQL wrote that is none of the four is treated as decided:
    /// such a gate can never be approved (gates fail closed).
    GateStatus {
        Pending => "pending",
        Approved => "approved",
        Rejected => "rejected",
        Timeout => "timeout",
    }
}

impl GateStatus {
    pub fn is_pending(&self) -> bool {
        *self == GateStatus::Pending
    }
}

stored_status! {
    /// An execution record's status, as stored: the spec's vocabulary (what `exec-append
    /// --status` writes), or whatever raw SQL wrote.
    ExecStatus {
        Pending => "pending",
        Executing => "executing",
        Started => "started",
        Completed => "completed",
        Failed => "failed",
        Skipped => "skipped",
        Iteration => "iteration",
        Joined => "joined",
        Exited => "exited",
        Retry => "retry",
    }
}

impl ExecStatus {
    /// Whether the record marks something ending (its time goes to `completed_at`) rather
    /// than beginning or waiting (its time goes to `started_at`). Every record prose-state
    /// appends carries exactly one of the two, so an event's time is
    /// `COALESCE(completed_at, started_at)`.
    pub fn is_ending(&self) -> bool {
        matches!(
            self,
            ExecStatus::Completed
                | ExecStatus::Failed
                | ExecStatus::Skipped
                | ExecStatus::Iteration
                | ExecStatus::Joined
                | ExecStatus::Exited
        )
    }
}

/// A moment as prose-state writes it: UTC, to the second, in the text form of SQLite's
/// `datetime('now')` (`2026-11-22 14:30:52`), so that values written by prose-state and by raw
/// SQL compare and sort together. The one place that form is written down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(chrono::NaiveDateTime);

impl Timestamp {
    const FORMAT: &'static str = "%Y-%m-%d %H:%M:%S";

    /// The one clock of every time the tool writes or compares (the SQL never takes its own).
    pub fn now() -> Self {
        Timestamp(chrono::Utc::now().naive_utc() + test_clock::skew())
    }

    /// A timestamp in exactly the stored form.
    pub fn parse(text: &str) -> Option<Self> {
        chrono::NaiveDateTime::parse_from_str(text, Self::FORMAT)
            .ok()
            .map(Timestamp)
    }

    /// A timestamp in any form SQLite's `datetime()` reads: `YYYY-MM-DD HH:MM[:SS[.fff]]`,
    /// with `T` for the space, and `Z` or an offset.
    pub fn parse_lenient(text: &str) -> Option<Self> {
        let t = text.trim();
        if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
            return Some(Timestamp(dt.naive_utc()));
        }
        let t = t.strip_suffix('Z').unwrap_or(t).replacen('T', " ", 1);
        ["%Y-%m-%d %H:%M:%S%.f", Self::FORMAT, "%Y-%m-%d %H:%M"]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(&t, f).ok())
            .map(|dt| Timestamp(dt.with_nanosecond(0).unwrap_or(dt)))
    }

    pub fn plus_seconds(self, seconds: i64) -> Self {
        Timestamp(self.0 + chrono::Duration::seconds(seconds))
    }

    /// Seconds from `earlier` to `self`.
    pub fn seconds_since(self, earlier: Timestamp) -> i64 {
        (self.0 - earlier.0).num_seconds()
    }
}

/// The clock the tests set. Only a build with the `test-clock` feature has it, and only the
/// test suite turns that on (through its dev-dependency on this package): there
/// `PROSE_STATE_TEST_CLOCK=SECONDS` (`+90`, `-5`) moves [`Timestamp::now`] by that much, so a
/// test steps past a deadline instead of sleeping to it. A release build has no such code: no
/// caller can move its clock to approve after a deadline.
mod test_clock {
    /// The environment variable a test build reads.
    #[cfg(feature = "test-clock")]
    pub const VAR: &str = "PROSE_STATE_TEST_CLOCK";

    #[cfg(feature = "test-clock")]
    pub fn skew() -> chrono::Duration {
        std::env::var(VAR)
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map_or_else(chrono::Duration::zero, chrono::Duration::seconds)
    }

    #[cfg(not(feature = "test-clock"))]
    pub fn skew() -> chrono::Duration {
        chrono::Duration::zero()
    }
}

/// A fault the tests inject, in a build with the `test-clock` feature only (as the clock the
/// tests set): with `PROSE_STATE_TEST_DIE_AFTER_COMMIT` set, a writer dies (abort, as a kill
/// would stop it: nothing after runs) right after its commit, before what the commit causes
/// (the anchor's move, notices). A release build has no such code.
pub mod test_faults {
    #[cfg(feature = "test-clock")]
    pub fn after_commit() {
        if std::env::var_os("PROSE_STATE_TEST_DIE_AFTER_COMMIT").is_some() {
            std::process::abort();
        }
    }

    #[cfg(not(feature = "test-clock"))]
    pub fn after_commit() {}

    /// With `PROSE_STATE_TEST_HOLD_DECISION=DIR` set, a decision stops after its front end's
    /// checks, before its transaction: it writes `DIR/held`, and goes on once `DIR/go`
    /// exists (its text, if any, the test clock's new skew in seconds), as a decision waiting
    /// for another writer's lock would. A test revokes a token or passes a deadline meanwhile.
    #[cfg(feature = "test-clock")]
    pub fn before_decision() {
        let Some(dir) = std::env::var_os("PROSE_STATE_TEST_HOLD_DECISION") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::write(dir.join("held"), "");
        for _ in 0..12_000 {
            if let Ok(skew) = std::fs::read_to_string(dir.join("go")) {
                if !skew.trim().is_empty() {
                    std::env::set_var(super::test_clock::VAR, skew.trim());
                }
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[cfg(not(feature = "test-clock"))]
    pub fn before_decision() {}
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.format(Self::FORMAT))
    }
}

/// Seconds from one stored timestamp to another; None when either does not parse.
pub fn seconds_between(earlier: &str, later: &str) -> Option<i64> {
    // Either may be in any form SQLite's datetime() reads (an ISO deadline `...T...Z` that
    // raw SQL wrote, as the spec's schema comment asks): the same instants, compared.
    let read = |t: &str| Timestamp::parse(t).or_else(|| Timestamp::parse_lenient(t));
    Some(read(later)?.seconds_since(read(earlier)?))
}

/// Whether two strings are equal, in time that does not depend on where they differ (tokens,
/// tags and digests a client sent).
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A time in any form SQLite's `datetime()` reads, in the stored form.
pub fn canonical_time(text: &str) -> Option<String> {
    Timestamp::parse_lenient(text).map(|t| t.to_string())
}

/// Now, in UTC, in the exact text form of SQLite's `datetime('now')`, so that values written
/// by prose-state and by the spec's raw SQL compare and sort together.
pub fn now() -> String {
    Timestamp::now().to_string()
}

/// Checks a gate's prompt, the text a person approves: not empty, and free of what would make
/// a terminal show something else than what is stored (control characters other than newline
/// and tab, and the bidirectional embeddings, overrides and isolates of "Trojan Source").
/// Zero-width characters are allowed (emoji sequences use them) and shown escaped.
pub fn check_prompt(prompt: &str) -> Result<()> {
    if prompt.trim().is_empty() {
        return Err(usage("--prompt is empty"));
    }
    let bad = prompt.chars().find(|&c| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    });
    match bad {
        Some(c) => Err(usage(format!(
            "--prompt holds the character U+{:04X}, which would change what an approver sees; \
             only newline and tab are allowed among control characters",
            c as u32
        ))),
        None => Ok(()),
    }
}

/// Checks that metadata is a JSON object; returns it unchanged (stored as given).
pub fn check_metadata(text: &str) -> Result<()> {
    match crate::response::unique_keys(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(other) => Err(usage(format!(
            "invalid --metadata (must be a JSON object, got {}): {}",
            json_type(&other),
            shown(text)
        ))),
        Err(e) if e.contains("given twice") => {
            Err(usage(format!("invalid --metadata ({e}): {}", shown(text))))
        }
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

/// Parses a gate duration: a positive number of `d`, `h`, `m`, `s` units in descending order,
/// each at most once (`30s`, `4h`, `7d`, `2h30m`, `1d12h`), or a whole number of seconds alone
/// (`30`). Returns seconds. Zero, negative, a unitless number after units, repeated or
/// out-of-order units, and anything beyond 100 years are refused.
pub fn parse_duration(text: &str) -> Result<i64> {
    const MAX_SECONDS: i64 = 100 * 365 * 86_400;
    let bad = |why: &str| {
        Err(usage(format!(
            "invalid duration ({why}; use e.g. 30 or 30s, 30m, 4h, 7d, 2h30m): {}",
            shown(text)
        )))
    };
    if text.is_empty() {
        return bad("empty");
    }
    // A whole number alone is seconds (`30`, as `30s`).
    let seconds_only;
    let text = if text.bytes().all(|b| b.is_ascii_digit()) {
        seconds_only = format!("{text}s");
        seconds_only.as_str()
    } else {
        text
    };
    let units = [('d', 86_400i64), ('h', 3_600), ('m', 60), ('s', 1)];
    let mut total: i64 = 0;
    let mut next_unit = 0; // index into units: each unit must come after the previous one
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let Some(pos) = units.iter().position(|(u, _)| *u == c) else {
            return bad(&format!("unknown unit {c:?}"));
        };
        if digits.is_empty() {
            return bad("a unit without a number");
        }
        if pos < next_unit {
            return bad("units must be in the order d, h, m, s, each at most once");
        }
        let n: i64 = match digits.parse() {
            Ok(n) => n,
            Err(_) => return bad("too large"),
        };
        total = match n
            .checked_mul(units[pos].1)
            .and_then(|v| total.checked_add(v))
        {
            Some(t) if t <= MAX_SECONDS => t,
            _ => return bad("longer than 100 years"),
        };
        next_unit = pos + 1;
        digits.clear();
    }
    if !digits.is_empty() {
        return bad("a number without a unit");
    }
    if total == 0 {
        return bad("zero");
    }
    Ok(total)
}

/// Checks a gate id: the same rules as a binding name (it names a gate in the language).
pub fn check_gate_id(id: &str) -> Result<()> {
    check_name_as(id, "gate id")
}

/// [`check_name`]'s grammar for another kind of name, refused as `what`.
fn check_name_as(name: &str, what: &str) -> Result<()> {
    check_name(name).map_err(|_| {
        usage(format!(
            "invalid {what} (a letter or _ first, then letters, digits, _ . -): {}",
            shown(name)
        ))
    })
}

/// Characters that render as nothing, or change the direction or meaning of what follows:
/// soft hyphens, joiners and zero-width spaces, bidirectional marks, embeddings, overrides and
/// isolates, line and paragraph separators, fillers, variation selectors, tags. The one list
/// both terminal output (which shows them escaped) and principals (which drop them) use.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{ad}'                       // soft hyphen
        | '\u{34f}'                    // combining grapheme joiner
        | '\u{61c}'                    // Arabic letter mark
        | '\u{115f}' | '\u{1160}'      // Hangul fillers
        | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}'      // Mongolian variation selectors, vowel separator
        | '\u{200b}'..='\u{200f}'      // zero-width space, joiners, LRM, RLM
        | '\u{2028}'..='\u{202e}'      // line/paragraph separators, bidi embeddings, overrides
        | '\u{2060}'..='\u{206f}'      // word joiner, invisible operators, bidi isolates
        | '\u{2800}'                   // Braille pattern blank, shown as a space
        | '\u{3164}' | '\u{ffa0}'      // Hangul fillers
        | '\u{fe00}'..='\u{fe0f}'      // variation selectors
        | '\u{feff}'                   // zero-width no-break space (BOM)
        | '\u{fff0}'..='\u{fffb}'      // unassigned specials, interlinear annotations
        | '\u{1bca0}'..='\u{1bca3}'    // shorthand format controls
        | '\u{1d173}'..='\u{1d17a}'    // musical formatting
        | '\u{e0000}'..='\u{e0fff}') // tags, variation selectors supplement
}

/// Removed from a principal before it is compared: whitespace, control and invisible
/// characters, which could otherwise hide inside one.
fn is_ignorable(c: char) -> bool {
    c.is_whitespace() || c.is_control() || is_invisible(c)
}

/// The longest principal accepted, in bytes, after normalisation.
pub const MAX_PRINCIPAL_BYTES: usize = 128;

/// Who acts on a gate, in its one normal form. A principal is written in any Unicode form
/// and normalised by NFKC (fullwidth and other compatibility forms become ASCII), lower-casing,
/// and removal of whitespace, control and invisible characters. The result must match the
/// grammar `[agent:]NAME`, where NAME is ASCII: a letter, digit or `_`, then letters, digits
/// and `_ . - + @ :`, at most 128 bytes in all. Anything else is refused, not guessed at: a
/// Cyrillic `а` is not an `a`. `agent:...` is an agent; `system`, `user` and `unknown` are
/// reserved (the tool's own events, and the allow-list word for people).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(String);

impl Principal {
    /// The words no one may act as.
    pub const RESERVED: [&'static str; 3] = ["system", "user", "unknown"];

    /// Normalises and checks a principal; `what` names where it came from, for the error.
    pub fn parse(raw: &str, what: &str) -> Result<Self> {
        let p = Self::normalise(raw);
        let bad = |why: &str| usage(format!("invalid principal ({what}): {}: {why}", shown(raw)));
        if p.is_empty() {
            return Err(bad("empty"));
        }
        if p.len() > MAX_PRINCIPAL_BYTES {
            return Err(bad("longer than 128 bytes"));
        }
        let name = p.strip_prefix("agent:").unwrap_or(&p);
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let rest_ok = chars.all(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, '_' | '.' | '-' | '+' | '@' | ':')
        });
        if !first_ok || !rest_ok {
            return Err(bad(
                "a principal is [agent:]NAME, NAME in ASCII letters, digits and _ . - + @ :",
            ));
        }
        if Self::RESERVED.contains(&p.as_str()) {
            return Err(bad("reserved"));
        }
        if p.starts_with(GROUP_PREFIX) {
            return Err(bad("group: names a group, never a principal"));
        }
        Ok(Principal(p))
    }

    /// NFKC, lower case, with whitespace, control and invisible characters removed.
    pub fn normalise(raw: &str) -> String {
        use unicode_normalization::UnicodeNormalization;
        raw.nfkc()
            .flat_map(char::to_lowercase)
            .filter(|&c| !is_ignorable(c))
            .collect()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_agent(&self) -> bool {
        self.0.starts_with("agent:")
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The prefix of an allow entry that names a group of the principals book; no principal may
/// be named with it.
pub const GROUP_PREFIX: &str = "group:";

/// A group's name, normalised as a principal's is (`group:` not included): NAME in the
/// grammar of [`Principal`], never `agent:`.
pub fn group_name(raw: &str, what: &str) -> Result<String> {
    let n = Principal::normalise(raw);
    let n = n.strip_prefix(GROUP_PREFIX).unwrap_or(&n);
    match Principal::parse(n, what) {
        Ok(p) if !p.is_agent() => Ok(p.0),
        _ => Err(usage(format!(
            "invalid group ({what}): {}: a group is NAME, in ASCII letters, digits and _ . - + @ :",
            shown(raw)
        ))),
    }
}

/// Checks an allow list as given to `gates create`, and returns it normalised: `user`,
/// `group:NAME`, or principals in the grammar of [`Principal`].
pub fn normalise_allow(allow: &[String]) -> Result<Vec<String>> {
    if allow.is_empty() {
        return Err(usage("--allow needs at least one principal"));
    }
    allow
        .iter()
        .map(|a| {
            let n = Principal::normalise(a);
            if n == "user" {
                Ok("user".to_string())
            } else if n.starts_with(GROUP_PREFIX) {
                group_name(a, "--allow").map(|g| format!("{GROUP_PREFIX}{g}"))
            } else {
                Principal::parse(a, "--allow").map(|p| p.0)
            }
        })
        .collect()
}

/// Whether `principal` may decide a gate whose allow list is `allow`. `user` admits any
/// principal that is not an agent (`agent:...`): agents inside a run must not approve their
/// own gates. Other entries admit the principal they normalise to; an entry outside the
/// grammar (raw SQL may write one) admits nobody.
pub fn principal_allowed(allow: &[String], principal: &Principal) -> bool {
    allow.iter().any(|a| {
        let entry = Principal::normalise(a);
        if entry == "user" {
            !principal.is_agent()
        } else {
            Principal::parse(a, "allow").is_ok_and(|e| e == *principal)
        }
    })
}

/// `sha256:` and the hex digest of `text`.
pub fn sha256_tag(text: &str) -> String {
    sha256_tag_bytes(text.as_bytes())
}

/// [`sha256_tag`] of bytes.
pub fn sha256_tag_bytes(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// Lower-case hex of `bytes`. By table: a whole log's verification hexes every row's digest.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// A timestamp `seconds` from now, in the same text form as [`now`].
pub fn now_plus(seconds: i64) -> String {
    Timestamp::now().plus_seconds(seconds).to_string()
}

/// Where a run's state is kept; recorded in the run directory (`backend.json`) when it is
/// not the default SQLite, so later commands on the run need no flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
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
    fn names_become_paths_only_inside_their_directory() {
        use super::{path_in, PathName};
        let dir = std::path::Path::new("/runs/r/attachments");
        for kind in [
            PathName::Binding,
            PathName::Agent,
            PathName::Run,
            PathName::File,
        ] {
            for bad in [
                "",
                ".",
                "..",
                "../x",
                "a/b",
                "a\\b",
                "/abs",
                ".hidden",
                "a\0b",
                "a\u{1b}b",
                "a\u{202e}b",
                "a\u{200b}b",
                "a\u{2066}b",
                "a\u{feff}b",
                "a\nb",
            ] {
                assert!(path_in(dir, bad, kind).is_err(), "{kind:?} {bad:?}");
            }
            assert!(path_in(dir, &"a".repeat(256), kind).is_err());
        }
        assert_eq!(
            path_in(dir, "report", PathName::Binding).unwrap(),
            dir.join("report")
        );
        assert!(path_in(dir, "20261122-143052-a7b3c9", PathName::Run).is_ok());
        assert!(path_in(dir, "report@root.00ff.md", PathName::File).is_ok());
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

    #[test]
    fn durations() {
        for (t, s) in [
            ("30s", 30),
            ("30m", 1800),
            ("4h", 14400),
            ("7d", 604800),
            ("2h30m", 9000),
            ("1d12h", 129600),
            ("1d2h3m4s", 93784),
            ("30", 30),
            ("90", 90),
        ] {
            assert_eq!(parse_duration(t).unwrap(), s, "{t}");
        }
        for bad in [
            "",
            "0",
            "0s",
            "-1h",
            "4x",
            "h",
            "1h30",
            "00",
            "1h2d",
            "1h1h",
            "99999999999999999999d",
            "36501d",
            " 1h",
            "1h ",
            "1.5h",
            "+1h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    fn p(raw: &str) -> Principal {
        Principal::parse(raw, "test").unwrap()
    }

    #[test]
    fn allow() {
        let user = vec!["user".to_string()];
        assert!(principal_allowed(&user, &p("raymond")));
        assert!(!principal_allowed(&user, &p("agent:captain")));
        let ops = vec!["ops-team".to_string(), "agent:deployer".to_string()];
        assert!(principal_allowed(&ops, &p("ops-team")));
        assert!(principal_allowed(&ops, &p("agent:deployer")));
        assert!(!principal_allowed(&ops, &p("raymond")));
        // Entries are compared normalised, whoever wrote them.
        let raw = vec!["Alice".to_string(), "  USER ".to_string()];
        assert!(principal_allowed(&raw, &p("alice")));
        assert!(principal_allowed(&raw, &p("bob")));
        assert!(!principal_allowed(&raw, &p("agent:bob")));
        // An entry outside the grammar admits nobody.
        let odd = vec!["\u{430}lice".to_string()];
        assert!(!principal_allowed(&odd, &p("alice")));
    }

    #[test]
    fn every_spelling_of_agent_is_an_agent() {
        for raw in [
            " agent:bot",
            "Agent:bot",
            "AGENT:bot",
            "agent :bot",
            "agent\u{200b}:bot",
            "agent\u{ff1a}bot",
            "\u{ff41}gent:bot",
            "agent\u{202e}:bot",
            "agent\t:bot\n",
            "a\u{ad}gent:bot",
        ] {
            let got = p(raw);
            assert!(got.is_agent(), "{raw:?} -> {got}");
            assert_eq!(got.as_str(), "agent:bot", "{raw:?}");
        }
    }

    #[test]
    fn principals_outside_the_grammar_are_refused() {
        for raw in [
            "",
            "   ",
            "\u{200b}",
            "\u{430}gent:bot", // Cyrillic a
            "jos\u{e9}",
            "a/b",
            "-x",
            "agent:",
            "system",
            "USER",
            "unknown",
            &"x".repeat(129),
        ] {
            assert!(Principal::parse(raw, "test").is_err(), "{raw:?}");
        }
        assert_eq!(p("Raymond").as_str(), "raymond");
        assert_eq!(
            p("ops.team+1@example.com").as_str(),
            "ops.team+1@example.com"
        );
        assert!(!p("agents:x").is_agent());
    }
}
