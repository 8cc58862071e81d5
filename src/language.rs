//! The OpenProse language as the state protocol sees it: one entry for every statement form of
//! the VM's condensed grammar (`src/grammar.txt`, kept verbatim from the VM's specification),
//! saying what the VM appends, which frame a binding made in it lives in, and what `resume`
//! says after a crash inside it. `guide vm`, the MCP `vm` prompt, `docs/language.md`,
//! `resume` and the frames `bind` and `get` resolve are all read from [`TABLE`]; a test fails
//! when a form of the grammar has no entry.
//!
//! Frames are the language's: the root and each block invocation hold bindings, and so does
//! each branch of a `parallel:`, a `parallel for` or a `pmap` (so that concurrent branches
//! never share one). An `if`, a `choice`, a loop or a `try:` record is no frame: a binding made
//! in its body belongs to the frame around it and is readable after it.

use serde::Serialize;

/// A statement form: what a start record opens, or what a statement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Use,
    Input,
    Output,
    Agent,
    Block,
    Comment,
    Session,
    Resume,
    Let,
    Const,
    Assign,
    Invoke,
    Do,
    Arrow,
    Call,
    Parallel,
    Branch,
    ParallelFor,
    Repeat,
    For,
    Loop,
    Map,
    Filter,
    Pmap,
    Reduce,
    Try,
    Catch,
    Finally,
    Throw,
    Choice,
    Option,
    If,
    Elif,
    Else,
    Approve,
}

/// Whether, and how, a construct holds bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Frame {
    /// Bindings made in it are its enclosing frame's.
    No,
    /// It is a frame: what its body declares lives in it (a block invocation, a branch).
    Yes,
    /// No frame, but it declares a name for its body alone (a loop variable, `catch as`),
    /// bound with `bind NAME --local` at its record.
    Declares,
}

/// One statement form and its place in the protocol.
#[derive(Debug, Serialize)]
pub struct Entry {
    pub kind: Kind,
    /// The grammar's rule (or rule alternative) it covers, as `src/grammar.txt` names it.
    pub rule: &'static str,
    /// How it is written.
    pub form: &'static str,
    /// The status of its start record; `None`: it is logged on completion only.
    pub start: Option<&'static str>,
    pub frame: Frame,
    /// The records the VM appends, in order.
    pub records: &'static str,
    /// Who binds what, and where.
    pub binds: &'static str,
    /// What `resume` shows after a crash inside it, and what the VM does then.
    pub resume: &'static str,
}

const STATEMENT: &str = "`completed` when it completes (`failed --error` if it fails)";

