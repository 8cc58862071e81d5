//! The in-process tier: the store's rules run against both backends in this process, with no
//! binary started, each test with a wiring of its own (its own home for the audit key and the
//! anchors, its own notices). What only a process shows (commands, exit codes, JSON, MCP, the
//! page) stays in the binary tier.

use crate::common::{on_both, Backend, Project};
use prose_state::cli::{BackendArg, Global, InitArgs, PrincipalArg, TokenArg};
use prose_state::context::Context;
use prose_state::testing::store::{
    gate_read, sha256_tag, AuditFilter, Created, Decided, Decision, Event, NewBinding,
    NewExecution, NewGate, Principal, Quorum, Store, Wiring,
};
use prose_state::testing::GateStatus;
use std::sync::{Arc, Mutex};

const T0: &str = "2026-01-01 00:00:00";

/// A run on `b`, made in-process, with what its commits announced.
struct Tier {
    p: Project,
    ctx: Context,
    heard: Arc<Mutex<Vec<(Event, String)>>>,
}

impl Tier {
    fn on(b: Backend) -> Option<Tier> {
        let p = Project::on(b)?;
        let heard: Arc<Mutex<Vec<(Event, String)>>> = Arc::default();
        let told = Arc::clone(&heard);
        let wiring = Wiring::new()
            .at_home(p.root().join("home/.prose"))
            .announcing(move |notices| {
                let mut told = told.lock().unwrap();
                told.extend(notices.into_iter().map(|n| (n.event, n.gate.id)));
            })
            .leak();
        let global = |run: Option<String>| Global {
            root: Some(p.root().to_path_buf()),
            run,
            json: true,
            busy_timeout: 5_000,
        };
        let init = InitArgs {
            program: None,
            run_id: None,
            backend: match b {
                Backend::Sqlite => BackendArg::Sqlite,
                Backend::Postgres => BackendArg::Postgres,
            },
            quiet: true,
            principal: PrincipalArg {
                principal: Some("vm".into()),
            },
            token: TokenArg { token_file: None },
        };
        let made = prose_state::cmd::init::run(&init, &Context::resolve_in(&global(None), wiring))
            .unwrap();
        let ctx = Context::resolve_in(&global(Some(made.run_id)), wiring);
        Some(Tier { p, ctx, heard })
    }

    fn store(&self) -> Box<dyn Store> {
        self.ctx.the_run().unwrap().1
    }

    fn open(&self, id: &str, allow: &str, timeout_at: Option<&str>) -> Created {
        self.open_asking(id, allow, timeout_at, Quorum::default())
    }

    fn open_asking(
        &self,
        id: &str,
        allow: &str,
        timeout_at: Option<&str>,
        quorum: Quorum,
    ) -> Created {
        let prompt = format!("Ship {id}?");
        self.store()
            .create_gate(&NewGate {
                id,
                prompt: &prompt,
                allow,
                timeout: timeout_at.map(|_| "1h"),
                timeout_at,
                on_reject: None,
                metadata: None,
                reopen: false,
                statement_index: None,
                parent_execution: None,
                prompt_hash: &sha256_tag(&prompt),
                inputs: &[],
                response_schema: None,
                response_binding: None,
                now: T0,
                quorum,
            })
            .unwrap()
    }

    /// Opens `id` asking for an integer answer into binding `into` at the root.
    fn open_answering(&self, id: &str, into: &str, reopen: bool) -> anyhow::Result<Created> {
        self.open_answering_in(id, into, None, reopen)
    }

    /// Appends a block call's record inside `parent` (None: at the top): a frame.
    fn block(&self, parent: Option<i64>) -> i64 {
        self.store()
            .append_execution(&NewExecution {
                statement_index: Some(1),
                statement_text: "do review()",
                status: "executing",
                started_at: Some(T0),
                completed_at: None,
                error_message: None,
                parent_id: parent,
                metadata: None,
                idempotency_key: None,
                principal: "vm",
            })
            .unwrap()
    }

    /// Binds `name` in exactly `scope` (None: the root).
    fn bind_in(&self, name: &str, scope: Option<i64>) -> anyhow::Result<()> {
        self.store().bind(
            &NewBinding {
                name,
                execution_id: scope,
                kind: "let",
                value: "1",
                source_statement: None,
                attachment_path: None,
                update: None,
                if_version: None,
                now: T0,
                principal: "agent:writer",
                key: None,
            },
            &mut || Ok(()),
        )?;
        Ok(())
    }

