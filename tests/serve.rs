//! `prose-state serve`, driven over HTTP on loopback (a small HTTP/1.1 client of the test's
//! own on a TcpStream): sign-in with a token, the pending list, the gate page, decisions
//! through the forms; and every attack the page must turn away (no session, a wrong
//! principal, a missing or wrong CSRF token, a cookie after its token was revoked, guessed
//! tokens, hostile prompts, another project's run named by a path in the URL, a decision form
//! replayed after a reopen, parallel and distributed sign-in guesses, malformed forms, slow
//! clients), each refusal leaving the run as it was; on both backends.

use crate::common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

on_both!(
    a_decision_made_elsewhere_reaches_an_open_page_by_its_event_stream,
    a_signed_decision_about_inputs_is_carried_into_a_fork,
    every_vote_a_quorum_counts_must_be_signed,
    the_page_refuses_a_self_approval_and_logs_it,
    the_page_shows_a_gates_escalation_and_next_reminder,
    a_signed_in_principal_lists_reads_and_decides_a_gate,
    refusals_over_http_change_nothing,
    a_revoked_token_ends_its_sessions_and_guesses_are_limited,
    twenty_deciders_across_the_page_and_the_command_line_make_one_decision,
    twenty_deciders_make_one_signed_decision_when_signatures_are_required,
    signed_decisions_verify_and_unsigned_or_altered_ones_do_not,
    sessions_are_checked_against_the_book_as_it_is_now,
    a_run_in_a_url_is_a_run_id_of_this_project,
    malformed_forms_are_400_and_change_nothing,
    a_decision_form_is_bound_to_the_instance_and_view_that_showed_it,
    sign_ins_are_counted_before_the_hash_per_address_and_per_name,
    slow_clients_are_timed_out_and_connections_capped,
    the_page_rederives_a_gate_before_it_offers_a_decision,
    a_gate_shows_the_nearest_binding_of_each_name_its_execution_sees,
    a_live_status_says_what_the_sealed_log_says_not_an_edited_row,
);

/// What an open page asks at each change (its gate's status and who decided) is read through
/// the one gate read (`store::gate_read`): a row edited by SQL to say a gate was approved by
/// someone never makes the page say so, and a row put back to pending after a sealed decision
/// does not hide who decided. Asking writes nothing.
fn a_live_status_says_what_the_sealed_log_says_not_an_edited_row(b: Backend) {
    let Some((p, run, alice)) = gate_g_for_alice(b, "Ship?") else {
        return;
    };
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let status = |s: &Server| s.get(&format!("{}/status", gate_path(&run, "g")), Some(&cookie));
    run.view().raw(
        "UPDATE gates SET status = 'approved', resolved_by = 'mallory', resolved_at = '2026-01-01 00:00:00' WHERE id = 'g'",
        "UPDATE openprose.gates SET status = 'approved', resolved_by = 'mallory', resolved_at = now() WHERE run_id = '$RUN' AND id = 'g'",
    );
    let before = run.view().events("g").len();
    let r = status(&s);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("status pending (TAMPERED)\n"), "{}", r.body);
    assert!(r.body.contains("decided_by \n"), "{}", r.body);
    assert!(r.body.contains("integrity tampered\n"), "{}", r.body);
    assert!(!r.body.contains("mallory"), "{}", r.body);
    assert_eq!(
        run.view().events("g").len(),
        before,
        "asking wrote an event"
    );

    // Put back, then decided for real, then the row put back to pending by SQL.
    run.view().raw(
        "UPDATE gates SET status = 'pending', resolved_by = NULL, resolved_at = NULL WHERE id = 'g'",
        "UPDATE openprose.gates SET status = 'pending', resolved_by = NULL, resolved_at = NULL WHERE run_id = '$RUN' AND id = 'g'",
    );
    run.cmd()
        .args(["approve", "g", "--as", "alice", "--yes"])
        .assert()
        .success();
    run.view().raw(
        "UPDATE gates SET status = 'pending', resolved_by = NULL, resolved_at = NULL WHERE id = 'g'",
        "UPDATE openprose.gates SET status = 'pending', resolved_by = NULL, resolved_at = NULL WHERE run_id = '$RUN' AND id = 'g'",
    );
    let r = status(&s);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("status approved (TAMPERED)\n"),
        "{}",
        r.body
    );
    assert!(r.body.contains("decided_by alice\n"), "{}", r.body);
    assert!(r.body.contains("integrity tampered\n"), "{}", r.body);
}

/// The page re-derives a gate from its sealed log before it shows the decision form: a gate
/// whose allow list was widened by SQL shows no form, and the form's POST, sent anyway by the
/// agent the SQL let in, is refused and logged, never decided.
fn the_page_rederives_a_gate_before_it_offers_a_decision(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let bot = add(&p, "agent:sbot");
    run.cmd()
        .args([
            "gates", "create", "deploy", "--prompt", "p", "--allow", "user",
        ])
        .assert()
        .success();
    run.view().raw(
        r#"UPDATE gates SET allow = '["user","agent:sbot"]' WHERE id = 'deploy'"#,
        r#"UPDATE openprose.gates SET allow = '["user","agent:sbot"]' WHERE run_id = '$RUN' AND id = 'deploy'"#,
    );
    let s = Server::start(&p);
    let cookie = s.login(&bot);
    let page = s.get(&gate_path(&run, "deploy"), Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"tampered\""), "{}", page.body);
    assert!(!page.body.contains("id=\"approve\""), "{}", page.body);
    let before = run.before_refusal("deploy");
    let hash = {
        use sha2::{Digest, Sha256};
        let hex: String = Sha256::digest(b"p")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("sha256:{hex}")
    };
    let r = decide(
        &s,
        &cookie,
        &run,
        "deploy",
        &[
            ("csrf", &csrf_of(&page.body)),
            ("prompt_hash", &hash),
            ("instance", "1"),
            ("action", "approve"),
        ],
    );
    assert!(r.status >= 400, "{} {}", r.status, r.body);
    assert_eq!(run.view().gate("deploy").0, "pending");
    run.refused(&before, 1, "a decision on a tampered gate");
}

/// A `serve` process on a free loopback port, killed when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A form's fields, encoded as a browser posts them (`application/x-www-form-urlencoded`).
pub(crate) fn form_body<K: AsRef<str>, V: AsRef<str>>(form: &[(K, V)]) -> String {
    form.iter()
        .map(|(k, v)| format!("{}={}", urlencode(k.as_ref()), urlencode(v.as_ref())))
        .collect::<Vec<_>>()
        .join("&")
}

/// Spawns `serve` as `cmd` says, and reads the line it prints once listening.
fn launch(cmd: &mut std::process::Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

impl Server {
    pub(crate) fn start(p: &Project) -> Server {
        Server::with(p, &[])
    }

    /// `serve --listen 127.0.0.1:0` in `p` with these further arguments, reached over http.
    pub(crate) fn with(p: &Project, args: &[&str]) -> Server {
        Server::of(
            p.std_cmd()
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(args),
            "http",
        )
    }

    /// A server spawned as `cmd` says (on 127.0.0.1, port 0), reached with `scheme`.
    pub(crate) fn of(cmd: &mut std::process::Command, scheme: &str) -> Server {
        let (child, line) = launch(cmd);
        let port = line
            .trim()
            .strip_prefix(&format!("listening on {scheme}://127.0.0.1:"))
            .and_then(|r| r.strip_suffix('/'))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .parse()
            .unwrap();
        Server { child, port }
    }

    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        form: &[(&str, &str)],
    ) -> Reply {
        let body = form_body(form);
        let kind = (method == "POST").then_some("application/x-www-form-urlencoded");
        self.send(method, path, cookie, kind, &body)
    }

    /// A request with this content type (none: no header) and body, as it is.
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        content_type: Option<&str>,
        body: &str,
    ) -> Reply {
        self.send_from(
            TcpStream::connect(("127.0.0.1", self.port)).unwrap(),
            method,
            path,
            cookie,
            content_type,
            body,
        )
    }

    /// A form posted from a loopback address of the test's choosing (127.0.0.2, ...).
    fn post_from(&self, from: [u8; 4], path: &str, form: &[(&str, &str)]) -> Reply {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let stream = rt
            .block_on(socket.connect(([127, 0, 0, 1], self.port).into()))
            .unwrap()
            .into_std()
            .unwrap();
        stream.set_nonblocking(false).unwrap();
        let body = form_body(form);
        let kind = Some("application/x-www-form-urlencoded");
        self.send_from(stream, "POST", path, None, kind, &body)
    }

    fn send_from(
        &self,
        mut s: TcpStream,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        content_type: Option<&str>,
        body: &str,
    ) -> Reply {
        // A page never served fails the test rather than hanging it.
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut req =
            format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
        if let Some(c) = cookie {
            req += &format!("Cookie: {c}\r\n");
        }
        if let Some(kind) = content_type {
            req += &format!("Content-Type: {kind}\r\n");
        }
        if method == "POST" {
            req += &format!("Content-Length: {}\r\n", body.len());
        }
        req += "\r\n";
        req += body;
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Reply {
            status,
            headers,
            body: body.to_string(),
        }
    }

    pub(crate) fn get(&self, path: &str, cookie: Option<&str>) -> Reply {
        self.request("GET", path, cookie, &[])
    }

    /// Signs in with a token: the session cookie (`prose_session=...`).
    pub(crate) fn login(&self, token: &str) -> String {
        let r = self.request("POST", "/login", None, &[("token", token)]);
        assert_eq!(r.status, 303, "{}", r.body);
        let set = r.header("set-cookie").unwrap();
        assert!(set.contains("HttpOnly"), "{set}");
        assert!(set.contains("SameSite=Strict"), "{set}");
        set.split(';').next().unwrap().to_string()
    }
}

/// The CSRF token a page's forms carry.
pub(crate) fn csrf_of(body: &str) -> String {
    let at = body
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token")
        + 19;
    body[at..at + 64].to_string()
}

