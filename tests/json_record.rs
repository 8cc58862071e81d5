//! The record of every command's `--json` output: one scripted project, driven through the
//! real binary on each backend, every command line written down with its exit code, its
//! stdout and its stderr, and compared byte for byte with the committed record
//! (`tests/fixtures/json-record/{sqlite,postgres}.txt`).
//!
//! It guards a refactor that must change no behaviour: output shape, field names and order,
//! values, exit codes and error lines. Only what legitimately differs from one run of the
//! script to the next is normalised, by the rules of [`Normaliser`]: times, generated run ids,
//! the temp root, the server's URL, tokens, keys and what is derived from them or from time
//! (audit chain hashes, seals, digests, attachment names), and the seconds counters of gates.
//!
//! To accept a deliberate change: `PROSE_STATE_BLESS=1 cargo test --test cli json_record::`,
//! then read the record's diff before committing it.
//!
//! Times are kept to the second, and listings order by time, then by id: so that the record
//! does not depend on which commands fall within one second, the script makes runs and gates
//! in the order of their ids (and of the listings' ties). `PROSE_STATE_RECORD_PAUSE_MS=1100`
//! pauses that long before each command, so that no two fall within one second: the record
//! must come out the same (a slow check of that promise, not run by default).

use crate::common::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

on_both!(json_record);

fn json_record(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let mut rec = Recorder::new(&p);
    script(&mut rec);
    let name = match b {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let actual = rec.normalised();
    compare_with_record(name, &actual);
}

/// The committed record of a backend.
fn record_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/json-record")
        .join(format!("{name}.txt"))
}

/// Compares `actual` with the record, or writes it there under PROSE_STATE_BLESS=1. On a
/// mismatch the actual record is kept in the target directory for a full diff.
fn compare_with_record(name: &str, actual: &str) {
    let path = record_path(name);
    if std::env::var_os("PROSE_STATE_BLESS").is_some_and(|v| !v.is_empty() && v != "0") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected == actual {
        return;
    }
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("json-record-{name}.txt"));
    std::fs::write(&kept, actual).unwrap();
    panic!(
        "the --json record of {name} changed ({}):\n{}\nThe whole new record: {}\n\
         If the change is intended, re-bless and review the diff of the record:\n    \
         PROSE_STATE_BLESS=1 cargo test --test cli json_record::\n",
        path.display(),
        first_differences(&expected, actual),
        kept.display()
    );
}

/// A unified-like diff of the first differing lines: the command they belong to, a few lines
/// of context, the expected (`-`) and actual (`+`) lines, and where in the line they part.
fn first_differences(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    if e.is_empty() {
        return "(no record yet)".to_string();
    }
    let first = (0..e.len().max(a.len()))
        .find(|&i| e.get(i) != a.get(i))
        .unwrap_or(0);
    // How far the difference goes before the two agree again on a line (at most 8 lines).
    let mut end = first;
    while end < first + 8 && end < e.len().max(a.len()) && e.get(end) != a.get(end) {
        end += 1;
    }
    let mut out = String::new();
    let command = e[..first.min(e.len())]
        .iter()
        .rev()
        .find(|l| l.starts_with("$ "));
    if let Some(c) = command {
        let _ = writeln!(out, "in: {c}");
    }
    let _ = writeln!(out, "@@ line {} @@", first + 1);
    for l in &e[first.saturating_sub(3)..first.min(e.len())] {
        let _ = writeln!(out, " {l}");
    }
    for l in e.iter().take(end).skip(first) {
        let _ = writeln!(out, "-{}", clip(l, 300));
    }
    for l in a.iter().take(end).skip(first) {
        let _ = writeln!(out, "+{}", clip(l, 300));
    }
    if let (Some(x), Some(y)) = (e.get(first), a.get(first)) {
        let at = x
            .char_indices()
            .zip(y.chars())
            .find(|((_, c), d)| c != d)
            .map_or(x.len().min(y.len()), |((i, _), _)| i);
        let from = x[..at].char_indices().rev().nth(40).map_or(0, |(i, _)| i);
        let _ = writeln!(
            out,
            "first difference at byte {at}:\n-…{}\n+…{}",
            clip(&x[from..], 120),
            clip(&y[from.min(y.len())..], 120)
        );
    }
    out
}

/// At most `n` characters of `s`, saying how many more there were.
fn clip(s: &str, n: usize) -> String {
    let more = s.chars().count().saturating_sub(n);
    let head: String = s.chars().take(n).collect();
    if more == 0 {
        head
    } else {
        format!("{head}… ({more} more characters)")
    }
}

/// Drives the binary and writes each command down.
struct Recorder<'a> {
    p: &'a Project,
    raw: String,
    /// Values known to be made anew by each run of the script, with the placeholder each
    /// stands for, replaced before the pattern rules.
    known: Vec<(String, String)>,
}

/// One command's result.
struct Out {
    code: i32,
    stdout: String,
}

impl Out {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl<'a> Recorder<'a> {
    fn new(p: &'a Project) -> Self {
        let mut known = Vec::new();
        let root = p.root().to_string_lossy().into_owned();
        if let Ok(real) = p.root().canonicalize() {
            let real = real.to_string_lossy().into_owned();
            if real != root {
                known.push((real, "<ROOT>".to_string()));
            }
        }
        known.push((root, "<ROOT>".to_string()));
        if let Some(url) = &p.pg_url {
            // postgresql://USER[:PASSWORD]@HOST:PORT/DATABASE[?...]: as given, and as the
            // binary shows it (the password masked).
            known.push((url.clone(), "<PG_URL>".to_string()));
            let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let database = path.split('?').next().unwrap_or("");
            if let Some((user, host)) = authority.rsplit_once('@') {
                let user = user.split(':').next().unwrap_or(user);
                known.push((host.to_string(), "<PG_HOST>".to_string()));
                known.push((format!("://{user}:"), "://<PG_USER>:".to_string()));
                known.push((format!("://{user}@"), "://<PG_USER>@".to_string()));
            }
            if !database.is_empty() {
                known.push((format!("/{database}"), "/<PG_DB>".to_string()));
            }
        }
        Recorder {
            p,
            raw: String::new(),
            known,
        }
    }