    /// Opens `id` in `scope` (None: the root) asking for an integer answer into binding
    /// `into` there.
    fn open_answering_in(
        &self,
        id: &str,
        into: &str,
        scope: Option<i64>,
        reopen: bool,
    ) -> anyhow::Result<Created> {
        let prompt = format!("Ship {id}?");
        let schema = serde_json::json!({"type": "integer"});
        self.store().create_gate(&NewGate {
            id,
            prompt: &prompt,
            allow: r#"["user"]"#,
            timeout: None,
            timeout_at: None,
            on_reject: None,
            metadata: None,
            reopen,
            statement_index: None,
            parent_execution: scope,
            prompt_hash: &sha256_tag(&prompt),
            inputs: &[],
            response_schema: Some(&schema),
            response_binding: Some((into, scope)),
            now: T0,
            quorum: Quorum::default(),
        })
    }

    fn decide(&self, id: &str, who: &str, approve: bool, now: &str) -> Decided {
        self.decide_as(id, who, false, approve, now)
    }

    /// A decision by `who`, authenticated (a token, or the page) or only claimed.
    fn decide_as(
        &self,
        id: &str,
        who: &str,
        authenticated: bool,
        approve: bool,
        now: &str,
    ) -> Decided {
        let prompt = format!("Ship {id}?");
        let principal = Principal::parse(who, "test").unwrap();
        // A decision is taken at the clock's time once it holds the run's lock, never at a
        // time its caller gives: `now` only says when the test means it (the clock reads
        // later, as the deadline tests need).
        let _ = now;
        let authority = || {
            Ok(prose_state::testing::store::Authority {
                authenticated,
                roster: Ok(Default::default()),
            })
        };
        self.store()
            .decide_gate(&Decision {
                gate_id: id,
                approve,
                principal: &principal,
                client: "cli",
                comment: None,
                prompt_hash: &sha256_tag(&prompt),
                instance: None,
                signer: None,
                inputs: None,
                pins: None,
                response: None,
                edits: &[],
                authority: &authority,
            })
            .unwrap()
    }

    /// The gate as a reader acts on it: its status and decider, and whether its row stands
    /// against its sealed log.
    fn read(&self, id: &str, now: &str) -> (GateStatus, Option<String>, bool) {
        let read = gate_read::read(self.store().as_mut(), id, now)
            .unwrap()
            .unwrap();
        let (status, by) = read.decision();
        (status, by.map(str::to_string), read.tampered())
    }

    /// Whether the gate's sealed log says its decision was consumed.
    fn consumed(&self, id: &str, now: &str) -> bool {
        let read = gate_read::read(self.store().as_mut(), id, now)
            .unwrap()
            .unwrap();
        read.derived.consumed
    }

    /// Binds `name` at the root (compare-and-set on `if_version` when given).
    fn bind(&self, name: &str, value: &str, if_version: Option<i64>) -> anyhow::Result<i64> {
        let written = self.store().bind(
            &NewBinding {
                name,
                execution_id: None,
                kind: "let",
                value,
                source_statement: None,
                attachment_path: None,
                update: None,
                if_version,
                now: T0,
                principal: "agent:writer",
                key: None,
            },
            &mut || Ok(()),
        )?;
        Ok(written.version.unwrap())
    }

    fn events(&self, id: &str) -> Vec<String> {
        let filter = AuditFilter {
            gate_id: Some(id),
            ..AuditFilter::default()
        };
        let rows = self.store().audit(&filter).unwrap();
        rows.into_iter().map(|r| r.event_type).collect()
    }

    fn heard(&self) -> Vec<(Event, String)> {
        self.heard.lock().unwrap().clone()
    }
}