/// Every statement form of the grammar, once. The order is the guide's.
pub const TABLE: &[Entry] = &[
    Entry {
        kind: Kind::Session,
        rule: "session",
        form: "session \"…\" / session: agent",
        start: None,
        frame: Frame::No,
        records: STATEMENT,
        binds: "the subagent, when the statement binds a name",
        resume: "a binding newer than its frame's last record is `unlogged`: log it, do not run the session again",
    },
    Entry {
        kind: Kind::Resume,
        rule: "resumeStmt",
        form: "resume: agent",
        start: None,
        frame: Frame::No,
        records: STATEMENT,
        binds: "the subagent, with its memory (`guide subagent --agent NAME`); no memory yet is an error (`agent memory NAME` exits 3)",
        resume: "as a session",
    },
    Entry {
        kind: Kind::Let,
        rule: "letBinding",
        form: "let x = …",
        start: None,
        frame: Frame::No,
        records: STATEMENT,
        binds: "`bind x` in the innermost record's frame (the subagent, or you for `let a = b`: `bind a --from b`)",
        resume: "as a session",
    },
    Entry {
        kind: Kind::Const,
        rule: "constBinding",
        form: "const x = …",
        start: None,
        frame: Frame::No,
        records: STATEMENT,
        binds: "`bind x --kind const`, as `let`",
        resume: "as a session",
    },
    Entry {
        kind: Kind::Assign,
        rule: "assignment",
        form: "x = …",
        start: None,
        frame: Frame::No,
        records: STATEMENT,
        binds: "`bind x --assign`: the binding `get x` reads, in whatever frame declared it",
        resume: "as a session",
    },
    Entry {
        kind: Kind::Output,
        rule: "outputBinding",
        form: "output x = …",
        start: None,
        frame: Frame::No,
        records: STATEMENT,
        binds: "`bind x --kind output` at the root",
        resume: "as a session",
    },
    Entry {
        kind: Kind::Input,
        rule: "inputDecl",
        form: "input x: \"prompt\"",
        start: None,
        frame: Frame::No,
        records: STATEMENT,
        binds: "you, with the user's answer: `bind x --kind input` at the root",
        resume: "an input already bound is not asked again",
    },
    Entry {
        kind: Kind::Invoke,
        rule: "doBlock",
        form: "do name(args) / let x = do name(args)",
        start: Some("executing"),
        frame: Frame::Yes,
        records: "`executing` ($CALL); arguments `bind P --kind const --execution-id $CALL`; the body `--parent $CALL`; `--ends $CALL --status completed`",
        binds: "its body's names live in its frame (one per call: recursion gets one each); `let x = do …` binds x in the caller's frame, then the end",
        resume: "the call is in `position.open`; continue after `after` inside it",
    },
    Entry {
        kind: Kind::Do,
        rule: "doBlock",
        form: "do:",
        start: Some("started"),
        frame: Frame::No,
        records: "`started` ($DO); the body `--parent $DO`; `--ends $DO`",
        binds: "the enclosing frame",
        resume: "as a block",
    },
    Entry {
        kind: Kind::Arrow,
        rule: "arrowExpr",
        form: "session … -> session …",
        start: Some("started"),
        frame: Frame::No,
        records: "as `do:`, each session `completed` in it",
        binds: "the last session's result, in the enclosing frame",
        resume: "continue with the session after `after`",
    },
    Entry {
        kind: Kind::Call,
        rule: "programCall",
        form: "name(key: value)",
        start: Some("started"),
        frame: Frame::No,
        records: "as `do:`, the program's records in it",
        binds: "its names as `ALIAS.name` (`imports add` first)",
        resume: "as a block",
    },
    Entry {
        kind: Kind::Parallel,
        rule: "parallelBlock",
        form: "parallel (\"first\" | \"any\", count: N, on-fail: …):",
        start: Some("started"),
        frame: Frame::No,
        records: "`started` ($PAR) with `{\"parallel_id\", \"branches\"}` (and `strategy`, `count`, `on_fail`); each branch; `--ends $PAR --status joined`",
        binds: "a named branch `a = …` binds a with `--execution-id $PAR`: readable after the join",
        resume: "`parallel` lists each branch: completed, failed, outstanding; run only the outstanding ones",
    },
    Entry {
        kind: Kind::Branch,
        rule: "parallelBranch",
        form: "a branch of parallel, parallel for or pmap",
        start: Some("started"),
        frame: Frame::Yes,
        records: "`started --construct branch --parent $PAR` with `{\"parallel_id\", \"branch\"}` ($BR); its body `--parent $BR`; `--ends $BR` (`completed`, `failed` or `skipped`)",
        binds: "what the branch declares (its `let`s, a `parallel for`'s variable) lives in its frame",
        resume: "an open branch is outstanding; continue it after `after` inside it",
    },
    Entry {
        kind: Kind::ParallelFor,
        rule: "forEachBlock",
        form: "parallel for x in items:",
        start: Some("started"),
        frame: Frame::No,
        records: "as `parallel:`, one branch per item (`\"branches\"`: the items' positions); `bind x ITEM --kind const --execution-id $BR` in each",
        binds: "as `parallel:`",
        resume: "as `parallel:`",
    },
    Entry {
        kind: Kind::Repeat,
        rule: "repeatBlock",
        form: "repeat N (as i):",
        start: Some("started"),
        frame: Frame::Declares,
        records: "`started` ($LOOP) with `{\"loop_id\", \"max\"}`; each iteration: `bind i N --local`, the body, `iteration` with `{\"iteration\": n}`, all `--parent $LOOP`; `--ends $LOOP --status exited` with `{\"reason\": \"max\"}` (all done; a condition met: `\"condition_satisfied\"`)",
        binds: "the body's names: the enclosing frame (readable after); `i` only inside",
        resume: "`loops` gives the iteration in progress; continue after `after` inside it",
    },
    Entry {
        kind: Kind::For,
        rule: "forEachBlock",
        form: "for x in items:",
        start: Some("started"),
        frame: Frame::Declares,
        records: "as `repeat`, binding x each iteration with `--local`",
        binds: "as `repeat`",
        resume: "as `repeat`",
    },
    Entry {
        kind: Kind::Loop,
        rule: "loopBlock",
        form: "loop until|while **…** (max: N) (as i):",
        start: Some("started"),
        frame: Frame::Declares,
        records: "as `repeat`; the condition is judged before each iteration (the VM spec; the language reference says after each: either way, the body never runs past `max`)",
        binds: "as `repeat`: an assignment in the body (`x = …`) is `bind x --assign`, read by the condition",
        resume: "as `repeat`",
    },
    Entry {
        kind: Kind::Map,
        rule: "pipeOp",
        form: "items | map:",
        start: Some("started"),
        frame: Frame::Declares,
        records: "as `for` (`item` bound `--local`); the result bound `[]` first, then each item `bind RESULT --append V --key $LOOP-n`",
        binds: "the result list in the enclosing frame",
        resume: "as `repeat`; an item appended before the crash is not appended again (same `--key`)",
    },
    Entry {
        kind: Kind::Filter,
        rule: "pipeOp",
        form: "items | filter:",
        start: Some("started"),
        frame: Frame::Declares,
        records: "as `map`, appending the items kept",
        binds: "as `map`",
        resume: "as `map`",
    },
    Entry {
        kind: Kind::Pmap,
        rule: "pipeOp",
        form: "items | pmap:",
        start: Some("started"),
        frame: Frame::No,
        records: "as `parallel for`; each branch appends its result with `--key $BR`",
        binds: "as `map`",
        resume: "as `parallel:`",
    },
    Entry {
        kind: Kind::Reduce,
        rule: "pipeOp",
        form: "items | reduce(acc, item):",
        start: Some("started"),
        frame: Frame::Declares,
        records: "as `for`; each iteration `acc` (the result so far) and `item` bound `--local`, and the fold written to the result with `bind RESULT --assign`",
        binds: "the result, bound in the enclosing frame before the loop (the first item, or the initial value); a fold written before a crash reads `unlogged`",
        resume: "as `repeat`",
    },
    Entry {
        kind: Kind::Try,
        rule: "tryBlock",
        form: "try:",
        start: Some("started"),
        frame: Frame::No,
        records: "`started` ($TRY); the body `--parent $TRY`, a failure `failed --error`, then each construct it leaves `--ends ID --status failed`, innermost first; `catch`, `finally`; `--ends $TRY` (`failed` if the error leaves it)",
        binds: "the enclosing frame",
        resume: "a `failed` record inside it with no `catch` after: run the catch",
    },
    Entry {
        kind: Kind::Catch,
        rule: "catch",
        form: "catch (as err):",
        start: Some("started"),
        frame: Frame::Declares,
        records: "`started --parent $TRY` ($CATCH); `bind err MSG --local --execution-id $CATCH`; its body `--parent $CATCH`; `--ends $CATCH`",
        binds: "err only inside; the rest the enclosing frame",
        resume: "as a block",
    },
    Entry {
        kind: Kind::Finally,
        rule: "finally",
        form: "finally:",
        start: Some("started"),
        frame: Frame::No,
        records: "as `do:`, started `--parent $TRY`",
        binds: "the enclosing frame",
        resume: "as a block",
    },
    Entry {
        kind: Kind::Throw,
        rule: "throwStatement",
        form: "throw (\"msg\")",
        start: None,
        frame: Frame::No,
        records: "`failed --error MSG` (bare, in a catch: the caught error); the nearest open `try:` catches it, else `finish --status failed --error MSG`",
        binds: "nothing",
        resume: "its `failed` record is `after`: run the catch of the open `try:` around it, else finish the run as failed",
    },
    Entry {
        kind: Kind::Choice,
        rule: "choiceBlock",
        form: "choice **…**:",
        start: Some("started"),
        frame: Frame::No,
        records: "choose, then `started` ($CHOICE) with `{\"taken\": \"OPTION\"}`; its body `--parent $CHOICE`; `--ends $CHOICE`",
        binds: "the enclosing frame",
        resume: "`taken` is in the open record: do not choose again",
    },
    Entry {
        kind: Kind::Option,
        rule: "option",
        form: "option \"…\":",
        start: None,
        frame: Frame::No,
        records: "none of its own: the choice's `taken`",
        binds: "the enclosing frame",
        resume: "as `choice`",
    },
    Entry {
        kind: Kind::If,
        rule: "ifStatement",
        form: "if **…**:",
        start: Some("started"),
        frame: Frame::No,
        records: "judge, then `started` ($IF) with `{\"taken\": \"if\"|\"elif N\"|\"else\"|\"none\"}`; its body `--parent $IF`; `--ends $IF`",
        binds: "the enclosing frame: readable after the `if`",
        resume: "`taken` is in the open record: do not judge again",
    },
    Entry {
        kind: Kind::Elif,
        rule: "elif",
        form: "elif **…**:",
        start: None,
        frame: Frame::No,
        records: "none of its own: the `if`'s `taken` (`elif 1` is the first)",
        binds: "the enclosing frame",
        resume: "as `if`",
    },
    Entry {
        kind: Kind::Else,
        rule: "else",
        form: "else:",
        start: None,
        frame: Frame::No,
        records: "none of its own: the `if`'s `taken`",
        binds: "the enclosing frame",
        resume: "as `if`",
    },
    Entry {
        kind: Kind::Approve,
        rule: "approve",
        form: "approve name: (prompt, allow, timeout, on_reject)",
        start: None,
        frame: Frame::No,
        records: "`gates create` (it logs `approve`), `gates wait --instance N`, `completed`; rejected or timed out: `failed --error REASON`, then `on_reject` (`throw \"msg\"` raises msg; `retry`: the step again, then `--reopen`; `session`: logged at the gate's index)",
        binds: "nothing; with `--response-binding NAME`, the decision binds NAME in the enclosing frame",
        resume: "`gates` gives the instance and `next_step`",
    },
    Entry {
        kind: Kind::Use,
        rule: "useStatement",
        form: "use \"…\" as alias",
        start: None,
        frame: Frame::No,
        records: "none: `imports add ALIAS --source SOURCE` once",
        binds: "nothing",
        resume: "`imports` lists it",
    },
    Entry {
        kind: Kind::Agent,
        rule: "agentDef",
        form: "agent name:",
        start: None,
        frame: Frame::No,
        records: "none (a definition); a persistent agent's memory is its subagent's",
        binds: "nothing",
        resume: "`agents` lists those with memory",
    },
    Entry {
        kind: Kind::Block,
        rule: "blockDef",
        form: "block name(params):",
        start: None,
        frame: Frame::No,
        records: "none (a definition)",
        binds: "nothing",
        resume: "-",
    },
    Entry {
        kind: Kind::Comment,
        rule: "comment",
        form: "# …",
        start: None,
        frame: Frame::No,
        records: "none",
        binds: "nothing",
        resume: "-",
    },
];