    /// Adds a value made anew by this run of the script, to be written as `placeholder`.
    fn known(&mut self, value: &str, placeholder: &str) {
        self.known
            .push((value.to_string(), placeholder.to_string()));
    }

    fn run(&mut self, args: &[&str]) -> Out {
        self.run_with(args, None)
    }

    /// Runs the binary in the project root with `args` (and `stdin`), in an environment of
    /// its own: nothing of the caller's but PATH (and the project's clock).
    fn run_with(&mut self, args: &[&str], stdin: Option<&[u8]>) -> Out {
        if let Some(ms) = std::env::var("PROSE_STATE_RECORD_PAUSE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        let mut c = assert_cmd::Command::new(BIN);
        c.current_dir(self.p.root())
            .env_clear()
            .env("HOME", test_home(self.p.root()))
            .envs(test_clock(self.p.root()))
            .env("USER", "recorder")
            .env("LOGNAME", "recorder")
            .env("TZ", "UTC")
            .args(args);
        if let Some(path) = std::env::var_os("PATH") {
            c.env("PATH", path);
        }
        if let Some(input) = stdin {
            c.write_stdin(input.to_vec());
        }
        c.timeout(std::time::Duration::from_secs(60));
        let a = c.assert();
        let o = a.get_output();
        let code = o.status.code().unwrap_or(-1);
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        let _ = writeln!(self.raw, "$ prose-state {}", shell_words(args));
        if let Some(input) = stdin {
            let _ = writeln!(self.raw, "< stdin {:?}", String::from_utf8_lossy(input));
        }
        let _ = writeln!(self.raw, "? exit {code}");
        section(&mut self.raw, "| ", &stdout, "stdout");
        section(&mut self.raw, "! ", &stderr, "stderr");
        self.raw.push('\n');
        Out { code, stdout }
    }

    /// Runs a command that must succeed (the script depends on it) and returns its JSON.
    fn ok(&mut self, args: &[&str]) -> serde_json::Value {
        let out = self.run(args);
        assert_eq!(out.code, 0, "{args:?}: {}", self.raw);
        out.json()
    }

    /// Writes to a run's database behind the binary's back (SQLite's dialect, or
    /// PostgreSQL's with `$RUN` for the run id), and says so in the record.
    fn raw(&mut self, run: &str, sqlite: &str, postgres: &str) {
        let sql = if self.p.pg_url.is_some() {
            postgres
        } else {
            sqlite
        };
        let _ = writeln!(self.raw, "# raw SQL: {sql}\n");
        self.p.run(run).view().raw(sqlite, postgres);
    }

    /// Writes a note in the record (what the next commands are about).
    fn note(&mut self, text: &str) {
        let _ = writeln!(self.raw, "# {text}\n");
    }

    fn normalised(&self) -> String {
        let backend = match self.p.backend {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        };
        let mut text = format!(
            "# What prose-state prints on {backend}: tests/json_record.rs runs this script and\n\
             # compares what it prints with this record, byte for byte. Each command:\n\
             # `$ prose-state ARGS`, `< stdin \"...\"` when it reads any, `? exit CODE`, then its\n\
             # stdout (`| `) and stderr (`! `) lines. Values that differ from one run to the next\n\
             # are placeholders (<TIME>, <RUN1>, <SHA1>, ...: see RULES there; `<N>`-like names in\n\
             # clap's messages are clap's own). To accept a deliberate change:\n\
             #     PROSE_STATE_BLESS=1 cargo test --test cli json_record::\n\n"
        );
        text.push_str(&self.raw);
        // Longest first, so that a value containing another is replaced whole.
        let mut known = self.known.clone();
        known.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        for (value, placeholder) in &known {
            text = text.replace(value.as_str(), placeholder);
        }
        Normaliser::default().apply(&text, self.p.backend)
    }
}

/// Writes `text` with each line prefixed (`| ` stdout, `! ` stderr), saying so when its last
/// line has no newline.
fn section(out: &mut String, prefix: &str, text: &str, what: &str) {
    if text.is_empty() {
        return;
    }
    for line in text.split_inclusive('\n') {
        out.push_str(prefix);
        out.push_str(line.strip_suffix('\n').unwrap_or(line));
        out.push('\n');
    }
    if !text.ends_with('\n') {
        let _ = writeln!(out, "\\ no newline at the end of {what}");
    }
}

/// The arguments as a shell would take them back.
fn shell_words(args: &[&str]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.,:/=@+%".contains(c));
            if plain {
                a.to_string()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------
// Normalisation: a few well-defined patterns, each matched whole (never inside a longer run
// of letters and digits); the parts of a match that vary become placeholders. Placeholders of
// values that may repeat are numbered by first appearance, so that where two places held the
// same value, the record still says so (a chain's `prev_hash` is the previous row's `hash`).

/// A character class of a pattern.
#[derive(Clone, Copy)]
enum Class {
    Digit,
    /// 0-9a-f
    Hex,
    /// a-z0-9
    LowerAlnum,
}

impl Class {
    fn has(self, c: u8) -> bool {
        match self {
            Class::Digit => c.is_ascii_digit(),
            Class::Hex => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
            Class::LowerAlnum => c.is_ascii_digit() || c.is_ascii_lowercase(),
        }
    }
}

/// A piece of a pattern.
#[derive(Clone, Copy)]
enum Piece {
    /// This text.
    Lit(&'static str),
    /// One of these characters.
    OneOf(&'static str),
    /// Exactly n characters of the class; with n = 0, one or more.
    N(Class, usize),
    /// Nothing, or `.` and digits (fractions of a second).
    Fraction,
    /// Nothing, or a zone: `Z`, `+HH`, `+HH:MM` (or `-`).
    Zone,
}

/// What the text a piece matched becomes.
#[derive(Clone, Copy)]
enum Becomes {
    /// Itself.
    Kept,
    /// `<TAG{n}>`, n numbering the distinct texts of the tag in order of first appearance.
    Numbered(&'static str),
    /// This text.
    Fixed(&'static str),
    /// `<TAG{n}>` numbering the text from here to the end of the match (the pieces after it
    /// then become "").
    NumberedMatch(&'static str),
}

use Becomes::*;
use Class::*;
use Piece::*;

/// A rule: a pattern, and what each of its pieces becomes.
struct Rule {
    /// What varies, and why.
    #[allow(dead_code)]
    why: &'static str,
    pattern: &'static [(Piece, Becomes)],
}

/// The rules, applied in this order to the whole record.
const RULES: &[Rule] = &[
    Rule {
        why: "generated run ids ({YYYYMMDD}-{HHMMSS}-{random6}): the time and a random suffix",
        pattern: &[
            (N(Digit, 8), NumberedMatch("RUN")),
            (Lit("-"), Fixed("")),
            (N(Digit, 6), Fixed("")),
            (Lit("-"), Fixed("")),
            (N(LowerAlnum, 6), Fixed("")),
        ],
    },
    Rule {
        why: "times, as SQLite and PostgreSQL write them and as RFC 3339",
        pattern: &[
            (N(Digit, 4), Fixed("<TIME>")),
            (Lit("-"), Fixed("")),
            (N(Digit, 2), Fixed("")),
            (Lit("-"), Fixed("")),
            (N(Digit, 2), Fixed("")),
            (OneOf(" T"), Fixed("")),
            (N(Digit, 2), Fixed("")),
            (Lit(":"), Fixed("")),
            (N(Digit, 2), Fixed("")),
            (Lit(":"), Fixed("")),
            (N(Digit, 2), Fixed("")),
            (Fraction, Fixed("")),
            (Zone, Fixed("")),
        ],
    },
    Rule {
        why: "the audit log's seals: the id of the key (made at random in the test's home) and \
              the MAC under it",
        pattern: &[
            (Lit("hmac-sha256:"), Kept),
            (N(Hex, 16), Numbered("KEY")),
            (Lit(":"), Kept),
            (N(Hex, 64), Numbered("MAC")),
        ],
    },
    Rule {
        why: "SHA-256 digests of what holds times or random values (audit chain hashes, import \
              digests); a digest of fixed text is kept (KEPT_PROMPTS)",
        pattern: &[(Lit("sha256:"), Kept), (N(Hex, 64), Numbered("SHA"))],
    },
    Rule {
        why: "ed25519 keys and signatures (made at random in the test's home)",
        pattern: &[(Lit("ed25519:"), Kept), (N(Hex, 0), Numbered("PUBKEY"))],
    },
    Rule {
        why: "the unique part of an attachment's name ({name}@{scope}.{16 hex}.md): random",
        pattern: &[
            (Lit("."), Kept),
            (N(Hex, 16), Numbered("ATT")),
            (Lit(".md"), Kept),
        ],
    },
    Rule {
        why: "the id of a panicking thread (the process id, for the main thread)",
        pattern: &[
            (Lit("thread 'main' ("), Kept),
            (N(Digit, 0), Fixed("<TID>")),
            (Lit(") panicked"), Kept),
        ],
    },
    Rule {
        why: "a gate's seconds left: counted from now",
        pattern: &[
            (Lit("\"time_left_seconds\":"), Kept),
            (N(Digit, 0), Fixed("<SECS>")),
        ],
    },
    Rule {
        why: "how long a wait waited: measured",
        pattern: &[
            (Lit("\"waited_seconds\":"), Kept),
            (N(Digit, 0), Fixed("<SECS>")),
        ],
    },
    Rule {
        why: "how long a gate waited for its decision: measured (inside the audit metadata)",
        pattern: &[
            (Lit("\\\"approval_time_seconds\\\":"), Kept),
            (N(Digit, 0), Fixed("<SECS>")),
        ],
    },
    Rule {
        why: "stats on a server: the run's rows as stored (some hold measured times)",
        pattern: &[
            (Lit("\"row_bytes\":"), Kept),
            (N(Digit, 0), Fixed("<SERVER_BYTES>")),
        ],
    },
    Rule {
        why: "stats on a server: the tables' sizes, pages as the server allotted them",
        pattern: &[
            (Lit("\"tables_bytes\":"), Kept),
            (N(Digit, 0), Fixed("<SERVER_BYTES>")),
        ],
    },
    Rule {
        why: "stats on a server: the database's size",
        pattern: &[
            (Lit("\"database_bytes\":"), Kept),
            (N(Digit, 0), Fixed("<SERVER_BYTES>")),
        ],
    },
];

/// Rules for SQLite alone: the sizes of a run's database files, and the write-ahead log's
/// frames, follow how the rows fell into pages, and that follows the rows' lengths, some of
/// which are measured times (`approval_time_seconds`: "9" or "10"). The sizes PostgreSQL
/// reports are of the values alone (or none), and are kept.
const SQLITE_FILE_RULES: &[Rule] = &[
    Rule {
        why: "stats: the database and write-ahead log files' sizes",
        pattern: &[
            (Lit("\"db_bytes\":"), Kept),
            (N(Digit, 0), Fixed("<FILE_BYTES>")),
        ],
    },
    Rule {
        why: "stats: the write-ahead log's size",
        pattern: &[
            (Lit("\"wal_bytes\":"), Kept),
            (N(Digit, 0), Fixed("<FILE_BYTES>")),
        ],
    },
    Rule {
        why: "vacuum: the database's size",
        pattern: &[
            (Lit("\"bytes_before\":"), Kept),
            (N(Digit, 0), Fixed("<FILE_BYTES>")),
        ],
    },
    Rule {
        why: "vacuum: the database's size",
        pattern: &[
            (Lit("\"bytes_after\":"), Kept),
            (N(Digit, 0), Fixed("<FILE_BYTES>")),
        ],
    },
    Rule {
        why: "prune: a run directory's size (after the rule for times)",
        pattern: &[
            (Lit("\"started_at\":\"<TIME>\",\"bytes\":"), Kept),
            (N(Digit, 0), Fixed("<FILE_BYTES>")),
        ],
    },
    Rule {
        why: "prune: the run directories' sizes",
        pattern: &[
            (Lit("\"bytes_freed\":"), Kept),
            (N(Digit, 0), Fixed("<FILE_BYTES>")),
        ],
    },
    Rule {
        why: "checkpoint: the write-ahead log's frames",
        pattern: &[
            (Lit("\"wal_frames\":"), Kept),
            (N(Digit, 0), Fixed("<FRAMES>")),
        ],
    },
    Rule {
        why: "checkpoint: the write-ahead log's frames",
        pattern: &[
            (Lit("\"checkpointed_frames\":"), Kept),
            (N(Digit, 0), Fixed("<FRAMES>")),
        ],
    },
];

/// Gate prompts: their digests (`prompt_hash`) are of fixed text, so kept as they are.
const KEPT_PROMPTS: &[&str] = &[PROMPT_BUILD, PROMPT_REVIEW, PROMPT_DEPLOY];

/// The id of the filesystem-mode run the script imports: fixed by the fixture, so kept.
const FS_RUN: &str = "20260115-143052-a7b3c9";

/// Times that are fixed text: the fixture's (its run ended on that day) and an example in a
/// message.
fn fixed_time(t: &str) -> bool {
    t.starts_with("2026-01-15") || t == "2026-11-20T10:00:00Z"
}

#[derive(Default)]
struct Normaliser {
    /// Per tag, the texts seen, in order of first appearance.
    seen: std::collections::HashMap<&'static str, Vec<String>>,
}

impl Normaliser {
    fn apply(mut self, text: &str, backend: Backend) -> String {
        use sha2::Digest;
        let mut kept: Vec<String> = KEPT_PROMPTS
            .iter()
            .map(|p| format!("sha256:{:x}", sha2::Sha256::digest(p.as_bytes())))
            .collect();
        kept.push(FS_RUN.to_string());
        let mut text = text.to_string();
        let sqlite = if backend == Backend::Sqlite {
            SQLITE_FILE_RULES
        } else {
            &[]
        };
        for rule in RULES.iter().chain(sqlite) {
            text = self.apply_rule(rule, &text, &kept);
        }
        text
    }

    fn apply_rule(&mut self, rule: &Rule, text: &str, kept: &[String]) -> String {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        let mut copied = 0;
        while i < bytes.len() {
            let inside_word =
                i > 0 && bytes[i - 1].is_ascii_alphanumeric() && starts_alnum(rule.pattern);
            let spans = if inside_word {
                None
            } else {
                match_at(rule.pattern, bytes, i)
            };
            // (Every pattern begins with ASCII, so a match begins on a character boundary.)
            let Some(spans) = spans else {
                i += 1;
                continue;
            };
            let end = spans.last().map_or(i, |&(_, e)| e);
            let whole = end == bytes.len()
                || !bytes[end].is_ascii_alphanumeric()
                || !ends_alnum(rule.pattern);
            let matched = &text[i..end];
            if !whole || kept.iter().any(|k| k == matched) || fixed_time(matched) {
                i += 1;
                continue;
            }
            out.push_str(&text[copied..i]);
            for ((from, to), (_, becomes)) in spans.into_iter().zip(rule.pattern) {
                match *becomes {
                    Kept => out.push_str(&text[from..to]),
                    Fixed(s) => out.push_str(s),
                    Numbered(tag) => {
                        let n = self.number(tag, &text[from..to]);
                        let _ = write!(out, "<{tag}{n}>");
                    }
                    NumberedMatch(tag) => {
                        let n = self.number(tag, &text[from..end]);
                        let _ = write!(out, "<{tag}{n}>");
                    }
                }
            }
            i = end;
            copied = end;
        }
        out.push_str(&text[copied..]);
        out
    }

    fn number(&mut self, tag: &'static str, value: &str) -> usize {
        let seen = self.seen.entry(tag).or_default();
        match seen.iter().position(|v| v == value) {
            Some(n) => n + 1,
            None => {
                seen.push(value.to_string());
                seen.len()
            }
        }
    }
}

/// Whether a match of the pattern begins with a letter or digit (then it may not begin
/// inside a longer run of them).
fn starts_alnum(pattern: &[(Piece, Becomes)]) -> bool {
    match pattern.first() {
        Some((Lit(s), _)) => s.as_bytes()[0].is_ascii_alphanumeric(),
        Some((N(..), _)) => true,
        _ => false,
    }
}

/// Whether a match of the pattern may end with a letter or digit (then it may not end inside
/// a longer run of them).
fn ends_alnum(pattern: &[(Piece, Becomes)]) -> bool {
    !matches!(pattern.last(), Some((Lit(s), _)) if !s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
}

/// The span each piece of the pattern matched, when it matches at `at`.
fn match_at(pattern: &[(Piece, Becomes)], b: &[u8], at: usize) -> Option<Vec<(usize, usize)>> {
    let mut spans = Vec::with_capacity(pattern.len());
    let mut i = at;
    for (piece, _) in pattern {
        let from = i;
        match *piece {
            Lit(s) => {
                if !b[i..].starts_with(s.as_bytes()) {
                    return None;
                }
                i += s.len();
            }
            OneOf(set) => {
                if i >= b.len() || !set.as_bytes().contains(&b[i]) {
                    return None;
                }
                i += 1;
            }
            N(class, 0) => {
                while i < b.len() && class.has(b[i]) {
                    i += 1;
                }
                if i == from {
                    return None;
                }
            }
            N(class, n) => {
                if b.len() < i + n || !b[i..i + n].iter().all(|&c| class.has(c)) {
                    return None;
                }
                i += n;
            }
            Fraction => {
                if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                    while b.get(i).is_some_and(u8::is_ascii_digit) {
                        i += 1;
                    }
                }
            }
            Zone => match b.get(i) {
                Some(b'Z') => i += 1,
                Some(b'+' | b'-')
                    if b.len() >= i + 3 && b[i + 1..i + 3].iter().all(u8::is_ascii_digit) =>
                {
                    i += 3;
                    if b.get(i) == Some(&b':')
                        && b.len() >= i + 3
                        && b[i + 1..i + 3].iter().all(u8::is_ascii_digit)
                    {
                        i += 3;
                    }
                }
                _ => {}
            },
        }
        spans.push((from, i));
    }
    Some(spans)
}

// ---------------------------------------------------------------------------------------
// The script.

const PROMPT_BUILD: &str = "Ship build 42?";
const PROMPT_REVIEW: &str = "Accept the draft?";
const PROMPT_DEPLOY: &str = "Deploy to production?";

const PROGRAM: &str =
    "# a program\nlet research = session \"Research\"\noutput result = research\n";

#[rustfmt::skip]
fn script(r: &mut Recorder) {
    let pg = r.p.backend == Backend::Postgres;
    let backend = r.p.backend_flag();
    r.p.write("program.prose", PROGRAM.as_bytes());

    r.note("init: a generated id with a program, chosen ids (--json and -q), an id already taken");
    let v = r.ok(&["--json", "init", backend[0], backend[1], "program.prose"]);
    let run = v["run_id"].as_str().unwrap().to_string();
    let run = run.as_str();
    r.run(&["--json", "init", backend[0], backend[1], "--run-id", "side"]);
    r.run(&["init", "-q", backend[0], backend[1], "--run-id", "side-q"]);
    r.run(&["--json", "init", backend[0], backend[1], "--run-id", "side"]);

    r.note("exec-append: every status, --parent, --metadata, --error, --key and its retry");
    let block = r.ok(&[
        "--json", "--run", run, "exec-append", "--index", "1", "--text", "do process(x)",
        "--status", "executing",
    ])["id"]
        .as_i64()
        .unwrap()
        .to_string();
    let block = block.as_str();
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "2", "--text",
        "let research = session \"Research\"", "--status", "completed", "--parent", block,
        "--key", "stmt-2",
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "2", "--text",
        "let research = session \"Research\"", "--status", "completed", "--parent", block,
        "--key", "stmt-2",
    ]);
    r.run(&[
        "--run", run, "exec-append", "--index", "3", "--text", "session \"Flaky\"",
        "--status", "failed", "--error", "Connection timeout after 30s", "--parent", block,
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "3", "--text", "session \"Flaky\"",
        "--status", "retry", "--metadata", r#"{"attempt": 2, "max": 3}"#, "--parent", block,
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "4", "--text", "parallel:",
        "--status", "started", "--metadata", r#"{"parallel_id": "p1", "branches": ["a", "b"]}"#,
        "--parent", block,
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "4", "--text", "parallel:a",
        "--status", "completed", "--metadata", r#"{"parallel_id": "p1", "branch": "a"}"#,
        "--parent", block,
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "5", "--text", "loop",
        "--status", "started", "--metadata", r#"{"loop_id": "l1", "max": 3}"#,
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "5", "--text", "loop",
        "--status", "iteration", "--metadata", r#"{"loop_id": "l1", "iteration": 1}"#,
    ]);
    for status in ["pending", "skipped", "joined", "exited"] {
        r.run(&[
            "--json", "--run", "side", "exec-append", "--index", "9", "--text", "s",
            "--status", status,
        ]);
    }
    r.note("exec-append refusals: a key on another record, a parent that is not there, bad JSON");
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "7", "--text", "other",
        "--status", "completed", "--key", "stmt-2",
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "7", "--text", "x",
        "--status", "completed", "--parent", "9999",
    ]);
    r.run(&[
        "--json", "--run", run, "exec-append", "--index", "7", "--text", "x",
        "--status", "completed", "--metadata", "[1,",
    ]);

    r.note("bind: root and execution scope, kinds, --source, --summary, stdin, --file");
    r.run(&[
        "--json", "--run", run, "bind", "research", "AI safety is a field.",
        "--source", "let research = session \"Research\"",
    ]);
    r.run(&[
        "--json", "--run", run, "bind", "research", "scoped value", "--execution-id", block,
    ]);
    r.run(&[
        "--json", "--run", run, "bind", "limit", "3", "--kind", "const", "--summary", "the limit",
    ]);
    r.run(&["--json", "--run", run, "bind", "topic", "AI safety", "--kind", "input"]);
    r.run_with(
        &["--json", "--run", run, "bind", "piped", "-"],
        Some(b"from stdin\nsecond line\n"),
    );
    r.p.write("value.txt", b"a value from a file\n");
    r.run(&["--json", "--run", run, "bind", "from_file", "--file", "value.txt"]);
    r.note("bind --append and --merge");
    r.run(&["--json", "--run", run, "bind", "findings", "--append", r#""from a""#]);
    r.run(&["--json", "--run", run, "bind", "findings", "--append", r#"{"b": 2}"#]);
    r.run(&["--json", "--run", run, "bind", "findings", "--append", "not json"]);
    r.run(&["--json", "--run", run, "bind", "config", "--merge", r#"{"a": 1, "b": 2}"#]);
    r.run(&["--json", "--run", run, "bind", "config", "--merge", r#"{"a": null, "c": [3]}"#]);
    r.note("bind --if-version: the right version writes, a stale one is refused");
    let version = r.ok(&["--json", "--run", run, "get", "config"])["version"].to_string();
    r.run(&[
        "--json", "--run", run, "bind", "config", r#"{"v": 1}"#, "--if-version", &version,
    ]);
    r.run(&[
        "--json", "--run", run, "bind", "config", r#"{"v": 2}"#, "--if-version", &version,
    ]);
    r.note("bind: values that become attachments");
    let big: String = (0..4000)
        .map(|i| format!("line {i:05} of a large value\n"))
        .collect();
    r.p.write("big.txt", big.as_bytes());
    r.run(&["--json", "--run", run, "bind", "big", "--file", "big.txt"]);
    r.run(&[
        "--json", "--run", run, "bind", "small_attached", "just over ten bytes",
        "--attach-over", "10", "--summary", "a short one", "--execution-id", block,
    ]);
    r.note("bind refusals: a const rebound, a bad name, a missing execution, conflicting flags, no value");
    r.run(&["--json", "--run", run, "bind", "limit", "4", "--kind", "const"]);
    r.run(&["--json", "--run", run, "bind", "bad name!", "x"]);
    r.run(&["--json", "--run", run, "bind", "x", "y", "--execution-id", "9999"]);
    r.run(&["--json", "--run", run, "bind", "x", "--append", "1", "--merge", "{}"]);
    r.run(&["--json", "--run", run, "bind", "x"]);

    r.note("get: --json, plain, scopes, --explain, parts of a value, an attachment");
    r.run(&["--json", "--run", run, "get", "research"]);
    r.run(&["--run", run, "get", "research"]);
    r.run(&["--json", "--run", run, "get", "research", "--execution-id", block]);
    r.run(&["--json", "--run", run, "get", "limit", "--execution-id", block]);
    r.run(&["--json", "--run", run, "get", "research", "--execution-id", block, "--explain"]);
    r.run(&["--json", "--run", run, "get", "findings"]);
    r.run(&["--json", "--run", run, "get", "config"]);
    r.run(&["--json", "--run", run, "get", "piped"]);
    r.run(&["--json", "--run", run, "get", "big"]);
    r.run(&["--json", "--run", run, "get", "big", "--offset", "28", "--length", "56"]);
    r.run(&["--run", run, "get", "big", "--offset", "28", "--length", "56"]);
    r.run(&["--json", "--run", run, "get", "small_attached", "--execution-id", block]);
    r.note("get refusals: no such binding, not visible from the root, no such run");
    r.run(&["--json", "--run", run, "get", "nothing"]);
    r.run(&["--json", "--run", run, "get", "small_attached"]);
    r.run(&["--json", "--run", "no-such-run", "get", "research"]);
    r.run(&["--json", "get", "research"]);

    // Gates are made in the order of their ids within each run (build, review, wrap-up;
    // deploy, second, signed, tampered), and the run's before the side run's: listings order
    // them by the second they were made in, then by run and id.
    r.note("gates: create (every option), list, show, wait, approve, reject, reopen");
    r.run(&[
        "--json", "--run", run, "gates", "create", "build", "--prompt", PROMPT_BUILD,
        "--timeout", "2h", "--on-reject", "throw \"Not built\"", "--execution-id", block,
        "--index", "6", "--metadata", r#"{"build": 42}"#, "--allow", "alice,bob",
    ]);
    r.run(&[
        "--json", "--run", run, "gates", "create", "review", "--prompt", PROMPT_REVIEW,
        "--on-reject", "retry draft",
    ]);
    r.run(&[
        "--json", "--run", "side", "gates", "create", "deploy", "--prompt", PROMPT_DEPLOY,
        "--timeout", "1d",
    ]);
    r.run(&[
        "--json", "--run", run, "gates", "create", "build", "--prompt", PROMPT_BUILD,
    ]);
    r.run(&["--json", "gates"]);
    r.run(&["--json", "gates", "--pending", "--limit", "1"]);
    r.run(&["--json", "gates", "--expiring", "3h"]);
    r.run(&["--json", "--run", run, "gates", "--status", "all"]);
    r.run(&["--json", "gates", "--scan"]);
    r.run(&["--json", "--run", run, "gates", "show", "build", "--as", "alice"]);
    r.run(&["--json", "gates", "show", "side", "deploy", "--as", "carol"]);
    r.run(&["--json", "--run", run, "gates", "wait", "build", "--timeout", "0"]);
    r.note("decisions refused: an agent, someone not allowed, no --yes, no such gate");
    r.run(&["--json", "--run", run, "approve", "build", "--as", "agent:bot", "-y"]);
    r.run(&["--json", "--run", run, "approve", "build", "--as", "mallory", "-y"]);
    r.run(&["--json", "--run", run, "approve", "build", "--as", "alice"]);
    r.run(&["--json", "--run", run, "approve", "nope", "--as", "alice", "-y"]);
    r.note("decisions");
    r.run(&[
        "--json", "--run", run, "approve", "build", "--as", "alice", "-y", "--comment", "go",
    ]);
    r.run(&["--json", "--run", run, "approve", "build", "--as", "bob", "-y"]);
    r.run(&["--json", "--run", run, "gates", "wait", "build", "--timeout", "0"]);
    r.run(&[
        "--json", "--run", run, "reject", "review", "--as", "carol", "-y", "--reason",
        "too long",
    ]);
    r.run(&["--json", "--run", run, "gates", "wait", "review", "--timeout", "0"]);
    r.run(&[
        "--json", "--run", run, "gates", "create", "review", "--reopen", "--prompt",
        PROMPT_REVIEW, "--on-reject", "retry draft",
    ]);
    r.run(&[
        "--json", "--run", run, "gates", "wait", "review", "--timeout", "0", "--instance", "1",
    ]);
    r.run(&[
        "--json", "--run", run, "approve", "review", "--reject", "--reason", "still long",
        "--as", "carol", "-y",
    ]);
    r.run(&[
        "--json", "--run", run, "gates", "wait", "review", "--timeout", "0", "--instance", "2",
    ]);
    r.run(&["--json", "--run", run, "gates", "show", "review", "--as", "carol"]);
    r.run(&["--json", "--run", run, "gates", "--status", "rejected"]);

    r.note("audit and verify");
    r.run(&["--json", "--run", run, "gates", "audit"]);
    r.run(&["--json", "gates", "audit", "--gate", "deploy"]);
    r.run(&["--json", "--run", run, "gates", "audit", "--principal", "carol", "--since", "1h"]);
    r.run(&["--json", "--run", run, "gates", "verify"]);
    r.run(&["--json", "gates", "verify"]);
    r.run(&["--json", "--run", run, "gates", "verify", "--signed"]);

    r.note("principals: add, token, list, revoke, require");
    let carol = r.ok(&["--json", "principals", "add", "dora"]);
    let token = carol["token"].as_str().unwrap().to_string();
    r.known(&token, "<TOKEN:dora>");
    let bot = r.ok(&["--json", "principals", "add", "bot", "--agent"]);
    r.known(bot["token"].as_str().unwrap(), "<TOKEN:agent:bot>");
    r.run(&["--json", "principals", "add", "dora"]);
    r.run(&["--json", "principals"]);
    r.run(&["--json", "principals", "list"]);
    r.run(&["--json", "principals", "revoke", "agent:bot"]);
    r.run(&["--json", "principals", "revoke", "nobody"]);
    r.run(&["--json", "principals", "require"]);
    r.run(&["--json", "principals", "list"]);
    r.p.write("dora.token", format!("{token}\n").as_bytes());
    r.run(&[
        "--json", "--run", "side", "approve", "deploy", "--as", "dora", "-y",
    ]);
    r.run(&["--json", "--run", "side", "gates", "create", "second", "--prompt", PROMPT_DEPLOY]);
    r.run(&[
        "--json", "--run", "side", "approve", "second", "--token-file", "dora.token", "-y",
    ]);
    r.run(&[
        "--json", "--run", "side", "approve", "deploy", "--token-file", "dora.token", "-y",
        "--comment", "with a token",
    ]);
    r.run(&["--json", "principals", "require", "--off"]);
    r.run(&["--json", "--run", "side", "gates", "audit", "--gate", "deploy"]);

    r.note("stats of every run, before any agent lives outside a run (on PostgreSQL, `stats` of every run panics once one does: recorded below as it is)");
    r.run(&["--json", "stats"]);
    r.run(&["--json", "stats", "--scan"]);

    r.note("agent: memory and segments in execution scope, then project and user scope");
    r.run(&["--json", "--run", run, "agent", "memory", "captain"]);
    r.run(&["--json", "--run", run, "agent", "remember", "captain", "Prefers short answers."]);
    r.run_with(
        &["--json", "--run", run, "agent", "remember", "captain"],
        Some(b"Prefers short answers.\nKnows the codebase.\n"),
    );
    r.run(&[
        "--json", "--run", run, "agent", "segment", "captain", "--prompt", "Review the draft",
        "--summary", "Found two issues",
    ]);
    r.run(&[
        "--json", "--run", run, "agent", "segment", "captain", "--prompt", "Again",
        "--summary", "None left",
    ]);
    r.run(&["--json", "--run", run, "agent", "memory", "captain"]);
    r.run(&["--json", "--run", run, "agent", "list"]);
    r.p.write("memory.md", b"# mentor\nfrom a file\n");
    r.run(&[
        "--json", "agent", "--scope", "project", "remember", "mentor", "--file", "memory.md",
    ]);
    r.run(&["--json", "agent", "--scope", "project", "memory", "mentor"]);
    r.run(&["--json", "agent", "--scope", "project", "list"]);
    r.run(&["--json", "agent", "--scope", "user", "remember", "helper", "user-wide"]);
    r.run(&["--json", "agent", "--scope", "user", "segment", "helper", "--prompt", "p", "--summary", "s"]);
    r.run(&["--json", "agent", "--scope", "user", "list"]);
    r.run(&["--json", "agent", "memory", "captain"]);

    r.note("imports");
    r.run(&["--json", "--run", run, "imports"]);
    r.run(&[
        "--json", "--run", run, "imports", "add", "research", "--source",
        "github:openprose/research.prose", "--inputs-schema", r#"{"type": "object"}"#,
    ]);
    r.run(&[
        "--json", "--run", run, "imports", "add", "research", "--source",
        "github:openprose/research.prose", "--inputs-schema", r#"{"type": "object"}"#,
    ]);
    r.run(&[
        "--json", "--run", run, "imports", "add", "research", "--source", "github:other/x",
    ]);
    r.run(&[
        "--json", "--run", run, "imports", "add", "research", "--source", "github:other/x",
        "--outputs-schema", "{}", "--replace",
    ]);
    r.run(&["--json", "--run", run, "imports"]);

    r.note("resume: bounded, a page at a time, everything");
    r.run(&["--json", "--run", run, "resume"]);
    let page = r.ok(&["--json", "--run", run, "resume", "--limit", "3"]);
    let cursor = page["next_cursor"].as_str().unwrap_or("").to_string();
    r.run(&["--json", "--run", run, "resume", "--limit", "3", "--cursor", &cursor]);
    r.run(&["--json", "--run", run, "resume", "--all"]);
    r.run(&["--json", "--run", run, "resume", "--all", "--limit", "3"]);

    r.note("log");
    r.run(&["--json", "--run", run, "log"]);
    r.run(&["--json", "--run", run, "log", "--since", "8"]);
    r.run(&["--json", "--run", "side", "log"]);

    r.note("query (on PostgreSQL as a role that may only read)");
    let admin_env = std::fs::read(r.p.root().join(".prose/.env")).ok();
    if let Some(url) = &r.p.pg_url {
        let reader = pg::as_reader(url);
        r.known(&reader, "<PG_READER_URL>");
        r.p.write(
            ".prose/.env",
            format!("OPENPROSE_POSTGRES_URL={reader}\n").as_bytes(),
        );
    }
    let (select, write) = if pg {
        (
            "SELECT name, kind, execution_id, length(value) AS n FROM openprose.bindings \
             WHERE run_id = 'side' OR name IN ('research', 'limit') ORDER BY name, execution_id",
            "DELETE FROM openprose.bindings",
        )
    } else {
        (
            "SELECT name, kind, execution_id, length(value) AS n FROM bindings \
             WHERE name IN ('research', 'limit') ORDER BY name, execution_id",
            "DELETE FROM bindings",
        )
    };
    r.run(&["--json", "--run", run, "query", select]);
    r.run(&["--json", "--run", run, "query", "SELECT 1 AS one, NULL AS z, 'a''b' AS s"]);
    r.run(&["--json", "--run", run, "query", write]);
    r.run(&["--json", "--run", run, "query", "SELECT nope FROM nowhere"]);
    if let Some(env) = admin_env {
        std::fs::write(r.p.root().join(".prose/.env"), env).unwrap();
    }

    r.note("finish: refused while a gate is pending, then each status");
    r.run(&["--json", "--run", run, "gates", "create", "wrap-up", "--prompt", PROMPT_BUILD]);
    r.run(&["--json", "--run", run, "finish", "--status", "completed"]);
    r.run(&["--json", "--run", run, "approve", "wrap-up", "--as", "alice", "-y"]);
    r.run(&["--json", "--run", run, "finish", "--status", "completed"]);
    r.run(&["--json", "--run", run, "finish", "--status", "failed", "--error", "late"]);
    r.run(&["--json", "--run", run, "bind", "after", "the end"]);
    r.run(&[
        "--json", "--run", "side-q", "finish", "--status", "interrupted", "--error", "paused",
    ]);
    r.run(&["--json", "--run", "side-q", "resume"]);

    r.note("export, then import under another run id and as it is");
    r.run(&["--json", "--run", run, "export", "-o", "exported"]);
    r.run(&["--json", "--run", run, "export", "-o", "exported"]);
    r.run(&[
        "--json", "import", "exported", "--run-id", "copy", "--vouch", "--as", "alice",
    ]);
    r.run(&[
        "--json", "import", "exported", "--run-id", "copy", "--vouch", "--as", "alice",
    ]);
    r.run(&["--json", "import", "exported"]);
    r.run(&["--json", "import", "exported", "--run-id", "copy"]);
    r.run(&["--json", "import", "no-such-dir"]);
    r.run(&["--json", "--run", "copy", "get", "research", "--execution-id", block]);
    r.run(&["--json", "--run", "copy", "gates", "verify"]);
    r.run(&["--json", "--run", "copy", "finish", "--status", "failed", "--error", "a copy"]);

    r.note("the whole project: runs, stats, doctor, checkpoint, migrate, vacuum, prune (dry runs)");
    r.run(&["--json", "runs"]);
    r.run(&["--json", "runs", "--status", "running"]);
    r.run(&["--json", "runs", "--limit", "2", "--since", "1d"]);
    r.run(&["--json", "runs", "--scan"]);
    r.run(&["--json", "runs", "--since", "yesterday"]);
    r.run(&["--json", "--run", run, "stats"]);
    r.run(&["--json", "stats"]);
    r.run(&["--json", "stats", "--scan"]);
    r.run(&["--json", "--run", run, "doctor"]);
    r.run(&["--json", "doctor"]);
    r.run(&["--json", "--run", run, "checkpoint"]);
    r.run(&["--json", "checkpoint", "--mode", "passive"]);
    r.run(&["--json", "migrate"]);
    r.run(&["--json", "migrate", "--yes"]);
    r.run(&["--json", "--run", run, "vacuum"]);
    r.run(&["--json", "prune", "--keep-days", "0", "--keep-n", "1"]);
    r.run(&["--json", "prune", "--keep-days", "30", "--keep-n", "0"]);

    r.note("signed decisions: the approval page's key pinned; the command line's decisions are unsigned");
    r.run(&["serve", "--show-key"]);
    r.run(&["--json", "principals", "require", "--signed"]);
    r.run(&["--json", "--run", "side", "gates", "create", "signed", "--prompt", PROMPT_DEPLOY]);
    r.run(&["--json", "--run", "side", "approve", "signed", "--as", "alice", "-y"]);
    r.run(&["--json", "--run", "side", "gates", "wait", "deploy", "--timeout", "0", "--require-signed"]);
    r.run(&["--json", "--run", "side", "gates", "verify", "--signed"]);
    r.run(&["--json", "principals", "require", "--off"]);

    r.note("decisions written behind the tool's back");
    r.run(&["--json", "--run", "side", "gates", "create", "tampered", "--prompt", PROMPT_DEPLOY]);
    r.raw(
        "side",
        "UPDATE gates SET status = 'approved', resolved_by = 'mallory', resolved_at = datetime('now') WHERE id = 'tampered'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'mallory', resolved_at = now() WHERE run_id = '$RUN' AND id = 'tampered'",
    );
    r.run(&["--json", "--run", "side", "gates", "wait", "tampered", "--timeout", "0"]);
    r.run(&["--json", "--run", "side", "gates", "wait", "tampered", "--timeout", "0", "--accept-unattested"]);
    r.run(&["--json", "--run", "side", "gates", "verify"]);
    r.raw(
        "side",
        "DROP TRIGGER gate_audit_log_no_update; \
         UPDATE gate_audit_log SET comment = 'edited' WHERE gate_id = 'deploy' AND event_type = 'approved'",
        "ALTER TABLE openprose.gate_audit_log DISABLE TRIGGER gate_audit_log_append_only; \
         UPDATE openprose.gate_audit_log SET comment = 'edited' \
         WHERE run_id = '$RUN' AND gate_id = 'deploy' AND event_type = 'approved'; \
         ALTER TABLE openprose.gate_audit_log ENABLE TRIGGER gate_audit_log_append_only",
    );
    r.run(&["--json", "--run", "side", "gates", "verify"]);
    r.run(&["--json", "--run", "side", "gates", "wait", "deploy", "--timeout", "0"]);
    r.run(&["--json", "--run", "side", "doctor"]);
    r.run(&["--json", "--run", "side", "doctor", "--fix"]);

    r.note("a gate that times out (in a run whose audit log is whole; no listing follows)");
    r.run(&[
        "--json", "--run", "side-q", "gates", "create", "brief", "--prompt", PROMPT_DEPLOY,
        "--timeout", "1s", "--on-reject", "continue",
    ]);

    r.note("guides");
    r.run(&["--json", "guide"]);
    r.run(&[
        "--json", "--run", run, "guide", "subagent", "--execution-id", block, "--name", "result",
        "--agent", "captain", "--scope", "project",
    ]);
    r.run(&["--json", "guide", "approver"]);

    r.note("usage errors");
    r.run(&["--json", "nonsense"]);
    r.run(&["--json", "--run", run, "exec-append", "--index", "1", "--text", "x"]);
    r.run(&["--json", "--run", run, "exec-append", "--index", "-1", "--text", "x", "--status", "completed"]);
    r.run(&["--json", "--busy-timeout", "x", "runs"]);

    // Past the deadline whatever the clock's second was when the gate was made.
    advance_clock(r.p.root(), 2);
    r.run(&["--json", "--run", "side-q", "gates", "wait", "brief", "--timeout", "0"]);
    r.run(&["--json", "--run", "side-q", "gates", "show", "brief", "--as", "alice"]);

    r.note("import --from filesystem (last: its run starts now, with an id older than the rest)");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/filesystem/project");
    copy_dir(&fixtures, &r.p.root().join("old-project"));
    let fs_dir = format!("old-project/.prose/runs/{FS_RUN}");
    r.run(&["--json", "import", "--from", "filesystem", &fs_dir]);
    r.run(&["--json", "import", "--from", "filesystem", &fs_dir]);
    r.run(&["--json", "--run", FS_RUN, "resume"]);

    // The filesystem run started after the wait for the gate's deadline, later than any
    // other: it is the newest whatever the clock did, so the order of the runs is fixed.
    r.note("prune for real, into an archive");
    r.run(&["--json", "prune", "--keep-days", "0", "--keep-n", "1", "--yes", "--archive", "archived"]);
    r.run(&["--json", "runs"]);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