/// A project on `b` with one run, alice's token, and a gate `g` (`prompt`) waiting in the
/// run: None when the backend cannot be had.
pub(crate) fn gate_g_for_alice(b: Backend, prompt: &str) -> Option<(Project, Run, String)> {
    let p = Project::on(b)?;
    let run = p.init();
    let alice = add(&p, "alice");
    run.cmd()
        .args(["gates", "create", "g", "--prompt", prompt])
        .assert()
        .success();
    Some((p, run, alice))
}

/// What an event stream sends up to its first `change` event, or to its end if none comes.
pub(crate) fn heard_until_change(r: &mut impl BufRead) -> String {
    let mut heard = String::new();
    let mut line = String::new();
    while !heard.contains("event: change") {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        heard.push_str(&line);
    }
    heard
}

/// Runs tests/browser/`script` with the test Python `python` and `args`, `stdin` as given,
/// calling `on_ready` (with the script's stdin, if piped) each time it prints READY; once it
/// has ended, well (else the test fails with what it printed), its stdout's lines and its
/// stderr.
pub(crate) fn in_browser(
    python: &std::path::Path,
    script: &str,
    args: &[&str],
    stdin: Stdio,
    mut on_ready: impl FnMut(&mut Option<std::process::ChildStdin>),
) -> (Vec<String>, String) {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/browser")
        .join(script);
    let mut child = std::process::Command::new(python)
        .arg(&script)
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        lines.push(line.trim_end().to_string());
        if line.trim_end() == "READY" {
            on_ready(&mut stdin);
        }
        line.clear();
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{lines:?}\n{err}");
    (lines, err)
}

/// The page's key, as `serve --show-key` prints it.
pub(crate) fn show_key(p: &Project) -> String {
    let out = p.cmd().args(["serve", "--show-key"]).assert().success();
    String::from_utf8(out.get_output().stdout.clone())
        .unwrap()
        .trim()
        .to_string()
}

/// The page's key, pinned (`principals require --signed`): decisions must be signed by it.
pub(crate) fn pinned_key(p: &Project) -> String {
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    show_key(p)
}

/// The prompt hash a page's decision form carries.
fn prompt_hash_of(body: &str) -> String {
    let at = body.find("name=\"prompt_hash\" value=\"").unwrap() + 26;
    body[at..at + 71].to_string()
}

pub(crate) fn add(p: &Project, name: &str) -> String {
    let a = p.cmd().args(["principals", "add", name]).assert().success();
    String::from_utf8(a.get_output().stdout.clone())
        .unwrap()
        .trim()
        .to_string()
}

pub(crate) fn gate_path(run: &Run, gate: &str) -> String {
    format!("/runs/{}/gates/{gate}", run.id)
}

/// Approves a gate with the form its page shows this session, as a person would: 303.
pub(crate) fn approve_as_shown(s: &Server, cookie: &str, run: &Run, g: &str) {
    let page = s.get(&gate_path(run, g), Some(cookie));
    let r = post_as_shown(s, cookie, run, g, &page.body);
    assert_eq!(r.status, 303, "{}", r.body);
}

/// An approval posted with the form a page showed (`page`), whenever it is posted.
pub(crate) fn post_as_shown(s: &Server, cookie: &str, run: &Run, g: &str, page: &str) -> Reply {
    let hash = prompt_hash_of(page);
    let inputs = page
        .find("name=\"inputs_hash\" value=\"")
        .map(|at| page[at + 26..at + 26 + 71].to_string())
        .unwrap_or_default();
    decide(
        s,
        cookie,
        run,
        g,
        &[
            ("csrf", &csrf_of(page)),
            ("action", "approve"),
            ("comment", ""),
            ("prompt_hash", &hash),
            ("inputs_hash", &inputs),
            ("instance", &view_of(page).0),
            ("view", &view_of(page).1),
        ],
    )
}

/// A decision posted with the form a page showed (`page`): its CSRF token, prompt hash,
/// instance and view, with `action` and `comment` (and no inputs hash).
fn decide_as_shown(
    s: &Server,
    cookie: &str,
    run: &Run,
    g: &str,
    page: &str,
    action: &str,
    comment: &str,
) -> Reply {
    let (instance, view) = view_of(page);
    decide(
        s,
        cookie,
        run,
        g,
        &[
            ("csrf", &csrf_of(page)),
            ("action", action),
            ("comment", comment),
            ("prompt_hash", &prompt_hash_of(page)),
            ("instance", &instance),
            ("view", &view),
        ],
    )
}