impl Kind {
    /// Its entry in [`TABLE`].
    pub fn entry(self) -> &'static Entry {
        TABLE
            .iter()
            .find(|e| e.kind == self)
            .expect("every kind has an entry (tested)")
    }

    /// Its name, as `--construct` takes it and `resume` shows it.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .expect("every kind has a name (tested)")
    }

    pub fn parse(name: &str) -> Option<Kind> {
        NAMES.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    /// A construct with a start record (and so an end that names it).
    pub fn opens(self) -> bool {
        self.entry().start.is_some()
    }
}

/// The names `--construct` takes.
pub const NAMES: &[(&str, Kind)] = &[
    ("use", Kind::Use),
    ("input", Kind::Input),
    ("output", Kind::Output),
    ("agent", Kind::Agent),
    ("block", Kind::Block),
    ("comment", Kind::Comment),
    ("session", Kind::Session),
    ("resume", Kind::Resume),
    ("let", Kind::Let),
    ("const", Kind::Const),
    ("assign", Kind::Assign),
    ("invoke", Kind::Invoke),
    ("do", Kind::Do),
    ("arrow", Kind::Arrow),
    ("call", Kind::Call),
    ("parallel", Kind::Parallel),
    ("branch", Kind::Branch),
    ("parallel-for", Kind::ParallelFor),
    ("repeat", Kind::Repeat),
    ("for", Kind::For),
    ("loop", Kind::Loop),
    ("map", Kind::Map),
    ("filter", Kind::Filter),
    ("pmap", Kind::Pmap),
    ("reduce", Kind::Reduce),
    ("try", Kind::Try),
    ("catch", Kind::Catch),
    ("finally", Kind::Finally),
    ("throw", Kind::Throw),
    ("choice", Kind::Choice),
    ("option", Kind::Option),
    ("if", Kind::If),
    ("elif", Kind::Elif),
    ("else", Kind::Else),
    ("approve", Kind::Approve),
];