/// The first decision decides; a second one finds it decided, changes nothing and is logged;
/// the derivation says who decided; the commit that decided is announced once.
fn the_first_decision_decides_and_a_second_is_only_logged(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    assert!(matches!(
        t.open("ship", r#"["alice","bob"]"#, None),
        Created::New(_)
    ));
    assert!(matches!(
        t.decide("ship", "alice", true, T0),
        Decided::Done(_)
    ));
    let before = t.events("ship");
    assert!(matches!(
        t.decide("ship", "bob", false, T0),
        Decided::AlreadyResolved(_, false)
    ));
    assert_eq!(
        t.read("ship", T0),
        (GateStatus::Approved, Some("alice".into()), false)
    );
    let after = t.events("ship");
    assert_eq!(after.len(), before.len() + 1, "{after:?}");
    assert_eq!(
        t.heard(),
        [
            (Event::Opened, "ship".to_string()),
            (Event::Approved, "ship".to_string())
        ]
    );
    // Sealed with the key in the test's own home, and anchored there.
    let home = t.p.root().join("home/.prose");
    assert!(home.join("audit.key").is_file());
    assert!(std::fs::read_dir(home.join("anchors")).unwrap().count() > 0);
}

/// A quorum of two: one approval is counted, the same approver again counts once, a claim
/// that no token backs counts for nothing, and a second approver decides the gate.
fn a_quorum_counts_each_authenticated_approver_once(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    let two = Quorum {
        require: 2,
        ..Quorum::default()
    };
    t.open_asking("ship", r#"["alice","bob","carol"]"#, None, two);
    assert!(matches!(
        t.decide_as("ship", "alice", true, true, T0),
        Decided::Counted { already: false, .. }
    ));
    assert!(matches!(
        t.decide_as("ship", "alice", true, true, T0),
        Decided::Counted { already: true, .. }
    ));
    assert!(matches!(
        t.decide_as("ship", "carol", false, true, T0),
        Decided::NotAuthenticated(_)
    ));
    assert_eq!(t.read("ship", T0), (GateStatus::Pending, None, false));
    assert!(matches!(
        t.decide_as("ship", "bob", true, true, T0),
        Decided::Done(_)
    ));
    let (status, _, tampered) = t.read("ship", T0);
    assert_eq!((status, tampered), (GateStatus::Approved, false));
}

/// A principal the allow list does not name decides nothing: the gate stays pending, and the
/// attempt is logged.
fn one_not_allowed_decides_nothing(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    t.open("ship", r#"["alice"]"#, None);
    let before = t.events("ship");
    assert!(matches!(
        t.decide("ship", "mallory", true, T0),
        Decided::NotAllowed(_)
    ));
    assert_eq!(t.read("ship", T0), (GateStatus::Pending, None, false));
    assert_eq!(t.events("ship").len(), before.len() + 1);
}

/// A deadline passes at the sweep of the first reader after it, at the time that reader
/// gives: before it the gate is pending; after it, timed out, and a decision finds it so.
fn a_deadline_passes_at_the_time_given(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    t.open("ship", r#"["alice"]"#, Some("2026-01-01 01:00:00"));
    assert_eq!(
        t.read("ship", "2026-01-01 00:59:59"),
        (GateStatus::Pending, None, false)
    );
    assert_eq!(t.read("ship", "2026-01-01 01:00:01").0, GateStatus::Timeout);
    assert!(matches!(
        t.decide("ship", "alice", true, "2026-01-01 01:00:02"),
        Decided::AlreadyResolved(_, false)
    ));
    assert_eq!(t.read("ship", "2026-01-01 02:00:00").0, GateStatus::Timeout);
}

/// A reminder falls due before the deadline and an escalation at it, each announced once
/// however many sweeps pass; the escalated gate times out at its new deadline.
fn sweeps_announce_a_reminder_and_an_escalation_once(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    let schedule = Quorum {
        remind: vec![1800],
        escalate_to: Some("bob".into()),
        escalate_after: Some(3600),
        ..Quorum::default()
    };
    t.open_asking(
        "ship",
        r#"["alice"]"#,
        Some("2026-01-01 01:00:00"),
        schedule,
    );
    let sweep = |now: &str| {
        let s = t.store().sweep_timeouts(now).unwrap();
        (s.reminders, s.escalated, s.timed_out)
    };
    assert_eq!(sweep("2026-01-01 00:29:59"), (0, 0, 0));
    assert_eq!(sweep("2026-01-01 00:30:01"), (1, 0, 0));
    assert_eq!(sweep("2026-01-01 00:30:02"), (0, 0, 0));
    assert_eq!(sweep("2026-01-01 01:00:01"), (0, 1, 0));
    assert_eq!(sweep("2026-01-01 01:00:02"), (0, 0, 0));
    assert_eq!(t.read("ship", "2026-01-01 01:00:03").0, GateStatus::Pending);
    assert_eq!(sweep("2026-01-01 02:00:02"), (0, 0, 1));
    assert_eq!(t.read("ship", "2026-01-01 02:00:03").0, GateStatus::Timeout);
    let heard: Vec<Event> = t.heard().into_iter().map(|(e, _)| e).collect();
    assert_eq!(
        heard,
        [
            Event::Opened,
            Event::Reminder,
            Event::Escalated,
            Event::TimedOut
        ]
    );
}

/// A decision is consumed once: the first consumption seals it, a second finds it consumed
/// and writes nothing, and the derivation says so.
fn a_decision_is_consumed_once(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    t.open("ship", r#"["alice"]"#, None);
    t.decide("ship", "alice", true, T0);
    assert!(!t.consumed("ship", T0));
    let consume = || {
        t.store()
            .consume_decision("ship", 1, &[], &[], "2026-01-01 00:00:05")
            .unwrap()
    };
    assert!(consume());
    let events = t.events("ship");
    assert!(!consume());
    assert_eq!(
        t.events("ship"),
        events,
        "a second consumption writes nothing"
    );
    assert!(t.consumed("ship", T0));
}

/// A binding keeps each version it was written at, numbered from 1; a compare-and-set on a
/// version no longer the newest writes nothing.
fn a_binding_keeps_its_versions_and_a_stale_compare_and_set_writes_nothing(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    assert_eq!(t.bind("draft", "one", None).unwrap(), 1);
    assert_eq!(t.bind("draft", "two", Some(1)).unwrap(), 2);
    let versions = || {
        let rows = t.store().binding_history("draft", None).unwrap();
        rows.into_iter()
            .map(|r| (r.n, r.principal, r.written_at))
            .collect::<Vec<_>>()
    };
    let before = versions();
    let who = Some("agent:writer".to_string());
    let at = Some(T0.to_string());
    assert_eq!(before, [(1, who.clone(), at.clone()), (2, who, at)]);
    assert!(t.bind("draft", "three", Some(1)).is_err());
    assert_eq!(versions(), before);
}

/// A token is one the book's sealed log issued: issued, it authenticates; revoked, it does
/// not; a principal's row added behind the log's back authenticates nothing, and the refusal
/// changes nothing.
fn a_token_is_one_the_books_log_issued(b: Backend) {
    use prose_state::testing::book::Change;
    use prose_state::testing::store::{authenticate, issue, record, PrincipalBook, ADD, REVOKE};
    let Some(t) = Tier::on(b) else { return };
    let mut book = t.ctx.principal_book(true).unwrap().unwrap();
    let change = |event, principal, value| Change {
        event,
        principal,
        grp: None,
        value,
        actor: Some("admin"),
        at: T0,
    };
    let alice = Principal::parse("alice", "test").unwrap();
    let (token, row) = issue(&alice, T0).unwrap();
    let digest = sha256_tag(&row.token_hash);
    let add = [change(ADD, Some("alice"), Some(digest.as_str()))];
    record(
        book.as_mut(),
        &add,
        None,
        false,
        &mut |b: &mut dyn PrincipalBook| b.add_principal(&row).map(drop),
    )
    .unwrap();
    assert_eq!(
        authenticate(book.as_mut(), &token).unwrap().as_str(),
        "alice"
    );
    // Mallory's row, written straight into the book: its log never issued it.
    let mallory = Principal::parse("mallory", "test").unwrap();
    let (forged, row) = issue(&mallory, T0).unwrap();
    assert!(book.add_principal(&row).unwrap());
    let log = book.book_log().unwrap().len();
    assert!(authenticate(book.as_mut(), &forged).is_err());
    assert_eq!(
        book.book_log().unwrap().len(),
        log,
        "a refusal writes nothing"
    );
    // The refusal is mallory's alone: the log is whole, and alice's token still counts.
    assert_eq!(
        authenticate(book.as_mut(), &token).unwrap().as_str(),
        "alice"
    );
    let revoke = [change(REVOKE, Some("alice"), None)];
    record(
        book.as_mut(),
        &revoke,
        None,
        false,
        &mut |b: &mut dyn PrincipalBook| b.revoke_principal("alice", T0).map(drop),
    )
    .unwrap();
    assert!(authenticate(book.as_mut(), &token).is_err());
}

/// One binding holds one gate's answer in a scope: a second gate opened to answer into it
/// there is refused, writing nothing (its opening, its record, its row); the first gate,
/// opened again, answers into it again.
fn a_binding_holds_one_gates_answer_in_a_scope(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    assert!(matches!(
        t.open_answering("a", "ans", false).unwrap(),
        Created::New(_)
    ));
    let everything = AuditFilter::default();
    let before = t.store().audit(&everything).unwrap().len();
    let records = t.store().executions().unwrap().len();
    let err = t.open_answering("b", "ans", false).unwrap_err();
    assert!(
        err.to_string()
            .contains("gate \"a\" already answers into it")
            || err.to_string().contains("gate a already answers into it"),
        "{err:#}"
    );
    assert_eq!(t.store().audit(&everything).unwrap().len(), before);
    assert_eq!(t.store().executions().unwrap().len(), records);
    assert!(t.store().read_gate("b").unwrap().is_none());
    // Another binding, and the same gate again, are opened.
    assert!(matches!(
        t.open_answering("b", "other", false).unwrap(),
        Created::New(_)
    ));
    t.decide("a", "alice", false, T0);
    assert!(matches!(
        t.open_answering("a", "ans", true).unwrap(),
        Created::New(_)
    ));
}

/// What the database holds of a run: its audit rows, execution records and bindings, counted.
fn counts(t: &Tier) -> (usize, usize, usize) {
    let s = &mut *t.store();
    (
        s.audit(&AuditFilter::default()).unwrap().len(),
        s.executions().unwrap().len(),
        s.bindings().unwrap().len(),
    )
}

/// A gate's answer owns its line of frames, checked by the rules in their own transactions
/// (which a gate's opening is serialised with), so that no concurrent `bind` or opening slips
/// between a command's check and its write: whichever comes first, the other is refused and
/// writes nothing. Off the line (a sibling frame), both stand.
fn an_answer_owns_its_line_of_frames_in_the_rules(b: Backend) {
    let Some(t) = Tier::on(b) else { return };
    let outer = t.block(None);
    let inner = t.block(Some(outer));
    let sibling = t.block(None);
    let refused = |what: anyhow::Result<()>, says: &str, before: (usize, usize, usize)| {
        let err = what.unwrap_err();
        assert!(err.to_string().contains(says), "{says}: {err:#}");
        assert_eq!(counts(&t), before, "{says}: a refusal wrote nothing");
    };
    let open = |id: &str, into: &str, at: Option<i64>| {
        t.open_answering_in(id, into, at, false).map(|_| ())
    };

    // A binding below first: a gate answering into its name above it is refused.
    t.bind_in("seen", Some(inner)).unwrap();
    for at in [None, Some(outer)] {
        refused(
            open("g", "seen", at),
            &format!("bound in execution {inner}"),
            counts(&t),
        );
    }
    assert!(t.store().read_gate("g").unwrap().is_none());
    // In the binding's own scope it is refused as already bound; off its line, it opens.
    refused(
        open("g", "seen", Some(inner)),
        "already bound in the gate's scope",
        counts(&t),
    );
    open("g", "seen", Some(sibling)).unwrap();

    // The answer first: a binding of its name below it is refused, at every depth.
    open("h", "ans", Some(outer)).unwrap();
    refused(
        t.bind_in("ans", Some(inner)),
        "in a scope around this one",
        counts(&t),
    );
    refused(
        t.bind_in("ans", Some(outer)),
        "only a decision on it writes it",
        counts(&t),
    );
    // Another gate answering into it on the line, above or below, is refused; beside, opened.
    for (id, at) in [("i", None), ("j", Some(inner))] {
        refused(open(id, "ans", at), "already answers into it", counts(&t));
        assert!(t.store().read_gate(id).unwrap().is_none());
    }
    // A binding beside it hides nothing, nor does an answer below that binding.
    t.bind_in("ans", Some(sibling)).unwrap();
    let beside = t.block(Some(sibling));
    open("k", "ans", Some(beside)).unwrap();
}

on_both!(
    an_answer_owns_its_line_of_frames_in_the_rules,
    a_binding_holds_one_gates_answer_in_a_scope,
    the_first_decision_decides_and_a_second_is_only_logged,
    a_quorum_counts_each_authenticated_approver_once,
    one_not_allowed_decides_nothing,
    a_deadline_passes_at_the_time_given,
    sweeps_announce_a_reminder_and_an_escalation_once,
    a_decision_is_consumed_once,
    a_binding_keeps_its_versions_and_a_stale_compare_and_set_writes_nothing,
    a_token_is_one_the_books_log_issued,
);