/// A decision about inputs, signed on the page: the page shows the inputs and refuses a
/// decision on inputs changed since it showed them (logged); the signature covers them; a
/// fork carries the decision, which verifies there under `--require-signed` against the run
/// it was made in; a fork that rebinds the input finds it stale (exit 11).
fn a_signed_decision_about_inputs_is_carried_into_a_fork(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    run.bind("topic", "quantum", None);
    let at = run
        .cmd()
        .args([
            "exec-append",
            "--index",
            "1",
            "--text",
            "plan",
            "--status",
            "completed",
        ])
        .assert()
        .success();
    let _ = at;
    run.cmd()
        .args([
            "gates",
            "create",
            "review",
            "--prompt",
            "Topic ok?",
            "--inputs",
            "topic",
        ])
        .assert()
        .success();
    let record: i64 = stdout_json(
        &run.cmd()
            .args(["--json", "gates", "show", "review", "--as", "x"])
            .assert()
            .success(),
    )["execution_id"]
        .as_i64()
        .unwrap();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "review"), Some(&cookie));
    assert!(
        page.body.contains("What this decision is about"),
        "{}",
        page.body
    );
    assert!(page.body.contains("quantum"), "{}", page.body);
    // The input changes after the page showed it: the decision is refused, and logged.
    run.bind("topic", "cooking", None);
    let before = run.before_refusal("review");
    let r = post_as_shown(&s, &cookie, &run, "review", &page.body);
    assert_eq!(r.status, 409, "{}", r.body);
    run.refused(
        &before,
        1,
        "what the decision is about changed since the page showed it",
    );
    // Shown again, approved: signed over the inputs as shown.
    approve_as_shown(&s, &cookie, &run, "review");
    drop(s);
    let approved = run
        .view()
        .events("review")
        .into_iter()
        .find(|e| e.0 == "approved")
        .unwrap();
    assert!(approved.2["inputs"]["topic"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(approved.2["signature"].is_object());
    // A VM that forked the run itself accepts decisions the fork carried from it
    // (`--accept-carried-from RUN`); the source run's own wait does not need to.
    let wait_as = |r: &str, carried: bool| {
        let a = p
            .cmd()
            .args([
                "--run",
                r,
                "gates",
                "wait",
                "review",
                "--timeout",
                "0",
                "--require-signed",
            ])
            .args(if carried {
                vec!["--accept-carried-from", run.id.as_str()]
            } else {
                vec![]
            })
            .assert();
        (code(&a), stderr(&a))
    };
    let wait = |r: &str| wait_as(r, r != run.id);
    let fork = |id: &str, bind: &[&str]| {
        run.cmd()
            .args(["fork", "--at", &record.to_string(), "--run-id", id])
            .args(bind)
            .assert()
            .success();
    };
    // Forked before the wait: carried unconsumed, and the input is what it sealed.
    fork("same", &[]);
    fork("changed", &["--bind", "topic=gardening"]);
    assert_eq!(
        wait(&run.id),
        (0, String::new()),
        "the source's decision stands"
    );
    assert_eq!(
        wait("same").0,
        0,
        "carried, signed for the source run, it stands"
    );
    let (code_of_same, why) = wait_as("same", false);
    assert_eq!(code_of_same, 10, "carried, without --accept-carried: {why}");
    assert!(why.contains("--accept-carried-from"), "{why}");
    assert_eq!(
        wait("changed").0,
        11,
        "its input rebound by the fork: stale"
    );
    for r in ["same", "changed"] {
        p.cmd()
            .args([
                "--run",
                r,
                "gates",
                "verify",
                "--signed",
                "--accept-carried-from",
                &run.id,
            ])
            .assert()
            .success();
    }
    // A fork of the fork: at its newest record the decision is carried again, still signed
    // for the run it was made in; at its first record (before the gate) nothing of the gate
    // is carried. (PostgreSQL numbers a copy's records anew: a copy places its events by how
    // many records preceded them, not by the source's ids.)
    let same = p.run("same");
    let ids: Vec<i64> = same
        .cmd()
        .args(["--json", "log"])
        .assert()
        .success()
        .get_output()
        .stdout
        .split(|c| *c == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice::<serde_json::Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let (first, last) = (ids[0], *ids.last().unwrap());
    for (id, at) in [("again", last), ("early", first)] {
        same.cmd()
            .args(["fork", "--at", &at.to_string(), "--run-id", id])
            .assert()
            .success();
    }
    assert_eq!(
        wait("again").0,
        0,
        "carried twice, signed where it was made"
    );
    p.cmd()
        .args([
            "--run",
            "again",
            "gates",
            "verify",
            "--signed",
            "--accept-carried-from",
            &run.id,
        ])
        .assert()
        .success();
    assert_eq!(wait("early").0, 3, "no gate before its record");
}

pub(crate) fn decide(
    s: &Server,
    cookie: &str,
    run: &Run,
    gate: &str,
    fields: &[(&str, &str)],
) -> Reply {
    s.request(
        "POST",
        &format!("{}/decide", gate_path(run, gate)),
        Some(cookie),
        fields,
    )
}

/// Sign in, see the gate in the pending list, open its page (the prompt escaped, its hash,
/// the bindings in scope, the log), approve with a comment: the decision is the token's
/// principal's, authenticated, and `gates wait` sees it.
fn a_signed_in_principal_lists_reads_and_decides_a_gate(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    run.cmd()
        .args(["bind", "plan", "ship <b>v2</b> to production"])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates",
            "create",
            "deploy",
            "--prompt",
            "Deploy <script>alert(1)</script> now?",
            "--allow",
            "alice",
            "--timeout",
            "1h",
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&token);
    let list = s.get("/", Some(&cookie));
    assert_eq!(list.status, 200);
    assert!(
        list.body.contains(&gate_path(&run, "deploy")),
        "{}",
        list.body
    );
    assert!(
        !list.body.contains("<script>alert"),
        "the prompt is escaped"
    );
    assert!(list.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    let csp = list.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    // The live fragment lists the same gate.
    assert!(s.get("/pending", Some(&cookie)).body.contains("deploy"));
    let page = s.get(&gate_path(&run, "deploy"), Some(&cookie));
    assert_eq!(page.status, 200);
    assert!(page
        .body
        .contains("Deploy &lt;script&gt;alert(1)&lt;/script&gt; now?"));
    assert!(page.body.contains("sha256:"), "the prompt's hash");
    assert!(
        page.body
            .contains("ship &lt;b&gt;v2&lt;/b&gt; to production"),
        "the binding in scope"
    );
    assert!(page.body.contains("approve deploy"), "the run's recent log");
    assert!(page.body.contains("data-deadline="), "the countdown");
    let csrf = csrf_of(&page.body);
    let hash = prompt_hash_of(&page.body);
    assert!(hash.starts_with("sha256:"), "{hash}");
    let (instance, view) = view_of(&page.body);
    // A principal field in the form is not who decides: the session's principal is.
    let r = decide(
        &s,
        &cookie,
        &run,
        "deploy",
        &[
            ("csrf", &csrf),
            ("action", "approve"),
            ("comment", "looks right"),
            ("prompt_hash", &hash),
            ("instance", &instance),
            ("view", &view),
            ("principal", "mallory"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let (status, by, comment, _) = run.view().gate("deploy");
    assert_eq!(
        (status.as_str(), by.as_deref(), comment.as_deref()),
        ("approved", Some("alice"), Some("looks right"))
    );
    let events = run.view().events("deploy");
    let last = events.last().unwrap();
    assert_eq!(last.0, "approved");
    assert_eq!(last.2["authenticated"], "token");
    assert_eq!(last.2["client"], "web");
    assert_eq!(last.1.as_deref(), Some("alice"));
    run.cmd()
        .args(["gates", "wait", "deploy", "--timeout", "5s"])
        .assert()
        .code(0);
    // The page now shows the decision; the pending list is empty.
    let page = s.get(&gate_path(&run, "deploy"), Some(&cookie));
    assert!(page.body.contains("decided-by"), "{}", page.body);
    assert!(s
        .get("/", Some(&cookie))
        .body
        .contains("Nothing is waiting."));
    // The runs page and the run's page.
    let runs = s.get("/runs", Some(&cookie));
    assert_eq!(runs.status, 200);
    assert!(runs.body.contains(&run.id));
    assert_eq!(
        s.get(&format!("/runs/{}", run.id), Some(&cookie)).status,
        200
    );
    // A long log shows its newest 500 records and says where the rest is.
    run.view().raw(
        "WITH RECURSIVE i(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM i WHERE k < 700)
         INSERT INTO execution (statement_index, statement_text, status)
         SELECT k, 'step ' || k, 'completed' FROM i;",
        "INSERT INTO openprose.execution (run_id, statement_index, statement_text, status)
         SELECT '$RUN', k, 'step ' || k, 'completed' FROM generate_series(1, 700) k;",
    );
    let long = s.get(&format!("/runs/{}", run.id), Some(&cookie));
    assert_eq!(long.status, 200);
    assert!(
        long.body.contains("The newest 500 records"),
        "{}",
        long.body
    );
    assert_eq!(
        long.body.matches("<tr>").count(),
        500 + 2 + 1,
        "{}",
        long.body
    );
    assert!(long.body.contains("step 700") && !long.body.contains("step 200<"));
    // A second decision loses: the first one wins.
    let r = decide(
        &s,
        &cookie,
        &run,
        "deploy",
        &[
            ("csrf", &csrf),
            ("action", "reject"),
            ("comment", "no"),
            ("prompt_hash", &hash),
            ("instance", &instance),
            ("view", &view),
        ],
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(run.view().gate("deploy").0, "approved");
}

/// No session (401), a missing or wrong CSRF token (403, audit-logged), a principal the gate
/// does not allow (403, audit-logged), an agent on a person's gate (403), a rejection with no reason
/// (400), a prompt changed since the page was shown (409): each leaves the run as it was
/// but for the audit rows of the refused decisions. Hostile prompts written behind the
/// tool's back render inert and visible.
fn refusals_over_http_change_nothing(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let bot = add(&p, "agent:bot");
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Go?", "--allow", "bob"])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates", "create", "mine", "--prompt", "Mine?", "--allow", "alice",
        ])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "people", "--prompt", "People only?"])
        .assert()
        .success();
    let s = Server::start(&p);
    let before = run.snapshot();
    // No session: every page and every form.
    for path in [
        "/",
        "/pending",
        "/runs",
        &gate_path(&run, "g"),
        &format!("/runs/{}", run.id),
    ] {
        assert_eq!(s.get(path, None).status, 401, "{path}");
        assert_eq!(
            s.get(path, Some("prose_session=forged")).status,
            401,
            "{path}"
        );
    }
    let r = decide(
        &s,
        "prose_session=forged",
        &run,
        "mine",
        &[("action", "approve")],
    );
    assert_eq!(r.status, 401);
    assert_eq!(run.snapshot(), before, "nothing written without a session");
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "mine"), Some(&cookie));
    let csrf = csrf_of(&page.body);
    let hash = prompt_hash_of(&page.body);
    // (The page's view is audit-logged, as a `gates show` is.)
    assert_eq!(run.view().events("mine").last().unwrap().2["client"], "web");
    // CSRF: missing, wrong, another session's. Refused, and audit-logged on the gate as
    // the signed-in principal (like a refusal on the command line); nothing else changes.
    let other = s.login(&alice);
    let other_csrf = csrf_of(&s.get("/", Some(&other)).body);
    assert_ne!(other_csrf, csrf);
    let seen = run.view().events("mine").len();
    let gates_before = run.view().gate("mine");
    for bad in [None, Some("0".repeat(64)), Some(other_csrf.clone())] {
        let mut f: Vec<(&str, &str)> = vec![("action", "approve"), ("prompt_hash", &hash)];
        if let Some(c) = &bad {
            f.push(("csrf", c));
        }
        let r = decide(&s, &cookie, &run, "mine", &f);
        assert_eq!(r.status, 403);
        assert!(r.body.contains("this attempt was logged"), "{}", r.body);
    }
    let events = run.view().events("mine");
    assert_eq!(events.len(), seen + 3, "each CSRF refusal is one audit row");
    for (kind, principal, metadata) in &events[seen..] {
        assert_eq!(
            (kind.as_str(), principal.as_deref()),
            ("refused", Some("alice"))
        );
        assert_eq!(metadata["client"], "web");
        assert_eq!(metadata["authenticated"], "token");
        assert_eq!(metadata["attempted"], "approve");
        assert!(metadata["reason"].as_str().unwrap().contains("CSRF"));
    }
    assert_eq!(
        run.view().gate("mine"),
        gates_before,
        "the gate is as it was"
    );
    run.cmd().args(["gates", "verify"]).assert().success();
    let before = run.snapshot();
    // No reason for a rejection.
    let r = decide(
        &s,
        &cookie,
        &run,
        "mine",
        &[
            ("csrf", &csrf),
            ("action", "reject"),
            ("prompt_hash", &hash),
        ],
    );
    assert_eq!(r.status, 400);
    assert_eq!(run.snapshot(), before, "a form refusal writes nothing");
    // A principal the gate does not allow: refused and audit-logged as alice.
    let r = decide(
        &s,
        &cookie,
        &run,
        "g",
        &[
            ("csrf", &csrf),
            ("action", "approve"),
            ("prompt_hash", &hash),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(run.view().gate("g").0, "pending");
    let events = run.view().events("g");
    let last = events.last().unwrap();
    assert_eq!(
        (last.0.as_str(), last.1.as_deref()),
        ("refused", Some("alice"))
    );
    // A prompt hash that is not the one the page showed: not a form this page showed.
    let (instance, view) = view_of(&s.get(&gate_path(&run, "mine"), Some(&cookie)).body);
    let r = decide(
        &s,
        &cookie,
        &run,
        "mine",
        &[
            ("csrf", &csrf),
            ("action", "approve"),
            ("prompt_hash", "sha256:00"),
            ("instance", &instance),
            ("view", &view),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("not one this page showed"), "{}", r.body);
    assert_eq!(run.view().gate("mine").0, "pending");
    // An agent's token never decides a person's gate.
    let agent = s.login(&bot);
    let page = s.get(&gate_path(&run, "people"), Some(&agent));
    let agent_csrf = csrf_of(&page.body);
    let r = decide(
        &s,
        &agent,
        &run,
        "people",
        &[
            ("csrf", &agent_csrf),
            ("action", "approve"),
            ("prompt_hash", "x"),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(run.view().gate("people").0, "pending");
    // Prompts with a carriage return, direction overrides and zero-width characters,
    // written behind the tool's back: shown escaped and visible, never as markup.
    run.view().raw(
        "UPDATE gates SET prompt = 'ok' || char(13) || 'EVIL <img src=x onerror=alert(1)> ' || char(8238) || 'gnp.exe' || char(8203) WHERE id = 'people'",
        "UPDATE openprose.gates SET prompt = 'ok' || chr(13) || 'EVIL <img src=x onerror=alert(1)> ' || chr(8238) || 'gnp.exe' || chr(8203) WHERE run_id = '$RUN' AND id = 'people'",
    );
    let page = s.get(&gate_path(&run, "people"), Some(&cookie));
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("<img"), "no markup from a prompt");
    assert!(
        !page.body.contains('\r')
            && !page.body.contains('\u{202e}')
            && !page.body.contains('\u{200b}')
    );
    assert!(page.body.contains("ok\\rEVIL &lt;img"), "{}", page.body);
    assert!(page.body.contains("\\u{202e}gnp.exe\\u{200b}"));
    let list = s.get("/", Some(&cookie));
    assert!(!list.body.contains("<img") && !list.body.contains('\u{202e}'));
    // Unknown pages and runs.
    assert_eq!(
        s.get("/runs/no-such-run/gates/x", Some(&cookie)).status,
        404
    );
    assert_eq!(s.get("/nowhere", Some(&cookie)).status, 404);
}

/// A cookie stops working once its token is revoked (or replaced); wrong tokens are
/// refused, and after five failures from one address even the right one waits.
fn a_revoked_token_ends_its_sessions_and_guesses_are_limited(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    run.cmd()
        .args([
            "gates", "create", "g", "--prompt", "Go?", "--allow", "alice",
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie));
    assert_eq!(page.status, 200);
    let csrf = csrf_of(&page.body);
    p.cmd()
        .args(["principals", "revoke", "alice"])
        .assert()
        .success();
    assert_eq!(s.get("/", Some(&cookie)).status, 401);
    let before = run.snapshot();
    let r = decide(
        &s,
        &cookie,
        &run,
        "g",
        &[("csrf", &csrf), ("action", "approve"), ("prompt_hash", "x")],
    );
    assert_eq!(r.status, 401);
    assert_eq!(run.snapshot(), before);
    // The revoked token no longer signs in; a new one does, and the old cookie stays dead.
    assert_eq!(
        s.request("POST", "/login", None, &[("token", &alice)])
            .status,
        401
    );
    let again = add(&p, "alice");
    let fresh = s.login(&again);
    assert_eq!(s.get("/", Some(&fresh)).status, 200);
    assert_eq!(s.get("/", Some(&cookie)).status, 401);
    // Guesses (the revoked token was the first failure): a wrong secret, a look-alike name,
    // garbage; then the limit.
    let flipped = if again.ends_with('0') { '1' } else { '0' };
    let wrong = format!("{}{flipped}", &again[..again.len() - 1]);
    for guess in [wrong.as_str(), "ａlice.00", "", "\u{202e}alice.1"] {
        assert_eq!(
            s.request("POST", "/login", None, &[("token", guess)])
                .status,
            401,
            "{guess:?}"
        );
    }
    let r = s.request("POST", "/login", None, &[("token", &again)]);
    assert_eq!(
        r.status, 429,
        "the sixth attempt in a minute waits, right or wrong"
    );
    assert!(r.header("set-cookie").is_none());
    // Signing out ends the session.
    let csrf = csrf_of(&s.get("/", Some(&fresh)).body);
    assert_eq!(
        s.request("POST", "/logout", Some(&fresh), &[("csrf", "wrong")])
            .status,
        403
    );
    assert_eq!(
        s.request("POST", "/logout", Some(&fresh), &[("csrf", &csrf)])
            .status,
        303
    );
    assert_eq!(s.get("/", Some(&fresh)).status, 401);
}

/// Twenty deciders at once, ten through the page (each its own session) and ten through the
/// command line with tokens, approving and rejecting one gate: exactly one decision.
fn twenty_deciders_across_the_page_and_the_command_line_make_one_decision(b: Backend) {
    twenty_deciders(b, false);
}

/// The same race with signed decisions required: every command-line decider is refused (it
/// holds no key), exactly one web decision is made, and it is signed by the pinned key.
fn twenty_deciders_make_one_signed_decision_when_signatures_are_required(b: Backend) {
    twenty_deciders(b, true);
}

fn twenty_deciders(b: Backend, signed: bool) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let names: Vec<String> = (0..20).map(|i| format!("d{i}")).collect();
    let tokens: Vec<String> = names.iter().map(|n| add(&p, n)).collect();
    run.cmd()
        .args([
            "gates",
            "create",
            "race",
            "--prompt",
            "Who first?",
            "--allow",
            &names.join(","),
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let sessions: Vec<(String, String, String, (String, String))> = tokens[..10]
        .iter()
        .map(|t| {
            let cookie = s.login(t);
            let page = s.get(&gate_path(&run, "race"), Some(&cookie));
            let hash = prompt_hash_of(&page.body);
            (cookie, csrf_of(&page.body), hash, view_of(&page.body))
        })
        .collect();
    for (i, t) in tokens[10..].iter().enumerate() {
        std::fs::write(p.root().join(format!("t{i}")), t).unwrap();
    }
    if signed {
        p.cmd()
            .args(["principals", "require", "--signed"])
            .assert()
            .success();
    }
    let outcomes: Vec<String> = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for (i, (cookie, csrf, hash, (instance, view))) in sessions.iter().enumerate() {
            let s = &s;
            let run = &run;
            handles.push(sc.spawn(move || {
                let action = if i % 2 == 0 { "approve" } else { "reject" };
                let r = decide(
                    s,
                    cookie,
                    run,
                    "race",
                    &[
                        ("csrf", csrf),
                        ("action", action),
                        ("comment", "web"),
                        ("prompt_hash", hash),
                        ("instance", instance),
                        ("view", view),
                    ],
                );
                format!("web {}", r.status)
            }));
        }
        for i in 0..10 {
            let p = &p;
            let run = &run;
            handles.push(sc.spawn(move || {
                let verb = if i % 2 == 0 { "approve" } else { "reject" };
                let mut c = run.std_cmd();
                c.args([
                    verb,
                    &run.id,
                    "race",
                    "--yes",
                    "--token-file",
                    &format!("t{i}"),
                ]);
                if verb == "reject" {
                    c.args(["--reason", "cli"]);
                }
                let out = c.current_dir(p.root()).output().unwrap();
                format!("cli {}", out.status.code().unwrap())
            }));
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won = outcomes
        .iter()
        .filter(|o| *o == "web 303" || *o == "cli 0")
        .count();
    assert_eq!(won, 1, "{outcomes:?}");
    if signed {
        assert_eq!(
            outcomes.iter().filter(|o| *o == "cli 4").count(),
            10,
            "{outcomes:?}"
        );
        let a = run
            .cmd()
            .args(["gates", "wait", "race", "--require-signed"])
            .assert();
        let (status, ..) = run.view().gate("race");
        assert_eq!(code(&a), if status == "approved" { 0 } else { 5 });
        run.cmd()
            .args(["gates", "verify", "--signed"])
            .assert()
            .success();
    }
    assert!(
        outcomes
            .iter()
            .all(|o| ["web 303", "web 409", "cli 0", "cli 4"].contains(&o.as_str())),
        "{outcomes:?}"
    );
    let decisions = run
        .view()
        .events("race")
        .iter()
        .filter(|e| e.0 == "approved" || e.0 == "rejected")
        .count();
    assert_eq!(decisions, 1);
    let (status, by, ..) = run.view().gate("race");
    assert!(status == "approved" || status == "rejected");
    assert!(names.contains(&by.unwrap()));
}

/// `serve` refuses what would be unsafe or useless: an address other than loopback without
/// `--insecure-http`, and a project nobody could sign in to.
#[test]
fn serve_refuses_an_open_address_and_a_project_without_principals() {
    let p = Project::new();
    p.init();
    let a = p.cmd().args(["serve", "--listen", "127.0.0.1:0"]).assert();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(stderr(&a).contains("principals add"), "{}", stderr(&a));
    add(&p, "alice");
    let a = p.cmd().args(["serve", "--listen", "0.0.0.0:0"]).assert();
    assert_eq!(code(&a), 2);
    assert!(stderr(&a).contains("--insecure-http"), "{}", stderr(&a));
    let a = p.cmd().args(["serve", "--listen", "nowhere"]).assert();
    assert_eq!(code(&a), 2);
    assert!(stderr(&a).contains("--listen"), "{}", stderr(&a));
}

/// The pinned key's signature over a decision made on the page, checked by `gates wait
/// --require-signed` and `gates verify --signed`; the command line refused (naming the page,
/// the run unchanged) while signatures are required; and what does not stand: a decision
/// taken on the command line once the requirement was lifted (unsigned, exit 10), one signed
/// by another server's key (exit 10), and a signed decision whose principal was rewritten in
/// the gate row (exit 9).
fn signed_decisions_verify_and_unsigned_or_altered_ones_do_not(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let a = p
        .cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let key = out
        .split_whitespace()
        .find(|w| w.starts_with("ed25519:"))
        .unwrap_or_else(|| panic!("no key in {out}"))
        .to_string();
    assert_eq!(key.len(), 8 + 64);
    let listed = stdout_json(&p.cmd().args(["--json", "principals"]).assert().success());
    assert_eq!(listed["signed_key"], key.as_str());
    let served = p.cmd().args(["serve", "--show-key"]).assert().success();
    assert_eq!(
        String::from_utf8_lossy(&served.get_output().stdout).trim(),
        key
    );
    for g in ["one", "two", "three", "four"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Ship?"])
            .assert()
            .success();
    }
    // The command line may not decide, even with a token; it names the page.
    std::fs::write(p.root().join("alice.token"), &alice).unwrap();
    let before = run.before_refusal("one");
    let a = run
        .cmd()
        .env("PROSE_SERVE_URL", "http://127.0.0.1:7433")
        .args(["approve", "one", "--yes", "--token-file", "alice.token"])
        .assert();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(
        stderr(&a).contains("http://127.0.0.1:7433/runs/"),
        "{}",
        stderr(&a)
    );
    let logged = run.refused(&before, 1, "a command-line decision under a pinned key");
    assert_eq!(logged[0].2["client"], "cli");
    // Decided on the page: signed.
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    for g in ["one", "four"] {
        approve_as_shown(&s, &cookie, &run, g);
    }
    drop(s);
    let events = run.view().events("one");
    let approved = events.iter().find(|e| e.0 == "approved").unwrap();
    assert_eq!(approved.2["signature"]["key"], key.as_str());
    assert_eq!(approved.2["client"], "web");
    let wait = |gate: &str, extra: &[&str]| {
        let a = run
            .cmd()
            .args(["gates", "wait", gate, "--require-signed"])
            .args(extra)
            .assert();
        code(&a)
    };
    assert_eq!(wait("one", &[]), 0);
    assert_eq!(wait("one", &["--key", &key]), 0);
    run.cmd()
        .args(["gates", "verify", "--signed"])
        .assert()
        .success();
    // A malformed --key is a usage error.
    assert_eq!(wait("one", &["--key", "ed25519:zz"]), 2);

    // The requirement lifted: a command-line decision is made, sealed, and unsigned.
    p.cmd()
        .args(["principals", "require", "--off"])
        .assert()
        .success();
    run.cmd()
        .args(["approve", "two", "--yes", "--token-file", "alice.token"])
        .assert()
        .success();
    assert_eq!(wait("two", &["--key", &key]), 10);
    // With no key pinned and none given, there is nothing to check against.
    assert_eq!(wait("one", &[]), 2);
    let a = run
        .cmd()
        .args(["gates", "verify", "--signed", "--key", &key])
        .assert();
    assert_eq!(
        code(&a),
        10,
        "{}",
        String::from_utf8_lossy(&a.get_output().stdout)
    );

    // Another server's key (another home, given the project's audit key, as machines that
    // attest each other's decisions are): signed, but not by the pinned key.
    let other_home = p.root().join("other-home");
    std::fs::create_dir_all(other_home.join(".prose")).unwrap();
    std::fs::copy(
        test_home(p.root()).join(".prose/audit.key"),
        other_home.join(".prose/audit.key"),
    )
    .unwrap();
    let other = Server::of(
        p.std_cmd()
            .env("PROSE_HOME", &other_home)
            .args(["serve", "--listen", "127.0.0.1:0"]),
        "http",
    );
    let cookie = other.login(&alice);
    let page = other.get(&gate_path(&run, "three"), Some(&cookie));
    let r = decide_as_shown(&other, &cookie, &run, "three", &page.body, "reject", "no");
    assert_eq!(r.status, 303, "{}", r.body);
    drop(other);
    assert_eq!(wait("three", &["--key", &key]), 10);

    // A signed decision whose principal is rewritten behind prose-state's back.
    run.view().raw(
        "UPDATE gates SET resolved_by = 'mallory' WHERE id = 'four';",
        "UPDATE openprose.gates SET resolved_by = 'mallory' WHERE run_id = '$RUN' AND id = 'four';",
    );
    assert_eq!(wait("four", &["--key", &key]), 9);

    // A key this user does not hold is authorized, not pinned (the pin is signed by the key
    // it pins, by its holder); serve run by another user (another key) refuses to start on a
    // book pinned to this one, naming both.
    let list = || stdout_json(&p.cmd().args(["--json", "principals"]).assert().success());
    let before = list();
    let other_home = p.root().join(".other-user");
    let a = p
        .cmd()
        .env("HOME", &other_home)
        .args(["serve", "--show-key"])
        .assert()
        .success();
    let other_key = String::from_utf8_lossy(&a.get_output().stdout)
        .trim()
        .to_string();
    let a = p
        .cmd()
        .args([
            "--json",
            "principals",
            "require",
            "--signed",
            "--key",
            &other_key,
        ])
        .assert()
        .success();
    assert_eq!(stdout_json(&a)["authorized_key"], other_key.as_str());
    assert_eq!(list()["signed_key"], before["signed_key"]);
    assert!(list()["signed_key"].is_null());
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    let a = p
        .cmd()
        .env("HOME", &other_home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .assert();
    assert_eq!(code(&a), 4, "{}", stderr(&a));
    assert!(stderr(&a).contains(&key), "{}", stderr(&a));
    assert!(stderr(&a).contains(&other_key), "{}", stderr(&a));
}

/// One request over TLS to `port`, trusting `ca` (PEM) alone: the status line's code and
/// the whole reply.
fn tls_request(port: u16, ca: &str, request: &str) -> std::io::Result<(u16, String)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // The server closed without close_notify after a Connection: close reply.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, text))
}

/// `serve --tls-cert --tls-key` serves HTTPS (any address, no `--insecure-http`): a client
/// trusting the certificate signs in and gets a `Secure` cookie; plain HTTP to the port gets
/// no page; and bad certificate files are refused before anything listens.
#[test]
fn serve_over_tls() {
    let p = Project::new();
    p.init();
    let token = add(&p, "alice");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert_pem = made.cert.pem();
    p.write("cert.pem", cert_pem.as_bytes());
    p.write("key.pem", made.key_pair.serialize_pem().as_bytes());
    let start = |listen: &str| {
        let mut cmd = p.std_cmd();
        cmd.args(["serve", "--listen", listen]).args([
            "--tls-cert",
            "cert.pem",
            "--tls-key",
            "key.pem",
        ]);
        cmd
    };
    let server = Server::of(&mut start("127.0.0.1:0"), "https");
    let port = server.port;
    let (status, page) = tls_request(
        port,
        &cert_pem,
        "GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(status, 200, "{page}");
    let body = format!("token={}", urlencode(&token));
    let (status, reply) = tls_request(
        port,
        &cert_pem,
        &format!(
            "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .unwrap();
    assert_eq!(status, 303, "{reply}");
    let cookie = reply
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    // Plain HTTP to the TLS port: no page comes back.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    plain
        .write_all(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let _ = plain.read_to_end(&mut raw);
    assert!(!String::from_utf8_lossy(&raw).contains("Sign in"));
    // A client that does not trust the certificate gets nothing either.
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    assert!(tls_request(port, &other.cert.pem(), "GET / HTTP/1.1\r\n\r\n").is_err());
    drop(server);
    // Any address, with TLS: no --insecure-http needed.
    let (mut child, line) = launch(&mut start("0.0.0.0:0"));
    assert!(line.starts_with("listening on https://0.0.0.0:"), "{line}");
    let _ = child.kill();
    let _ = child.wait();

    // Refusals, before anything listens.
    p.write("garbage.pem", b"not a certificate\n");
    let refused = |args: &[&str]| {
        let a = p
            .cmd()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .assert();
        (code(&a), stderr(&a))
    };
    let (c, e) = refused(&["--tls-cert", "missing.pem", "--tls-key", "key.pem"]);
    assert_eq!(c, 3, "{e}");
    assert!(e.contains("missing.pem"), "{e}");
    let (c, e) = refused(&["--tls-cert", "garbage.pem", "--tls-key", "key.pem"]);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("--tls-cert holds no PEM certificate"), "{e}");
    let (c, e) = refused(&["--tls-cert", "cert.pem", "--tls-key", "garbage.pem"]);
    assert_eq!(c, 2, "{e}");
    p.write("other-key.pem", other.key_pair.serialize_pem().as_bytes());
    let (c, e) = refused(&["--tls-cert", "cert.pem", "--tls-key", "other-key.pem"]);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("does not go with"), "{e}");
    let (c, _) = refused(&["--tls-cert", "cert.pem"]);
    assert_eq!(c, 2);
    let (c, _) = refused(&[
        "--tls-cert",
        "cert.pem",
        "--tls-key",
        "key.pem",
        "--insecure-http",
    ]);
    assert_eq!(c, 2);
    // The key is never echoed.
    assert!(!e.contains("PRIVATE KEY"));
}

/// A person in a real browser (Chromium, driven through WebDriver by Selenium): signs in with
/// a token, sees a gate appear in the pending list without reloading, opens it, reads the
/// prompt as stored (markup shown as text), approves with a comment. Then `gates wait
/// --require-signed` exits 0, and the audit log holds the signed-in principal, the comment
/// and a signature by the pinned key.
#[test]
fn a_person_approves_in_a_real_browser() {
    let Some(python) =
        crate::common::test_python("the browser test", crate::common::Needs::Browser)
    else {
        return;
    };
    let p = Project::new();
    let run = p.init();
    let token = add(&p, "alice");
    let key = pinned_key(&p);
    let s = Server::start(&p);
    let (lines, err) = in_browser(
        &python,
        "approve.py",
        &[&format!("http://127.0.0.1:{}", s.port), &token, "deploy"],
        Stdio::inherit(),
        |_| {
            run.cmd()
                .args([
                    "gates",
                    "create",
                    "deploy",
                    "--prompt",
                    "Ship <b>v2</b> to production?",
                ])
                .assert()
                .success();
        },
    );
    assert!(lines.contains(&"DONE".to_string()), "{lines:?}\n{err}");
    assert!(
        lines.contains(&"PROMPT Ship <b>v2</b> to production?".to_string()),
        "{lines:?}"
    );
    drop(s);
    run.cmd()
        .args(["gates", "wait", "deploy", "--require-signed"])
        .assert()
        .success();
    let (status, by, comment, _) = run.view().gate("deploy");
    assert_eq!(status, "approved");
    assert_eq!(by.as_deref(), Some("alice"));
    assert_eq!(comment.as_deref(), Some("checked in the browser"));
    let events = run.view().events("deploy");
    let approved = events.iter().find(|e| e.0 == "approved").unwrap();
    assert_eq!(approved.1.as_deref(), Some("alice"));
    assert_eq!(approved.2["client"], "web");
    assert_eq!(approved.2["authenticated"], "token");
    assert_eq!(approved.2["signature"]["key"], key.as_str());
}

/// Two people approve a gate that needs both (`--require 2`), each in a real browser of their
/// own: after the first, the page says the vote is counted and the gate still waits; after the
/// second it is approved. Every vote is signed, so `gates wait --require-signed` exits 0.
#[test]
fn two_people_approve_a_quorum_in_real_browsers() {
    let Some(python) =
        crate::common::test_python("the browser test", crate::common::Needs::Browser)
    else {
        return;
    };
    let p = Project::new();
    let run = p.init();
    let alice = add(&p, "alice");
    let bob = add(&p, "bob");
    p.cmd()
        .args(["principals", "require", "--signed"])
        .assert()
        .success();
    run.cmd()
        .args([
            "gates",
            "create",
            "deploy",
            "--prompt",
            "Ship v2?",
            "--require",
            "2",
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/quorum.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args([
            &format!("http://127.0.0.1:{}", s.port),
            &gate_path(&run, "deploy"),
            &alice,
            &bob,
        ])
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{lines}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines.contains("PROGRESS 1 of 2 approvals: alice; waiting for user"),
        "{lines}"
    );
    assert!(lines.contains("VOTED You have already voted"), "{lines}");
    assert!(
        lines.contains("PROGRESS 2 of 2 approvals: alice, bob"),
        "{lines}"
    );
    assert!(lines.contains("DONE"), "{lines}");
    drop(s);
    run.cmd()
        .args(["gates", "wait", "deploy", "--require-signed"])
        .assert()
        .success();
    let events = run.view().events("deploy");
    let kinds: Vec<_> = events
        .iter()
        .filter(|e| e.0 != "viewed")
        .map(|e| (e.0.as_str(), e.1.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("created", Some("system")),
            ("approval", Some("alice")),
            ("approved", Some("bob"))
        ]
    );
    for e in events.iter().filter(|e| e.0.starts_with("approv")) {
        assert_eq!(e.2["client"], "web");
        assert!(e.2["signature"]["sig"].is_string(), "{e:?}");
    }
}

/// A team's decision is signed only when every vote it counts is: two votes on the page pass
/// `gates wait --require-signed`; one on the page and one on the command line do not (exit
/// 10), and a signature altered on a vote is tampering (9).
fn every_vote_a_quorum_counts_must_be_signed(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let bob = add(&p, "bob");
    let carol = add(&p, "carol");
    for g in ["both", "mixed", "unsigned_vote"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Ship?", "--require", "2"])
            .assert()
            .success();
    }
    // The page signs while its key is pinned; the command line decides while it is not.
    let pin = |on: bool| {
        let args: &[&str] = if on { &["--signed"] } else { &["--off"] };
        p.cmd()
            .args(["principals", "require"])
            .args(args)
            .assert()
            .success();
    };
    let key = show_key(&p);
    pin(true);
    let s = Server::start(&p);
    let approve = |token: &str, g: &str| {
        let cookie = s.login(token);
        approve_as_shown(&s, &cookie, &run, g);
        s.get(&gate_path(&run, g), Some(&cookie)).body
    };
    let after_one = approve(&alice, "both");
    assert!(after_one.contains("1 of 2 approvals: alice"), "{after_one}");
    assert!(after_one.contains("id=\"voted\""), "{after_one}");
    approve(&bob, "both");
    approve(&alice, "mixed");
    drop(s);
    // The other way round: the vote through the command line, the decision on the page.
    pin(false);
    run.cmd()
        .env("PROSE_TOKEN", &carol)
        .args(["approve", "unsigned_vote", "--yes"])
        .assert()
        .success();
    run.cmd()
        .env("PROSE_TOKEN", &carol)
        .args(["approve", "mixed", "--yes"])
        .assert()
        .success();
    pin(true);
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    approve_as_shown(&s, &cookie, &run, "unsigned_vote");
    drop(s);
    let wait = |g: &str| {
        code(
            &run.cmd()
                .args([
                    "gates",
                    "wait",
                    g,
                    "--require-signed",
                    "--key",
                    &key,
                    "--timeout",
                    "0",
                ])
                .assert(),
        )
    };
    assert_eq!(run.view().gate("both").0, "approved");
    assert_eq!(wait("both"), 0);
    assert_eq!(run.view().gate("mixed").0, "approved");
    assert_eq!(
        wait("mixed"),
        10,
        "a decision through the command line is not signed"
    );
    assert_eq!(run.view().gate("unsigned_vote").0, "approved");
    assert_eq!(
        wait("unsigned_vote"),
        10,
        "a vote through the command line is not signed"
    );
}

/// The page checks every request's token against the principals as they are now, through
/// whatever happened to them: on PostgreSQL its kept connections cut by the server (the next
/// request opens another and is served), on SQLite the book removed by hand (nobody is
/// signed in any more) and made again (only its new tokens sign in).
fn sessions_are_checked_against_the_book_as_it_is_now(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    p.init();
    let alice = add(&p, "alice");
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    assert_eq!(s.get("/", Some(&cookie)).status, 200);
    match &p.pg_url {
        Some(url) => {
            for _ in 0..3 {
                let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
                let cut: i64 = c
                    .query_one(
                        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
                         WHERE datname = current_database() AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                assert!(cut >= 1, "serve keeps a connection between requests");
                assert_eq!(
                    s.get("/", Some(&cookie)).status,
                    200,
                    "served after the cut"
                );
            }
            p.cmd()
                .args(["principals", "revoke", "alice"])
                .assert()
                .success();
            assert_eq!(s.get("/", Some(&cookie)).status, 401);
        }
        None => {
            let book = p.root().join(".prose/principals.db");
            std::fs::rename(&book, p.root().join("aside.db")).unwrap();
            assert_eq!(s.get("/", Some(&cookie)).status, 401, "no book, nobody");
            // A book made anew where this user anchored one is refused until it is
            // accepted on purpose (`rebind`).
            let a = p.cmd().args(["principals", "add", "alice"]).assert();
            assert_eq!(code(&a), 9, "{}", stderr(&a));
            assert!(stderr(&a).contains("principals rebind"), "{}", stderr(&a));
            p.cmd().args(["principals", "rebind"]).assert().success();
            let again = add(&p, "alice");
            assert_eq!(
                s.get("/", Some(&cookie)).status,
                401,
                "a new book, new tokens"
            );
            assert_eq!(
                s.request("POST", "/login", None, &[("token", &alice)])
                    .status,
                401
            );
            let fresh = s.login(&again);
            assert_eq!(s.get("/", Some(&fresh)).status, 200);
        }
    }
}

/// A run in a URL is a run id of this project (or its server), never a path: signed in to
/// project A, a URL naming project B's run by its directory, its state.db, a relative
/// path, a directory beside the server, or B's run id, reads and decides nothing of B's.
/// Every such answer is the same 404, which says nothing of what exists.
fn a_run_in_a_url_is_a_run_id_of_this_project(b: Backend) {
    let Some(a) = Project::on(b) else { return };
    let Some(other) = Project::on(b) else { return };
    let mine = a.init();
    let alice = add(&a, "alice");
    mine.cmd()
        .args(["gates", "create", "deploy", "--prompt", "Deploy A?"])
        .assert()
        .success();
    // Project B: its own principals, tokens required, a gate and a binding.
    let theirs = other.init();
    add(&other, "alice");
    other
        .cmd()
        .args(["principals", "require"])
        .assert()
        .success();
    theirs
        .cmd()
        .args(["gates", "create", "deploy", "--prompt", "Deploy B?"])
        .assert()
        .success();
    theirs.bind("secret", "B's value", None);
    // A directory beside the server (its working directory is A's root) holding B's run.
    let beside = a.root().join("stray");
    std::fs::create_dir_all(&beside).unwrap();
    if b == Backend::Sqlite {
        std::fs::copy(&theirs.db, beside.join("state.db")).unwrap();
    }
    let s = Server::start(&a);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&mine, "deploy"), Some(&cookie));
    assert_eq!(page.status, 200);
    let csrf = csrf_of(&page.body);
    let hash = {
        use sha2::Digest;
        let d = sha2::Sha256::digest(b"Deploy B?");
        format!(
            "sha256:{}",
            d.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )
    };
    let before_a = mine.snapshot();
    let before_b = theirs.snapshot();
    let dir = theirs.dir.display().to_string();
    let db = theirs.db.display().to_string();
    let relative = format!("../{}", theirs.dir.strip_prefix("/").unwrap().display());
    let names = [
        dir.clone(),
        format!("{dir}/"),
        db,
        relative,
        "./stray".to_string(),
        "stray".to_string(),
        "..".to_string(),
        ".".to_string(),
        theirs.id.clone(),
        "no-such-run".to_string(),
        format!("{}/../{}", mine.id, mine.id),
        "%00".to_string(),
    ];
    let mut bodies = std::collections::BTreeSet::new();
    for name in &names {
        let run = urlencode(name);
        for path in [
            format!("/runs/{run}"),
            format!("/runs/{run}/gates/deploy"),
            format!("/runs/{run}/bindings/root/secret"),
        ] {
            let r = s.get(&path, Some(&cookie));
            assert_eq!(r.status, 404, "{path}: {}", r.body);
            bodies.insert(r.body);
        }
        let r = s.request(
            "POST",
            &format!("/runs/{run}/gates/deploy/decide"),
            Some(&cookie),
            &[
                ("csrf", &csrf),
                ("action", "approve"),
                ("prompt_hash", &hash),
            ],
        );
        assert_eq!(r.status, 404, "{name}: {}", r.body);
        bodies.insert(r.body);
    }
    assert_eq!(
        bodies.len(),
        1,
        "one body for every run not shown: {bodies:?}"
    );
    let body = bodies.into_iter().next().unwrap();
    assert!(body.contains("no such run"), "{body}");
    assert!(!body.contains(&other.root().display().to_string()));
    assert_eq!(theirs.view().gate("deploy").0, "pending");
    assert_eq!(
        theirs.snapshot(),
        before_b,
        "nothing of B's read or written"
    );
    assert_eq!(mine.snapshot(), before_a, "nothing of A's written");
    // The run's own id still works.
    assert_eq!(
        s.get(&format!("/runs/{}", mine.id), Some(&cookie)).status,
        200
    );
}

/// A form the page's own forms would never send: a field twice, a JSON body, no content
/// type, a body that is not a form, one too large. Each is 400 (413 too large) with a line
/// saying why, as docs/approval-page.md says, and writes nothing.
fn malformed_forms_are_400_and_change_nothing(b: Backend) {
    let Some((p, run, alice)) = gate_g_for_alice(b, "Go?") else {
        return;
    };
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie));
    let csrf = csrf_of(&page.body);
    let form = hidden_fields(&page.body, "approve");
    let before = run.snapshot();
    let decide = format!("{}/decide", gate_path(&run, "g"));
    let good = form_body(&form);
    let form_type = Some("application/x-www-form-urlencoded");
    let json = serde_json::to_string(
        &form
            .iter()
            .cloned()
            .collect::<std::collections::BTreeMap<_, _>>(),
    )
    .unwrap();
    let cases: Vec<(&str, Option<&str>, String)> = vec![
        ("csrf twice", form_type, format!("{good}&csrf={csrf}")),
        ("action twice", form_type, format!("{good}&action=reject")),
        ("a JSON body", Some("application/json"), json.clone()),
        ("JSON labelled a form", form_type, json),
        ("no content type", None, good.clone()),
        ("text", Some("text/plain"), good.clone()),
        (
            "multipart",
            Some("multipart/form-data; boundary=x"),
            good.clone(),
        ),
    ];
    for (what, kind, body) in &cases {
        let r = s.send("POST", &decide, Some(&cookie), *kind, body);
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        assert_eq!(run.snapshot(), before, "{what}: nothing written");
    }
    let huge = format!("{good}&comment={}", "x".repeat(100 * 1024));
    let r = s.send("POST", &decide, Some(&cookie), form_type, &huge);
    assert_eq!(r.status, 413, "{}", r.body);
    // Sign-in and sign-out too.
    for (path, body) in [
        ("/login", "token=a&token=b".to_string()),
        ("/logout", format!("csrf={csrf}&csrf={csrf}")),
    ] {
        let r = s.send("POST", path, Some(&cookie), form_type, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let r = s.send("POST", path, Some(&cookie), Some("application/json"), "{}");
        assert_eq!(r.status, 400, "{path}: {}", r.body);
    }
    assert_eq!(s.get("/", Some(&cookie)).status, 200, "still signed in");
    // Without a session too: a form that is not one of the page's is 400 whoever sends it.
    for path in [decide.as_str(), "/logout"] {
        let r = s.send("POST", path, None, Some("application/json"), "{}");
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let r = s.send("POST", path, None, form_type, &good);
        assert_eq!(r.status, 401, "{path}: {}", r.body);
    }
    assert_eq!(run.snapshot(), before, "nothing written");
    // The same form, well formed, decides.
    let r = s.send("POST", &decide, Some(&cookie), form_type, &good);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(run.view().gate("g").0, "approved");
}

/// The hidden fields of the form with this id on a page, with its `action`.
pub(crate) fn hidden_fields(body: &str, form: &str) -> Vec<(String, String)> {
    let start = body
        .find(&format!("<form id=\"{form}\""))
        .unwrap_or_else(|| panic!("no form {form} in {body}"));
    let end = start + body[start..].find("</form>").unwrap();
    let mut out = Vec::new();
    for input in body[start..end].split("<input").skip(1) {
        let attr = |name: &str| {
            let at = input.find(&format!(" {name}=\""))? + name.len() + 3;
            Some(input[at..at + input[at..].find('"')?].to_string())
        };
        if attr("type").as_deref() == Some("hidden") {
            out.push((attr("name").unwrap(), attr("value").unwrap()));
        }
    }
    out
}

/// The gate instance a page's decision form carries, and the view's tag over it.
fn view_of(body: &str) -> (String, String) {
    let fields = hidden_fields(body, "approve");
    let get = |k: &str| fields.iter().find(|(n, _)| n == k).unwrap().1.clone();
    (get("instance"), get("view"))
}

/// A decision form is bound to the gate instance and the view that showed it. Approved on
/// the page, then reopened with the same prompt: the same POST sent again is refused (409)
/// and logged, as is the form edited to name the new instance, or a form shown to another
/// session; the new instance stays pending until it is decided from a view of its own.
fn a_decision_form_is_bound_to_the_instance_and_view_that_showed_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let prompt = "DROP PRODUCTION DATABASE";
    run.cmd()
        .args(["gates", "create", "deploy", "--prompt", prompt])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "deploy"), Some(&cookie));
    let mut form = hidden_fields(&page.body, "approve");
    form.push(("comment".into(), "first".into()));
    let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert!(fields.contains(&("instance", "1")), "{fields:?}");
    let r = decide(&s, &cookie, &run, "deploy", &fields);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(run.view().gate("deploy").0, "approved");
    run.cmd()
        .args(["gates", "create", "deploy", "--reopen", "--prompt", prompt])
        .assert()
        .success();
    assert_eq!(run.view().gate("deploy").0, "pending");

    // The same POST again: refused by the store, on the instance it names, and logged.
    let before = run.before_refusal("deploy");
    let r = decide(&s, &cookie, &run, "deploy", &fields);
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("reopened"), "{}", r.body);
    let events = run.refused(&before, 1, "a replayed form");
    assert_eq!(events[0].1.as_deref(), Some("alice"));
    assert_eq!(events[0].2["instance"], 2);
    assert_eq!(events[0].2["client"], "web");
    assert!(
        events[0].2["reason"].as_str().unwrap().contains("reopened"),
        "{:?}",
        events[0]
    );

    // The form edited to name instance 2: its view tag no longer matches.
    let before = run.before_refusal("deploy");
    let edited: Vec<(&str, &str)> = fields
        .iter()
        .map(|&(k, v)| if k == "instance" { (k, "2") } else { (k, v) })
        .collect();
    let r = decide(&s, &cookie, &run, "deploy", &edited);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("this attempt was logged"), "{}", r.body);
    let events = run.refused(&before, 1, "an edited form");
    assert!(events[0].2["reason"]
        .as_str()
        .unwrap()
        .contains("not one this page showed"));

    // A form of instance 2 shown to another session, sent with this one's cookie and CSRF.
    let other = s.login(&alice);
    let theirs = hidden_fields(
        &s.get(&gate_path(&run, "deploy"), Some(&other)).body,
        "approve",
    );
    let csrf = csrf_of(&s.get("/", Some(&cookie)).body);
    let before = run.before_refusal("deploy");
    let stolen: Vec<(&str, &str)> = theirs
        .iter()
        .map(|(k, v)| {
            (
                k.as_str(),
                if k == "csrf" {
                    csrf.as_str()
                } else {
                    v.as_str()
                },
            )
        })
        .collect();
    let r = decide(&s, &cookie, &run, "deploy", &stolen);
    assert_eq!(r.status, 403, "{}", r.body);
    run.refused(&before, 1, "another session's form");
    assert_eq!(run.view().gate("deploy").0, "pending");
    run.cmd().args(["gates", "verify"]).assert().success();

    // A view of instance 2 decides it.
    let page = s.get(&gate_path(&run, "deploy"), Some(&cookie));
    let mut form = hidden_fields(&page.body, "reject");
    form.push(("comment".into(), "not today".into()));
    let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert!(fields.contains(&("instance", "2")), "{fields:?}");
    let r = decide(&s, &cookie, &run, "deploy", &fields);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(run.view().gate("deploy").0, "rejected");
    let last = run.view().events("deploy").pop().unwrap();
    assert_eq!(
        (last.0.as_str(), &last.2["instance"]),
        ("rejected", &2.into())
    );
}

/// Sign-in attempts are counted before the token is hashed, atomically, per client address
/// and per principal name: 40 wrong sign-ins at once from one address get 5 answers and 35
/// refusals (429); one wrong sign-in each from 36 loopback addresses for one name gets 10
/// answers, and then even that principal's right token waits, while another principal's
/// does not. Nothing is written anywhere.
fn sign_ins_are_counted_before_the_hash_per_address_and_per_name(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let bob = add(&p, "bob");
    let s = Server::start(&p);
    let book = || {
        let a = p
            .cmd()
            .args(["principals", "list", "--json"])
            .assert()
            .success();
        a.get_output().stdout.clone()
    };
    let (before_run, before_book) = (run.snapshot(), book());
    let wrong = |token: &str| {
        let secret = token.rsplit_once('.').unwrap().1;
        format!(
            "{}.{}",
            token.rsplit_once('.').unwrap().0,
            "0".repeat(secret.len())
        )
    };
    let statuses = |replies: Vec<u16>| {
        let mut counts = std::collections::BTreeMap::new();
        for r in replies {
            *counts.entry(r).or_insert(0) += 1;
        }
        counts
    };
    // 40 at once from one address, each for a name of its own.
    let replies: Vec<u16> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..40)
            .map(|i| {
                let s = &s;
                sc.spawn(move || {
                    let token = format!("guess{i}.{}", "0".repeat(64));
                    s.post_from([127, 0, 0, 1], "/login", &[("token", &token)])
                        .status
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        statuses(replies),
        [(401, 5), (429, 35)].into_iter().collect(),
        "five checked, the rest refused unchecked"
    );
    // One each from 36 addresses, all for bob.
    let bad = wrong(&bob);
    let replies: Vec<u16> = std::thread::scope(|sc| {
        let handles: Vec<_> = (2..38u8)
            .map(|i| {
                let (s, bad) = (&s, &bad);
                sc.spawn(move || {
                    s.post_from([127, 0, 0, i], "/login", &[("token", bad)])
                        .status
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        statuses(replies),
        [(401, 10), (429, 26)].into_iter().collect(),
        "ten checked for one name, whatever the address"
    );
    let r = s.post_from([127, 0, 0, 50], "/login", &[("token", &bob)]);
    assert_eq!(r.status, 429, "bob's name is at its limit: {}", r.body);
    assert!(r.header("set-cookie").is_none());
    let r = s.post_from([127, 0, 0, 1], "/login", &[("token", &alice)]);
    assert_eq!(r.status, 429, "the first address is at its limit");
    // Another principal, from another address: signed in; a success counts against no one.
    for _ in 0..8 {
        let r = s.post_from([127, 0, 0, 51], "/login", &[("token", &alice)]);
        assert_eq!(r.status, 303, "{}", r.body);
    }
    assert_eq!(run.snapshot(), before_run, "no run written");
    assert_eq!(book(), before_book, "no principal written");
}

/// Client connections the server process `pid` holds open on `port`: its own sockets that
/// are established connections to that port (one still in the listen queue, not yet
/// accepted, belongs to no process).
pub(crate) fn connections_held(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    // Each socket once, by its inode: a read of the table while connections change state can
    // meet a socket twice (the kernel walks a hash table the changes move entries in), which
    // counted once "5 connections held" under load.
    let mut held = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local_port = cols[1]
                .rsplit_once(':')
                .map(|(_, p)| u16::from_str_radix(p, 16));
            // State 01: established.
            if local_port == Some(Ok(port)) && cols[3] == "01" && inodes.contains(cols[9]) {
                held.insert(cols[9].to_string());
            }
        }
    }
    held.len()
}

/// Reads a connection to its end: the server closed it (a timeout error means it did not).
pub(crate) fn closed_by_server(mut c: impl Read) -> Result<(), std::io::Error> {
    let mut buf = Vec::new();
    match c.read_to_end(&mut buf) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Slow clients hold up no one: with `--max-connections 4 --header-timeout 1`, twelve
/// connections that send part of their headers and stall are never more than four held at
/// once, each is closed by the server once its header time is up, and a real request made
/// behind them all is served. Nothing is written. (The cap's default is 256 and the header
/// time's 10 s; a few dozen sockets show what 20,000 did.)
fn slow_clients_are_timed_out_and_connections_capped(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    for bad in [["--max-connections", "0"], ["--header-timeout", "0"]] {
        let a = p.cmd().arg("serve").args(bad).assert();
        assert_eq!(code(&a), 2, "{bad:?}");
    }
    let s = Server::with(&p, &["--max-connections", "4", "--header-timeout", "1"]);
    let cookie = s.login(&alice);
    let before = run.snapshot();
    let pid = s.child.id();
    let stalled: Vec<TcpStream> = (0..12)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap();
            c.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            c
        })
        .collect();
    // Never more than four held, however long one looks.
    for _ in 0..15 {
        let held = connections_held(pid, s.port);
        assert!(held <= 4, "{held} connections held at once");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // A real request behind them all is served, once their header time is up.
    let r = s.get("/", Some(&cookie));
    assert_eq!(r.status, 200, "{}", r.body);
    for (i, c) in stalled.into_iter().enumerate() {
        closed_by_server(c).unwrap_or_else(|e| panic!("stalled connection {i} left open: {e}"));
    }
    // So is a connection that sends nothing at all.
    let silent = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    closed_by_server(silent).unwrap();
    assert_eq!(run.snapshot(), before, "nothing written");
}

/// Over TLS too: a client that completes its handshake and then stalls in its headers, and one
/// that never starts its handshake, are each closed by the server once the header time is up
/// (`--header-timeout 1`, `--max-connections 2`); a real request behind them is served.
#[test]
fn slow_clients_over_tls_are_timed_out() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let p = Project::new();
    p.init();
    add(&p, "alice");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert_pem = made.cert.pem();
    p.write("cert.pem", cert_pem.as_bytes());
    p.write("key.pem", made.key_pair.serialize_pem().as_bytes());
    let server = Server::of(
        p.std_cmd().args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            "cert.pem",
            "--tls-key",
            "key.pem",
            "--max-connections",
            "2",
            "--header-timeout",
            "1",
        ]),
        "https",
    );
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(cert_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let stalled: Vec<_> = (0..3)
        .map(|_| {
            let name = ServerName::try_from("127.0.0.1").unwrap();
            let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
            let tcp = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            tls.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap();
            tls.flush().unwrap();
            assert!(!tls.conn.is_handshaking(), "the handshake is done");
            tls
        })
        .collect();
    let silent = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let (status, page) = tls_request(
        server.port,
        &cert_pem,
        "GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(status, 200, "{page}");
    for (i, c) in stalled.into_iter().enumerate() {
        closed_by_server(c).unwrap_or_else(|e| panic!("stalled connection {i} left open: {e}"));
    }
    closed_by_server(silent).unwrap();
}

/// The bindings a gate's page shows are those its execution sees: for each name the one
/// nearest its scope, up the chain of parents to the root, as `get NAME --execution-id`
/// resolves it; a sibling scope's are not shown. A gate with no execution sees the root.
fn a_gate_shows_the_nearest_binding_of_each_name_its_execution_sees(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let outer = run.exec(1, "outer", "executing", None);
    let middle = run.exec(2, "middle", "executing", Some(outer));
    let inner = run.exec(3, "inner", "executing", Some(middle));
    let sibling = run.exec(4, "sibling", "executing", Some(outer));
    run.bind("x", "x at the root", None);
    run.bind("x", "x at outer", Some(outer));
    run.bind("x", "x at inner", Some(inner));
    run.bind("w", "w at middle", Some(middle));
    run.bind("y", "y at the root", None);
    run.bind("y", "y at the sibling", Some(sibling));
    run.bind("v", "v at the sibling only", Some(sibling));
    run.cmd()
        .args(["gates", "create", "deep", "--prompt", "Go?"])
        .args(["--execution-id", &inner.to_string()])
        .assert()
        .success();
    run.cmd()
        .args(["gates", "create", "top", "--prompt", "Go?"])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    // Each binding shown: its name, its scope and its value, in order.
    let shown = |gate: &str| -> Vec<(String, String, String)> {
        let page = s.get(&gate_path(&run, gate), Some(&cookie));
        assert_eq!(page.status, 200, "{}", page.body);
        let after = |text: &str, from: &str, to: &str| {
            let at = text.find(from).unwrap() + from.len();
            text[at..at + text[at..].find(to).unwrap()].to_string()
        };
        page.body
            .split("<section class=\"binding\"><h3>")
            .skip(1)
            .map(|b| {
                (
                    b[..b.find(' ').unwrap()].to_string(),
                    after(b, ", scope ", ")"),
                    after(b, "<pre>", "</pre>"),
                )
            })
            .collect()
    };
    let scope = |e: i64| e.to_string();
    let root = || "root".to_string();
    let deep = shown("deep");
    assert_eq!(
        deep,
        vec![
            ("w".into(), scope(middle), "w at middle".into()),
            ("x".into(), scope(inner), "x at inner".into()),
            ("y".into(), root(), "y at the root".into()),
        ]
    );
    // The same bindings `get` resolves from the gate's execution.
    for (name, _, value) in &deep {
        let got = stdout_json(
            &run.cmd()
                .args(["get", name, "--execution-id", &inner.to_string(), "--json"])
                .assert()
                .success(),
        );
        assert_eq!(got["value"].as_str(), Some(value.as_str()), "{name}");
    }
    assert_eq!(
        shown("top"),
        vec![
            ("x".into(), root(), "x at the root".into()),
            ("y".into(), root(), "y at the root".into()),
        ]
    );
    // Each links to its whole value, at its own scope.
    let whole = s.get(
        &format!("/runs/{}/bindings/{}/x", run.id, inner),
        Some(&cookie),
    );
    assert_eq!((whole.status, whole.body.as_str()), (200, "x at inner"));
}

/// Separation of duties on the page: the gate's creator is told she may not approve it, an
/// approval she posts anyway is refused with a page that says why, and the database changes
/// only by the logged refusal; another allowed principal approves it.
fn the_page_refuses_a_self_approval_and_logs_it(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let bob = add(&p, "bob");
    run.cmd()
        .env("PROSE_TOKEN", &alice)
        .args(["gates", "create", "ship", "--prompt", "Ship?"])
        .args(["--allow", "alice,bob", "--no-self-approve"])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "ship"), Some(&cookie));
    assert!(page.body.contains("id=\"own\""), "{}", page.body);
    let before = run.before_refusal("ship");
    let r = decide_as_shown(&s, &cookie, &run, "ship", &page.body, "approve", "");
    assert_ne!(r.status, 303, "{}", r.body);
    assert!(r.body.contains("separation of duties"), "{}", r.body);
    let refused = run.refused(&before, 1, "a self-approval on the page");
    assert_eq!(refused[0].1.as_deref(), Some("alice"));
    assert_eq!(run.view().gate("ship").0, "pending");
    let cookie = s.login(&bob);
    approve_as_shown(&s, &cookie, &run, "ship");
    let (status, by, _, _) = run.view().gate("ship");
    assert_eq!((status.as_str(), by.as_deref()), ("approved", Some("bob")));
}

/// A gate's page says where it escalates at its deadline, when its next reminder is due, and
/// through whom a decision may still come.
fn the_page_shows_a_gates_escalation_and_next_reminder(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    run.cmd()
        .args([
            "gates", "create", "ship", "--prompt", "Ship?", "--allow", "alice",
        ])
        .args([
            "--timeout",
            "4h",
            "--remind",
            "1h",
            "--escalate-to",
            "group:oncall",
        ])
        .assert()
        .success();
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "ship"), Some(&cookie)).body;
    assert!(
        page.contains("to group:oncall at the deadline, instead of timing out"),
        "{page}"
    );
    assert!(page.contains("id=\"reminder\""), "{page}");
    assert!(page.contains("waiting for alice"), "{page}");
}

/// An open gate page hears of a decision made on the command line through its run's event
/// stream (woken by the commit), and asks what changed without logging a view. The stream is
/// outside the connection cap: with `--max-connections 2`, three streams and a page are served.
fn a_decision_made_elsewhere_reaches_an_open_page_by_its_event_stream(b: Backend) {
    use std::io::{BufRead, BufReader, Write as _};
    let Some((p, run, alice)) = gate_g_for_alice(b, "Ship?") else {
        return;
    };
    let s = Server::with(&p, &["--max-connections", "2"]);
    let cookie = s.login(&alice);
    let page = s.get(&gate_path(&run, "g"), Some(&cookie));
    let events = format!("/runs/{}/events", run.id);
    assert!(
        page.body.contains(&format!("data-events=\"{events}\"")),
        "{}",
        page.body
    );
    let views = run.view().events("g").len();
    let open = || {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        write!(
            c,
            "GET {events} HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut r = BufReader::new(c);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        r
    };
    // Three streams at once, past the cap of two connections, and the page still served.
    let mut streams: Vec<_> = (0..3).map(|_| open()).collect();
    assert_eq!(s.get(&gate_path(&run, "g"), Some(&cookie)).status, 200);
    run.cmd()
        .args(["approve", "g", "--as", "bob", "--yes"])
        .assert()
        .success();
    for r in &mut streams {
        let heard = heard_until_change(r);
        assert!(heard.contains("event: change"), "{heard}");
    }
    let status = s.get(&format!("{}/status", gate_path(&run, "g")), Some(&cookie));
    assert_eq!(status.status, 200);
    assert!(status.body.contains("status approved"), "{}", status.body);
    assert!(status.body.contains("decided_by bob"), "{}", status.body);
    // Asking logs no view: the gate's events are its views so far, its decision and the
    // second page view.
    let now: Vec<String> = run.view().events("g").into_iter().map(|e| e.0).collect();
    assert_eq!(now.len(), views + 2, "{now:?}");
    drop(streams);
}