/// A name as the grammar's IDENTIFIER (letters, digits, `_`, `.` for imports; not first a digit).
fn identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '.')
}

/// The first word of `s` (up to a space, `:`, `(` or `"`), and the rest.
fn first_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s
        .find(|c: char| c.is_whitespace() || matches!(c, ':' | '(' | '"' | '='))
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// What an expression opens, if anything (`do name(…)`, `parallel:`, a loop, a pipeline, an
/// arrow, a program call), else `None`.
fn expression(e: &str) -> Option<Kind> {
    let e = e.trim();
    let (word, rest) = first_word(e);
    let opened = match word {
        "do" if rest.trim_start().starts_with(':') => Some(Kind::Do),
        "do" => Some(Kind::Invoke),
        "parallel" if first_word(rest).0 == "for" => Some(Kind::ParallelFor),
        "parallel" => Some(Kind::Parallel),
        "repeat" => Some(Kind::Repeat),
        "for" => Some(Kind::For),
        "loop" => Some(Kind::Loop),
        _ => None,
    };
    if opened.is_some() {
        return opened;
    }
    // A pipeline: the first operation after a `|` outside quotes.
    if let Some(op) = pipe_op(e) {
        return Some(op);
    }
    if word == "session" || word == "resume" {
        return e.contains("->").then_some(Kind::Arrow);
    }
    (identifier(word) && rest.trim_start().starts_with('(')).then_some(Kind::Call)
}

