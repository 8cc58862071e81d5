//! Which commands are served as tools, to which roles, and what a model reads about them and
//! their arguments: the role tool tables, and the arguments no tool takes.

use super::Role;

/// One tool: the subcommand it serves, the roles whose sessions have it, what a model reads
/// about it, and how its answer is bounded.
pub(super) struct Served {
    pub(super) name: &'static str,
    pub(super) path: &'static [&'static str],
    pub(super) read_only: bool,
    pub(super) roles: &'static [Role],
    pub(super) about: &'static str,
    pub(super) page: Page,
    /// The subcommand's own options the tool does not take (paged lists page themselves).
    pub(super) skip: &'static [&'static str],
}

/// How a tool's answer is kept within its bound (see [`pages`]).
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Page {
    /// Small by nature: one record, one gate, one number.
    Whole,
    /// A list, under this name: `cursor` and `limit`.
    List(&'static str),
    /// One gate with a page of its audit history: `cursor` and `limit` over the events.
    History,
    /// The log: `since` and `limit`.
    Log,
    /// A binding's value: `offset` and `length`.
    Value,
    /// An agent's memory: `offset` and `length`.
    Memory,
}

const VM_ONLY: &[Role] = &[Role::Vm];
const BOTH: &[Role] = &[Role::Vm, Role::Subagent];

pub(super) const SERVED: &[Served] = &[
    Served {
        roles: VM_ONLY,
        about: "Create a new run (its directory and state). The run made becomes this session's \
                run: later calls need no `run`.",
        ..Served::new("init", &["init"], false)
    },
    Served {
        about: "Write a binding in the root or in the frame of `execution_id` (a block call or \
                branch; a record inside one binds in it). The value: `value` as given, or `from` \
                a binding; `append`/`merge` update a JSON array/object atomically. A large value becomes an attachment.",
        ..Served::new("bind", &["bind"], false)
    },
    Served {
        page: Page::Value,
        about: "Read a binding, looked up from an execution's scope up to the root, in pages: \
                `value` holds at most `length` bytes from `offset`, `total_bytes` the whole \
                size, `next_offset` the next page (null at the end). A large value's summary is \
                in `summary`. Read only what you need: `length` 0 gives the size alone.",
        ..Served::new("get", &["get"], true)
    },
    Served {
        about: "List a binding's versions, newest first: `version`, time, `after_record`, \
                `by` and the value's start. `next_before` as `before` pages back.",
        ..Served::new("history", &["history"], true)
    },
    Served {
        roles: VM_ONLY,
        about: "Append one record to the run's execution log: `index`, `text`, `status`, \
                `parent`; or `ends` a start (taking its index, text and parent; it lands once). \
                A `key` makes a retried append land once. Returns the record's id.",
        ..Served::new("exec_append", &["exec-append"], false)
    },
    Served {
        page: Page::List("rows"),
        about: "Run one read-only SQL statement on the run: its rows (as `sqlite3 -json`), \
                `columns` in order, a page at a time (`next_cursor`).",
        ..Served::new("query", &["query"], true)
    },
    Served {
        roles: VM_ONLY,
        page: Page::List("gates"),
        skip: &["pending", "limit"],
        about: "Gates, oldest first, pending unless `status` says: the session run's, \
                checked (`integrity`), else every run's, unchecked.",
        ..Served::new("gates_list", &["gates"], true)
    },
    Served {
        roles: VM_ONLY,
        about: "Open an approval gate (`approve GATE_ID:`): a person on `allow` decides it, \
                never an agent.",
        ..Served::new("gates_create", &["gates", "create"], false)
    },
    // Showing a gate logs a `viewed` event: it writes.
    Served {
        roles: VM_ONLY,
        page: Page::History,
        about: "Show one gate with a page of its audit history (`history_total` counts it \
                all). Each call logs that this agent viewed the gate.",
        ..Served::new("gates_show", &["gates", "show"], false)
    },
    Served {
        roles: VM_ONLY,
        about: "Wait for a person to decide a gate: class ok (approved), rejected, timed_out, \
                stale (its inputs changed: open it again), or still_pending when `timeout` ran \
                out (call again). Several: `gates` with `all` or `any`. `instance` (from \
                gates_create or resume): that opening's own outcome.",
        ..Served::new("gates_wait", &["gates", "wait"], false)
    },
    Served {
        page: Page::Memory,
        about: "Read an agent's memory (this session's agent unless a VM names another), in \
                pages from `offset` (`next_offset`).",
        ..Served::new("agent_memory", &["agent", "memory"], true)
    },
    Served {
        about: "Replace an agent's memory with `value`, stored exactly as given (this session's \
                agent unless a VM names another).",
        ..Served::new("agent_remember", &["agent", "remember"], false)
    },
    Served {
        about: "Record a session of an agent (its prompt and what it did) in its log.",
        ..Served::new("agent_segment", &["agent", "segment"], false)
    },
    Served {
        page: Page::List("agents"),
        about: "List the persistent agents of a `scope`, with their segment counts and memory \
                sizes.",
        ..Served::new("agents_list", &["agent", "list"], true)
    },
    Served {
        roles: VM_ONLY,
        page: Page::List("imports"),
        about: "List the run's import registry: each alias and where it came from. Paged by \
                `cursor` and `limit`.",
        ..Served::new("imports_list", &["imports"], true)
    },
    Served {
        roles: VM_ONLY,
        skip: &["inputs_schema", "outputs_schema"],
        about: "Register a `use` import: `alias`, `source` (once; `replace` to change it).",
        ..Served::new("imports_add", &["imports", "add"], false)
    },
    Served {
        roles: VM_ONLY,
        page: Page::List("runs"),
        skip: &["limit"],
        about: "List the project's runs, newest first, with their status and pending gates. \
                Paged by `cursor` and `limit`.",
        ..Served::new("runs_list", &["runs"], true)
    },
    Served {
        roles: VM_ONLY,
        skip: &["all"],
        about: "Where the run stands, to continue it after losing your context (at most 16 \
                KiB): position, open constructs, retries, gates with the `instance` to wait on \
                and `next_step`, counts, and a page of visible bindings (`next_cursor`). \
                Without a run: the project's unfinished runs (one: its answer), then call \
                again with `run`, which becomes the session's.",
        ..Served::new("resume", &["resume"], false)
    },
    Served {
        roles: VM_ONLY,
        about: "Set the run's final status (completed: refused while a gate is pending).",
        ..Served::new("finish", &["finish"], false)
    },
    Served {
        page: Page::Log,
        about: "Read the execution log after event `since` (0: from the start), a page at a \
                time: `next_since` as `since` reads on.",
        ..Served::new("log_since", &["log"], true)
    },
    Served {
        roles: VM_ONLY,
        skip: &["all", "exit_code"],
        about: "Compare two runs (a fork and its source, or any two), read-only: the bindings \
                that differ, the records both logs begin with alike then each run's own, the \
                gates that differ. Lists are bounded: `bindings.next_cursor` as `cursor` \
                continues; `log_since` reads further records.",
        ..Served::new("diff", &["diff"], true)
    },
    Served {
        roles: VM_ONLY,
        about: "Make a new run whose state is this run's as of record `at`: its records up \
                to it, bindings, memory and gates as they stood (decisions carried). `bind` \
                replaces root inputs (`NAME=VALUE`): how a run is retried with a corrected \
                input. The source is untouched; the new run is not the session's.",
        ..Served::new("fork", &["fork"], false)
    },
];

impl Served {
    const fn new(name: &'static str, path: &'static [&'static str], read_only: bool) -> Self {
        Served {
            name,
            path,
            read_only,
            roles: BOTH,
            about: "",
            page: Page::Whole,
            skip: &[],
        }
    }
}

/// An agent tool's `scope`, shorter than the command line's help (every byte is read at each
/// session's start).
const SCOPE: &str = "execution (persist: true), project, user, or a path";

/// Descriptions of arguments, written for a model calling a tool where the command line's
/// help would mislead it (stdin, comma-separated lists, `--options`).
pub(super) const DESCRIBED: &[(&str, &str, &str)] = &[
    (
        "bind",
        "value",
        "The value, stored exactly as given (`-` is the one character `-`)",
    ),
    (
        "bind",
        "file",
        "Read the value from this file on the server's machine",
    ),
    (
        "bind",
        "if_version",
        "Write only at this version (0: unbound), else refused",
    ),
    (
        "bind",
        "append",
        "Append this (JSON, else a string) to the JSON array",
    ),
    ("bind", "merge", "Merge this JSON object in (RFC 7396)"),
    ("bind", "key", "append/merge once per key"),
    ("bind", "from", "Copy this binding's value (`let a = b`)"),
    (
        "bind",
        "from_execution_id",
        "Look `from` up from this record (default: execution_id)",
    ),
    (
        "bind",
        "execution_id",
        "Bind in this record's frame (default: root)",
    ),
    (
        "bind",
        "local",
        "At the execution_id record itself (loop variable, `catch as err`)",
    ),
    (
        "bind",
        "assign",
        "Write the binding `get` reads from here (`x = ...`)",
    ),
    ("bind", "source", "The statement that made the value"),
    ("bind", "summary", "One-line summary"),
    ("bind", "kind", "A const is never rebound"),
    ("bind", "name", "Binding name"),
    (
        "get",
        "as_of",
        "Read it as it stood after this record id, or at this UTC time",
    ),
    ("get", "version", "Read this version (`history` lists them)"),
    (
        "get",
        "execution_id",
        "Look up from this record's scope (default: the root)",
    ),
    (
        "history",
        "execution_id",
        "The binding seen from this record's scope (default: the root)",
    ),
    ("history", "before", "Only versions older than this one"),
    (
        "exec_append",
        "key",
        "Idempotency key: sent again, appends nothing",
    ),
    ("exec_append", "ends", "The start record this ends"),
    (
        "exec_append",
        "construct",
        "What a start opens if its text does not say",
    ),
    ("exec_append", "text", "Statement text"),
    (
        "exec_append",
        "index",
        "Statement index in its body, from 1",
    ),
    ("exec_append", "parent", "The enclosing record's id"),
    ("exec_append", "metadata", "A JSON object"),
    ("init", "run_id", "The run's id (default: a new one)"),
    ("gates_create", "gate_id", "Gate id (`approve GATE_ID:`)"),
    ("gates_create", "prompt", "What the person decides"),
    ("query", "sql", "One read-only SQL statement"),
    ("imports_add", "alias", "The `use` alias"),
    ("agent_memory", "scope", SCOPE),
    ("agent_remember", "scope", SCOPE),
    ("agent_segment", "scope", SCOPE),
    ("agents_list", "scope", SCOPE),
    ("imports_add", "source", "The `use` source"),
    ("imports_add", "replace", "Replace a different source"),
    ("query", "timeout", "Stop it after this long (30s)"),
    (
        "gates_wait",
        "accept_carried_from",
        "Count a decision a fork this VM made carried from this run",
    ),
    (
        "gates_wait",
        "instance",
        "That opening's decision (from gates_create or resume)",
    ),
    ("init", "program", "The .prose program to keep with the run"),
    (
        "gates_create",
        "escalate_to",
        "At the deadline, open to this principal or group too",
    ),
    (
        "gates_create",
        "escalate_timeout",
        "The deadline after an escalation (default: timeout again)",
    ),
    (
        "gates_create",
        "remind",
        "Remind this long before the deadline (needs timeout)",
    ),
    (
        "gates_create",
        "no_self_approve",
        "The run's starter and the gate's creator may not approve it",
    ),
    (
        "gates_create",
        "on_reject",
        "What the program does on rejection or timeout, as written",
    ),
    (
        "gates_create",
        "require",
        "Approvals needed, by distinct allowed principals",
    ),
    (
        "gates_create",
        "reopen",
        "Open a decided gate again (its next instance)",
    ),
    (
        "gates_create",
        "veto",
        "off: a rejection needs `require` rejections too",
    ),
    (
        "gates_create",
        "timeout",
        "Deadline from now (30s, 4h, 7d, 2h30m, or seconds)",
    ),
    (
        "gates_create",
        "execution_id",
        "The enclosing record (parent of `approve`)",
    ),
    ("gates_create", "index", "The `approve` statement's index"),
    ("gates_create", "metadata", "A JSON object"),
    (
        "gates_create",
        "response_schema",
        "JSON Schema an approval's answer fits",
    ),
    (
        "gates_create",
        "response_binding",
        "Binding the answer goes to",
    ),
    (
        "gates_wait",
        "require_signed",
        "Count only a decision the approval page signed",
    ),
    (
        "gates_wait",
        "key",
        "The page's key (ed25519:HEX) to check signatures with",
    ),
    (
        "gates_wait",
        "poll",
        "How often to look (default 1s; 30s when woken by commits)",
    ),
    (
        "gates_wait",
        "any",
        "Ok as soon as one is approved; fails when all failed",
    ),
    (
        "gates_wait",
        "all",
        "Ok when all are approved; fails as soon as one fails",
    ),
    (
        "gates_list",
        "expiring",
        "Only gates whose deadline is within this long",
    ),
    (
        "diff",
        "limit",
        "At most this many entries a list (default 20)",
    ),
    ("diff", "name", "Only the bindings of this name"),
    (
        "fork",
        "at",
        "The record to fork at (its id, as `log_since` shows it)",
    ),
    (
        "fork",
        "backend",
        "Where the fork is kept (default: the project's)",
    ),
    (
        "init",
        "backend",
        "sqlite (a state.db) or postgres (the project's server)",
    ),
    (
        "runs_list",
        "since",
        "Only runs started since this time or within this duration (7d)",
    ),
    ("resume", "limit", "At most this many bindings (default 64)"),
    (
        "resume",
        "cursor",
        "Bindings after this name: a previous answer's `next_cursor`",
    ),
    (
        "agent_remember",
        "value",
        "The new memory, stored exactly as given",
    ),
    (
        "agent_remember",
        "file",
        "Read the memory from this file on the server's machine",
    ),
    (
        "gates_create",
        "allow",
        "Principals who may decide (`user`: any person)",
    ),
    (
        "get",
        "offset",
        "Where the page starts, in bytes (default 0)",
    ),
    (
        "get",
        "length",
        "At most this many bytes (default 16384, at most 262144)",
    ),
    (
        "get",
        "explain",
        "Give the scope chain walked, not the value",
    ),
    (
        "log_since",
        "since",
        "The events after this id (0: from the start)",
    ),
    ("fork", "bind", "Root inputs to replace, `NAME=VALUE` each"),
    ("fork", "run_id", "The new run's id (default: a new one)"),
    (
        "gates_create",
        "inputs",
        "Bindings the decision is about: a change before it is consumed makes it stale",
    ),
    ("diff", "run_a", "The first run's id"),
    (
        "diff",
        "run_b",
        "The second run's id: what only it has is `added`",
    ),
    (
        "diff",
        "cursor",
        "A previous answer's `bindings.next_cursor`",
    ),
];

/// Arguments no tool takes: the server decides where the project is, who acts and how the
/// output is written; `log --follow` never ends, and `init --quiet` prints no JSON.
/// Nor what is the operator's, not a model's: acting on a token file (the server acts for its
/// agent), reading past the catalog, where large values go, counting an unattested decision,
/// which backend holds a run of both.
pub(super) const NOT_SERVED: &[&str] = &[
    "token_file",
    "home",
    "scan",
    "attach_over",
    "accept_unattested",
    "backend_a",
    "backend_b",
    "help",
    "version",
    "root",
    "json",
    "busy_timeout",
    "principal",
    "follow",
    "poll_ms",
    "quiet",
];

/// The kinds of binding a subagent session writes.
pub(super) const SUBAGENT_KINDS: [&str; 2] = ["let", "output"];

/// `gates_wait`'s property for several gates (the command line's positionals with --all or
/// --any).
pub(super) const SEVERAL: &str = "gates";
/// The most gates one `gates_wait` call waits on.
pub(super) const SEVERAL_MAX: usize = 16;

/// How long `gates_wait` may block a call: by default, and at most.
/// The default stays under the 60 seconds a common client waits for an answer (the
/// TypeScript SDK's default request timeout).
pub(super) const WAIT_DEFAULT: &str = "45s";
pub(super) const WAIT_MAX_SECONDS: i64 = 600;