/// The first pipeline operation of `e` (`| map:`, `| filter:`, `| pmap:`, `| reduce(`).
fn pipe_op(e: &str) -> Option<Kind> {
    let mut quoted = false;
    for (i, c) in e.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '|' if !quoted => {
                return match first_word(&e[i + 1..]).0 {
                    "map" => Some(Kind::Map),
                    "filter" => Some(Kind::Filter),
                    "pmap" => Some(Kind::Pmap),
                    "reduce" => Some(Kind::Reduce),
                    _ => None,
                };
            }
            _ => {}
        }
    }
    None
}

/// The actions an `approve` statement's `on_reject` names; anything else is a message thrown.
pub const ON_REJECT_ACTIONS: [&str; 4] = ["throw", "retry", "continue", "session"];

/// The action an `on_reject` reads like but does not name: its first word a letter off one,
/// two letters swapped, or one in another case (`retyr draft`, `Continue`, `Throw:`). Such a
/// text would be thrown as a message, which no program meant. None for an action as written,
/// a quoted message, or a first word like no action.
pub fn on_reject_near_miss(text: &str) -> Option<&'static str> {
    let text = text.trim_start();
    let word = &text[..text
        .find(|c: char| c.is_whitespace() || c == ':' || c == '"')
        .unwrap_or(text.len())];
    if word.is_empty() || ON_REJECT_ACTIONS.contains(&word) || word.starts_with('\'') {
        return None;
    }
    let lower = word.to_lowercase();
    ON_REJECT_ACTIONS
        .into_iter()
        .find(|a| strsim::osa_distance(&lower, a) <= 1)
}

/// Whether `text` is an `on_reject` the language writes: `throw` or `throw "message"`,
/// `retry` or `retry LABEL`, `continue`, `session "prompt"`, `session: AGENT` or
/// `session NAME: AGENT`, or a `"message"` alone (thrown). On one line, its strings the
/// language's (`"…"` with the escapes `\\`, `\"`, `\n`, `\t`, `\{`, `\}`). Says what is
/// wrong where it is not.
pub fn check_on_reject(text: &str) -> std::result::Result<(), String> {
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(format!(
            "it holds a control character ({}): it is one line, a newline in its string written \\n",
            c.escape_debug()
        ));
    }
    let t = text.trim();
    if t.starts_with('"') {
        return string_alone(t);
    }
    if let Some(action) = on_reject_near_miss(t) {
        return Err(format!(
            "it reads like `{action}` but is not it, so the gate would throw it as a message: write `{action}` as the language does, or quote the message"
        ));
    }
    let end = t
        .find(|c: char| c.is_whitespace() || c == ':' || c == '"')
        .unwrap_or(t.len());
    let (word, rest) = (&t[..end], t[end..].trim_start());
    match word {
        "throw" if rest.is_empty() => Ok(()),
        "throw" => string_alone(rest),
        "retry" if rest.is_empty() || is_identifier(rest) => Ok(()),
        "retry" => Err(format!(
            "`retry` takes a label, one name, not {}",
            serde_json::Value::from(rest)
        )),
        "continue" if rest.is_empty() => Ok(()),
        "continue" => Err("`continue` takes nothing after it".into()),
        "session" if rest.starts_with('"') => string_alone(rest),
        "session" => {
            // `session: AGENT` or `session NAME: AGENT`, as the language's session statement.
            let (name, agent) = rest.split_once(':').unwrap_or(("", rest));
            let name = name.trim();
            if rest.contains(':')
                && (name.is_empty() || is_identifier(name))
                && is_identifier(agent.trim())
            {
                Ok(())
            } else {
                Err("`session` takes a \"prompt\", `: AGENT` or `NAME: AGENT`".into())
            }
        }
        _ => Err("it is none of the language's actions, nor a \"message\" in quotes".into()),
    }
}

/// A name the language writes: a letter or `_`, then letters, digits, `_` or `-`.
fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// The value of one string literal of the language (`"a\\nb"`: a, a newline, b); None where
/// `text` is not one (`string_alone` says why).
pub fn string_value(text: &str) -> Option<String> {
    let text = text.trim();
    string_alone(text).ok()?;
    let mut out = String::new();
    let mut chars = text[1..text.len() - 1].chars();
    while let Some(c) = chars.next() {
        out.push(match (c, c == '\\') {
            (_, true) => match chars.next()? {
                'n' => '\n',
                't' => '\t',
                other => other,
            },
            (c, false) => c,
        });
    }
    Some(out)
}

/// Whether `text` is one string literal of the language, and nothing after it.
fn string_alone(text: &str) -> std::result::Result<(), String> {
    let mut chars = text.char_indices();
    if chars.next().map(|(_, c)| c) != Some('"') {
        return Err(format!(
            "{} is not a \"string\"",
            serde_json::Value::from(text)
        ));
    }
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('\\' | '"' | 'n' | 't' | '{' | '}') => {}
                other => {
                    return Err(format!(
                        "its string has an unknown escape \\{} (the language's: \\\\, \\\", \\n, \\t, \\{{, \\}})",
                        other.map(String::from).unwrap_or_default()
                    ))
                }
            },
            '"' => {
                let after = text[i + 1..].trim();
                return match after.is_empty() {
                    true => Ok(()),
                    false => Err(format!(
                        "after its string comes {}",
                        serde_json::Value::from(after)
                    )),
                };
            }
            _ => {}
        }
    }
    Err("its string is not closed with a \"".into())
}

/// The gate an `approve NAME:` record's text names (what `gates create` logs, and the VM's
/// `completed` or `failed` record of the statement).
/// Read as the statement's first line, its comment cut, the colon optional: `approve g:`,
/// `approve g: # why`, `approve g` and the statement with its property lines all name `g`.
/// The keyword is read in any case (`Approve g:`): every reader of the log (`resume`, the
/// checks `exec-append` makes) is as tolerant as the most careless VM, so that no spelling of
/// the statement names a gate for one reader and none for another.
pub fn approved_gate(text: &str) -> Option<&str> {
    let first = text.trim_start().lines().next()?;
    let first = first.split('#').next()?.trim();
    let rest = first
        .get(..7)
        .filter(|w| w.eq_ignore_ascii_case("approve"))
        .map(|_| &first[7..])?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    // The name ends at its colon (no gate id holds one): `approve g: (prompt, allow)` is g's.
    let name = rest.split(':').next().unwrap_or_default().trim();
    Some(name).filter(|n| !n.is_empty())
}

/// The statement form of a record's text, by the grammar's leading keyword. A binding whose
/// expression opens a construct (`let x = do refine(…)`, `a = parallel:`) is that construct.
/// `None`: the text is not the program's own (say `loop`, or `parallel:a` as older guides
/// wrote a branch's end).
pub fn classify(text: &str) -> Option<Kind> {
    let t = text.trim_start();
    if t.starts_with('#') {
        return Some(Kind::Comment);
    }
    let (word, rest) = first_word(t);
    let after_eq = |r: &str| r.split_once('=').map(|(_, e)| e.to_string());
    let binding = |kind: Kind, r: &str| after_eq(r).map(|e| expression(&e).unwrap_or(kind));
    match word {
        "use" => Some(Kind::Use),
        "input" => Some(Kind::Input),
        "agent" => Some(Kind::Agent),
        "block" => Some(Kind::Block),
        "session" => Some(expression(t).unwrap_or(Kind::Session)),
        "resume" if rest.trim_start().starts_with(':') => {
            Some(expression(t).unwrap_or(Kind::Resume))
        }
        "let" => binding(Kind::Let, rest),
        "const" => binding(Kind::Const, rest),
        "output" => binding(Kind::Output, rest),
        "try" => Some(Kind::Try),
        "catch" => Some(Kind::Catch),
        "finally" => Some(Kind::Finally),
        "throw" => Some(Kind::Throw),
        "choice" => Some(Kind::Choice),
        "option" => Some(Kind::Option),
        "if" => Some(Kind::If),
        "elif" => Some(Kind::Elif),
        "else" => Some(Kind::Else),
        "approve" => Some(Kind::Approve),
        "do" | "parallel" | "repeat" | "for" | "loop" => {
            // `loop` alone, or `parallel:a` (an older guide's branch), is not the program's
            // text: only a form the grammar writes is classified.
            let k = expression(t)?;
            let well_formed = match k {
                Kind::Parallel => {
                    let r = rest.trim_start();
                    r.starts_with('(') || r == ":" || r.starts_with(":\n")
                }
                Kind::Loop => t.trim_end().ends_with(':'),
                _ => true,
            };
            well_formed.then_some(k)
        }
        w if identifier(w)
            && rest.trim_start().starts_with('=')
            && !rest.trim_start().starts_with("==") =>
        {
            binding(Kind::Assign, rest)
        }
        _ => expression(t),
    }
}

/// The name a statement assigns (`name = ...`, the form of a named branch of a parallel), if
/// it is one.
pub fn assigned_name(text: &str) -> Option<&str> {
    let (word, rest) = first_word(text);
    let rest = rest.trim_start();
    (identifier(word) && rest.starts_with('=') && !rest.starts_with("==")).then_some(word)
}

/// Whether a start record opens a frame: a block invocation or a branch (as `--construct`
/// named it, or as its text reads); or, for a record whose text is not the program's own, a
/// start with the status older guides gave block invocations (`executing`).
pub fn is_frame(construct: Option<Kind>, status: Option<&str>) -> bool {
    match construct {
        Some(k) => k.entry().frame == Frame::Yes && k.opens(),
        None => status == Some("executing"),
    }
}

/// The construct a start record opens: its metadata's `construct` (set by `exec-append
/// --construct`) if any, else its text's. `None` when neither names a construct that opens
/// (a start whose text is a plain statement, or not the program's own).
pub fn construct_of(text: Option<&str>, metadata: Option<&serde_json::Value>) -> Option<Kind> {
    metadata
        .and_then(|m| m.get("construct"))
        .and_then(|c| c.as_str())
        .and_then(Kind::parse)
        .or_else(|| text.and_then(classify))
        .filter(|k| k.opens())
}

/// The grammar the table is checked against: the VM specification's condensed grammar.
pub const GRAMMAR: &str = include_str!("grammar.txt");

/// A table cell: `|` escaped, so that `items | map:` stays one cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A construct's records as the guide shows them: without its body's `--parent $X` and its
/// plain `--ends $X`, which the guide says once for every construct.
fn guide_records(records: &str) -> String {
    let Some(var) = records
        .split_once("($")
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(v, _)| v)
    else {
        return records.to_string();
    };
    let mut out = records.to_string();
    for generic in [
        format!("; the body `--parent ${var}`"),
        format!("; its body `--parent ${var}`"),
        format!("; `--ends ${var}`"),
    ] {
        if let Some(at) = out.find(&generic) {
            let rest = &out[at + generic.len()..];
            // Only a whole item with nothing said of it: the next one starts, or the records end.
            if rest.is_empty() || rest.starts_with(';') {
                out.replace_range(at..at + generic.len(), "");
            }
        }
    }
    out
}

/// The guide's table of record shapes, from [`TABLE`]: the plain statements in one row, then
/// one row per construct with records of its own (those that read "as …" another, those that
/// are a plain start, and the bindings, are left to `docs/language.md` and the guide's own
/// words).
pub fn guide_table() -> String {
    let mut out = String::from("| construct | records you append |\n|---|---|\n");
    let plain: Vec<String> = TABLE
        .iter()
        .filter(|e| e.records == STATEMENT)
        .map(|e| format!("`{}`", cell(e.form)))
        .collect();
    out.push_str(&format!("| {} | {} |\n", plain.join(", "), STATEMENT));
    for e in TABLE {
        if e.records == STATEMENT || e.records.starts_with("as ") || e.records.starts_with("none") {
            continue;
        }
        let records = guide_records(e.records);
        if records.starts_with("`started` ($") && !records.contains(';') {
            continue;
        }
        // The forms logged as this one (`as `repeat``: `for`, `loop until`) share its row: a
        // reference names its keyword (`repeat`), or a block's with its colon (`parallel:`).
        let keyword = e.form.split([' ', '(']).next().unwrap_or_default();
        let names =
            |r: &str| r == keyword || (e.form.ends_with(':') && r.trim_end_matches(':') == keyword);
        let mut forms = vec![format!("`{}`", cell(e.form))];
        forms.extend(
            TABLE
                .iter()
                .filter(|o| {
                    o.records
                        .strip_prefix("as `")
                        .and_then(|r| r.split('`').next())
                        .is_some_and(names)
                })
                .map(|o| format!("`{}`", cell(o.form))),
        );
        out.push_str(&format!("| {} | {} |\n", forms.join(", "), cell(&records)));
    }
    out
}

/// The whole table, for `docs/language.md`.
pub fn docs_table() -> String {
    let mut out = String::from(
        "| construct | `--construct` | start | frame | records the VM appends | bindings | after a crash inside it |\n|---|---|---|---|---|---|---|\n",
    );
    for e in TABLE {
        let frame = match e.frame {
            Frame::No => "no",
            Frame::Yes => "yes",
            Frame::Declares => "declares a name",
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {frame} | {} | {} | {} |\n",
            cell(e.form),
            e.kind.name(),
            e.start.map_or("-".to_string(), |s| format!("`{s}`")),
            cell(e.records),
            cell(e.binds),
            cell(e.resume)
        ));
    }
    out
}

#[cfg(test)]
mod tests;
