//! The approval page, live: a decision made elsewhere (a `prose-state approve` process)
//! reaches pages a person has open in a real browser without a reload, by their event streams,
//! and by polling where the browser has no `EventSource` or the server's bound on streams is
//! reached. Then the streams attacked with a hostile HTTP client of the test's own: no
//! session, run ids that are paths or carry control characters, more streams than the bound,
//! slow clients, a server that shuts down. On both backends. Nothing asserts a time: a change
//! is waited for, bounded, and how long it took is printed for information.

use crate::common::*;
use crate::serve::{
    add, closed_by_server, connections_held, csrf_of, gate_g_for_alice, gate_path,
    heard_until_change, in_browser, urlencode, Server,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

on_both!(
    an_open_page_shows_a_decision_made_elsewhere_by_its_streams,
    without_event_source_an_open_page_shows_a_decision_by_polling,
    past_the_stream_bound_an_open_page_shows_a_decision_by_polling,
    streams_without_a_session_are_refused_and_name_no_run,
    a_run_in_a_stream_url_is_a_run_id_and_nothing_else,
    past_64_streams_the_server_answers_503_and_still_serves_pages,
    slow_clients_on_the_event_endpoints_hold_up_no_one,
    streams_end_when_serve_shuts_down,
    a_stream_ends_with_its_session,
);

/// `events`: the browser's own `EventSource`.
fn an_open_page_shows_a_decision_made_elsewhere_by_its_streams(b: Backend) {
    in_a_browser(b, "events");
}

/// `no-eventsource`: `window.EventSource` deleted before the page's script runs.
fn without_event_source_an_open_page_shows_a_decision_by_polling(b: Backend) {
    in_a_browser(b, "no-eventsource");
}

/// `bound`: every one of the server's 64 streams held by the test, so the page's are refused.
fn past_the_stream_bound_an_open_page_shows_a_decision_by_polling(b: Backend) {
    in_a_browser(b, "bound");
}

/// A person has the pending list and a gate's page open in Chromium (tests/browser/live.py,
/// in `mode`); the gate is approved on the command line. The gate's page shows the decision
/// and loses its forms, and the list drops the gate and keeps the other, neither reloaded
/// (the page's marks survive; the gate's one view is its only one in the audit log).
fn in_a_browser(b: Backend, mode: &str) {
    let Some(python) =
        crate::common::test_python("the browser test", crate::common::Needs::Browser)
    else {
        return;
    };
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let token = add(&p, "alice");
    for g in ["deploy", "other"] {
        run.cmd()
            .args(["gates", "create", g, "--prompt", "Ship v2?"])
            .assert()
            .success();
    }
    let s = Server::start(&p);
    // Past the bound: the test holds every stream the server allows.
    let held: Vec<_> = if mode == "bound" {
        let cookie = s.login(&token);
        let held: Vec<_> = (0..64)
            .map(|i| {
                let path = if i % 2 == 0 {
                    "/events".to_string()
                } else {
                    format!("/runs/{}/events", run.id)
                };
                let (status, r) = stream(s.port, &path, Some(&cookie));
                assert!(status.starts_with("HTTP/1.1 200"), "stream {i}: {status}");
                r
            })
            .collect();
        let (status, _) = stream(s.port, "/events", Some(&cookie));
        assert!(status.starts_with("HTTP/1.1 503"), "{status}");
        held
    } else {
        Vec::new()
    };
    let views = |run: &Run| {
        run.view()
            .events("deploy")
            .iter()
            .filter(|e| e.0 == "viewed")
            .count()
    };
    let (lines, err) = in_browser(
        &python,
        "live.py",
        &[
            &format!("http://127.0.0.1:{}", s.port),
            &token,
            &run.id,
            "deploy",
            "other",
            mode,
        ],
        Stdio::piped(),
        |stdin| {
            assert_eq!(views(&run), 1, "the gate's page was loaded once");
            run.cmd()
                .args(["approve", "deploy", "--as", "bob", "--yes"])
                .assert()
                .success();
            if let Some(mut i) = stdin.take() {
                writeln!(i, "APPROVED").unwrap();
            }
        },
    );
    for want in [
        "GATE_PAGE approved",
        "NOTE Decided by bob while this page was open; reload it for the whole history.",
        "LIST other",
        "DONE",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want}: {lines:?}\n{err}");
    }
    // For information only: how long each page took to show the decision.
    for l in lines.iter().filter(|l| l.contains("_AFTER")) {
        measured(&format!("{b:?} {mode}: {l}"));
    }
    let (gate, by, _, _) = run.view().gate("deploy");
    assert_eq!((gate.as_str(), by.as_deref()), ("approved", Some("bob")));
    assert_eq!(run.view().gate("other").0, "pending");
    // Asking the gate's status logs no view, and the page was never loaded again.
    assert_eq!(views(&run), 1, "{:?}", run.view().events("deploy"));
    drop(held);
}

/// A time measured, for information only: written to stderr directly, so that it shows in the
/// normal `cargo test` output (the harness captures only the print macros), never asserted.
fn measured(what: &str) {
    let _ = writeln!(std::io::stderr(), "MEASURED: {what}");
}

/// Opens an event stream at `path` (signed in with `cookie`, if any): the status line, and the
/// connection to read the rest from (20 s at most per read).
fn stream(port: u16, path: &str, cookie: Option<&str>) -> (String, BufReader<TcpStream>) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{cookie}Accept: text/event-stream\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    (line.trim_end().to_string(), r)
}

/// A whole answer to a request sent as raw bytes (the connection then closed): status line,
/// headers, body.
fn raw(port: u16, request: &[u8]) -> (String, String, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(request).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// A GET of `path` with `cookie` (if any), asking for events, answered and closed.
fn get(port: u16, path: &str, cookie: Option<&str>) -> (String, String, String) {
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    raw(
        port,
        format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{cookie}Accept: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
}

/// The message of an error page (its one line, `<p class="error">`).
fn error_line(body: &str) -> &str {
    body.split_once("<p class=\"error\">")
        .and_then(|(_, r)| r.split_once("</p>"))
        .map_or("", |(m, _)| m)
}

/// With no session, or a cookie naming none, every stream and status URL is the sign-in page
/// (401), the same for a run that exists and one that does not: nothing names a run, no
/// stream is opened, nothing is written.
fn streams_without_a_session_are_refused_and_name_no_run(b: Backend) {
    let Some((p, run, _)) = gate_g_for_alice(b, "Ship?") else {
        return;
    };
    let s = Server::start(&p);
    let before = run.snapshot();
    let mut bodies = std::collections::BTreeSet::new();
    let forged = format!("prose_session={}", "ab".repeat(32));
    for path in [
        "/events".to_string(),
        format!("/runs/{}/events", run.id),
        "/runs/20990101-000000-nosuch/events".to_string(),
        "/runs/..%2F..%2Fetc/events".to_string(),
        format!("/runs/{}/gates/g/status", run.id),
        format!("/runs/{}/gates/nope/status", run.id),
    ] {
        for cookie in [None, Some(forged.as_str()), Some("prose_session=")] {
            let (status, headers, body) = get(s.port, &path, cookie);
            assert!(status.starts_with("HTTP/1.1 401"), "{path}: {status}");
            assert!(!headers.contains("text/event-stream"), "{path}: {headers}");
            assert!(!body.contains(&run.id), "{path} names the run: {body}");
            assert!(body.contains("Sign in"), "{body}");
            bodies.insert(body);
        }
    }
    assert_eq!(bodies.len(), 1, "one answer for every URL: {bodies:?}");
    assert_eq!(run.snapshot(), before, "nothing written");
}

/// Signed in, a stream (or status) URL whose run is not a run id of this project (a path, a
/// percent-encoded path, a run id with a NUL, a line break, a header, a direction override
/// around it, one far too long) is refused with the one line every page gives for a run it
/// cannot show (404 `no such run`), and opens no stream; a segment that is not UTF-8 is 400
/// with one line; a control character raw in the request is 400 before any page is reached.
/// Nothing is written, and every refused stream gave its place back.
fn a_run_in_a_stream_url_is_a_run_id_and_nothing_else(b: Backend) {
    let Some((p, run, alice)) = gate_g_for_alice(b, "Ship?") else {
        return;
    };
    let s = Server::start(&p);
    let cookie = s.login(&alice);
    let before = run.snapshot();
    let id = &run.id;
    let names = [
        "..".to_string(),
        ".".to_string(),
        "../..".to_string(),
        format!("../{id}"),
        format!("{id}/../{id}"),
        run.dir.display().to_string(),
        run.db.display().to_string(),
        format!(".prose/runs/{id}"),
        format!("{id}\0"),
        format!("{id}\n"),
        format!("{id}\r\nX-Injected: 1"),
        format!("\u{202e}{id}"),
        format!("{id}\u{7f}"),
        "a".repeat(4096),
        "20990101-000000-nosuch".to_string(),
    ];
    let mut bodies = std::collections::BTreeSet::new();
    for name in &names {
        let enc = urlencode(name);
        for path in [
            format!("/runs/{enc}/events"),
            format!("/runs/{enc}/gates/g/status"),
        ] {
            let (status, headers, body) = get(s.port, &path, Some(&cookie));
            assert!(status.starts_with("HTTP/1.1 404"), "{path}: {status}");
            assert!(!headers.contains("text/event-stream"), "{path}");
            assert!(!headers.to_lowercase().contains("x-injected"), "{headers}");
            assert_eq!(error_line(&body), "no such run", "{path}: {body}");
            bodies.insert(body);
        }
    }
    assert_eq!(bodies.len(), 1, "one answer for every run not shown");
    // Not UTF-8: refused before the run is looked at, in one line.
    for path in ["/runs/%FF/events", "/runs/%C0%AE%C0%AE/events"] {
        let (status, _, body) = get(s.port, path, Some(&cookie));
        assert!(status.starts_with("HTTP/1.1 400"), "{path}: {status}");
        assert_eq!(body.trim_end().lines().count(), 1, "{path}: {body}");
        assert!(!body.contains(id.as_str()), "{body}");
    }
    // A control character raw in the request line, or a header split into the path.
    for bad in [
        format!("GET /runs/{id}\x01/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n"),
        format!("GET /runs/{id}\t/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n"),
        format!("GET /runs/{id}\r/events HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n"),
    ] {
        let (status, headers, _) = raw(s.port, bad.as_bytes());
        assert!(status.starts_with("HTTP/1.1 400"), "{bad:?}: {status}");
        assert!(!headers.contains("text/event-stream"), "{bad:?}");
    }
    // Each refused stream request gave back the place it took: all 64 can still be opened.
    let all: Vec<_> = (0..64)
        .map(|_| stream(s.port, &format!("/runs/{id}/events"), Some(&cookie)))
        .inspect(|(status, _)| assert!(status.starts_with("HTTP/1.1 200"), "{status}"))
        .collect();
    drop(all);
    assert_eq!(run.snapshot(), before, "nothing written");
}

/// The bound on event streams is its own: with `--max-connections 2`, 64 streams (the pending
/// list's and a run's) are open at once, the 65th of either is 503 with one line saying the
/// page polls, and ordinary pages are still served, again and again. Streams their clients
/// close give their places back: with nothing committed meanwhile (no change to wake them),
/// all 64 are served again soon after (how soon is printed, not asserted; at most 15 s, less
/// than a ping's 25, is waited). Every one of the 64 hears the decision made elsewhere.
fn past_64_streams_the_server_answers_503_and_still_serves_pages(b: Backend) {
    let Some((p, run, alice)) = gate_g_for_alice(b, "Ship?") else {
        return;
    };
    let s = Server::with(&p, &["--max-connections", "2"]);
    let cookie = s.login(&alice);
    let run_events = format!("/runs/{}/events", run.id);
    let open = || -> Vec<_> {
        (0..64)
            .map(|i| {
                let path = if i % 2 == 0 { "/events" } else { &run_events };
                let (status, r) = stream(s.port, path, Some(&cookie));
                assert!(status.starts_with("HTTP/1.1 200"), "stream {i}: {status}");
                r
            })
            .collect()
    };
    let refused = || {
        for path in ["/events", run_events.as_str(), "/runs/no-such-run/events"] {
            let (status, headers, body) = get(s.port, path, Some(&cookie));
            assert!(status.starts_with("HTTP/1.1 503"), "{path}: {status}");
            assert!(!headers.contains("text/event-stream"), "{path}");
            assert_eq!(
                error_line(&body),
                "too many event streams: this page refreshes by polling"
            );
        }
    };
    let streams = open();
    refused();
    drop(streams);
    // Opened again, one at a time, each as soon as a place is back (within 15 s of the close,
    // less than a ping's 25 s: the closed streams gave their places back, not their pings).
    let closed = Instant::now();
    let mut streams = Vec::new();
    while streams.len() < 64 {
        let path = if streams.len() % 2 == 0 {
            "/events"
        } else {
            &run_events
        };
        let (status, r) = stream(s.port, path, Some(&cookie));
        if status.starts_with("HTTP/1.1 200") {
            streams.push(r);
            continue;
        }
        assert!(status.starts_with("HTTP/1.1 503"), "{status}");
        assert!(
            closed.elapsed() < Duration::from_secs(15),
            "{} of 64 closed streams gave their places back in 15 s",
            streams.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    measured(&format!(
        "{b:?}: 64 streams served again {:.3} s after 64 were closed",
        closed.elapsed().as_secs_f64()
    ));
    refused();
    // The connection cap is untouched: more pages than it, one after another, each served.
    for _ in 0..4 {
        assert_eq!(s.get("/", Some(&cookie)).status, 200);
        assert_eq!(s.get(&gate_path(&run, "g"), Some(&cookie)).status, 200);
    }
    run.cmd()
        .args(["approve", "g", "--as", "bob", "--yes"])
        .assert()
        .success();
    for (i, r) in streams.iter_mut().enumerate() {
        let heard = heard_until_change(r);
        assert!(heard.contains("event: change"), "stream {i}: {heard}");
    }
}

/// Slow clients on the event endpoints hold up no one: with `--max-connections 2
/// --header-timeout 1`, eight connections that stall in their headers to `/events` or a run's
/// events (cookie sent, the headers never ended) are never more than two held at once, each
/// is closed by the server once its header time is up, and a stream and a page asked for
/// behind them are served. A stream its client never reads holds no connection place either.
fn slow_clients_on_the_event_endpoints_hold_up_no_one(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let s = Server::with(&p, &["--max-connections", "2", "--header-timeout", "1"]);
    let cookie = s.login(&alice);
    // Streams opened and never read.
    let unread: Vec<_> = (0..4)
        .map(|_| stream(s.port, "/events", Some(&cookie)))
        .inspect(|(status, _)| assert!(status.starts_with("HTTP/1.1 200"), "{status}"))
        .collect();
    let before = run.snapshot();
    let stalled: Vec<TcpStream> = (0..8)
        .map(|i| {
            let path = if i % 2 == 0 {
                "/events".to_string()
            } else {
                format!("/runs/{}/events", run.id)
            };
            let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
            write!(
                c,
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\nX-Slow: "
            )
            .unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            c
        })
        .collect();
    // The unread streams gave their places back: at most two stalled connections held.
    let pid = s.child.id();
    for _ in 0..15 {
        let held = connections_held(pid, s.port).saturating_sub(unread.len());
        assert!(held <= 2, "{held} stalled connections held at once");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _) = stream(s.port, &format!("/runs/{}/events", run.id), Some(&cookie));
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(s.get("/", Some(&cookie)).status, 200);
    for (i, c) in stalled.into_iter().enumerate() {
        closed_by_server(c).unwrap_or_else(|e| panic!("stalled connection {i} left open: {e}"));
    }
    assert_eq!(run.snapshot(), before, "nothing written");
    drop(unread);
}

/// When `serve` is told to stop (SIGTERM, as a service manager does, or SIGINT), its open
/// streams end (each client reads the end of its connection) and the process exits, streams
/// and all, within a bounded wait.
fn streams_end_when_serve_shuts_down(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    for signal in ["TERM", "INT"] {
        // A background job of a non-interactive shell (a CI script's `cmd &`) inherits SIGINT
        // ignored, and so does every process it starts, serve included, as POSIX has it:
        // SIGINT then stops nothing, by design.
        if signal == "INT" && sigint_ignored() {
            eprintln!(
                "SKIPPED: SIGINT is ignored by this process (a background job), so by serve too"
            );
            continue;
        }
        let mut s = Server::start(&p);
        let cookie = s.login(&alice);
        let streams: Vec<_> = ["/events".to_string(), format!("/runs/{}/events", run.id)]
            .iter()
            .cycle()
            .take(4)
            .map(|path| {
                let (status, r) = stream(s.port, path, Some(&cookie));
                assert!(status.starts_with("HTTP/1.1 200"), "{status}");
                r
            })
            .collect();
        let killed = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &s.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        for (i, r) in streams.into_iter().enumerate() {
            closed_by_server(r)
                .unwrap_or_else(|e| panic!("SIG{signal}: stream {i} left open: {e}"));
        }
        let until = Instant::now() + Duration::from_secs(15);
        while s.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < until, "SIG{signal}: serve still running");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A stream lasts no longer than the session it was opened in: once the session ends (its
/// person signs out, or the token is revoked), the stream's next event ends it instead of
/// being sent (here the event of a commit, not the next ping), so a revoked token learns
/// nothing more of when a run changes. Another person's stream hears the same commit.
fn a_stream_ends_with_its_session(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    let alice = add(&p, "alice");
    let bob = add(&p, "bob");
    run.cmd()
        .args(["gates", "create", "g", "--prompt", "Ship?"])
        .assert()
        .success();
    let s = Server::start(&p);
    let run_events = format!("/runs/{}/events", run.id);
    for ending in ["sign-out", "revoke"] {
        let cookie = s.login(&alice);
        let others = s.login(&bob);
        let mine: Vec<_> = ["/events", run_events.as_str()]
            .iter()
            .map(|path| stream(s.port, path, Some(&cookie)))
            .inspect(|(status, _)| assert!(status.starts_with("HTTP/1.1 200"), "{status}"))
            .map(|(_, r)| r)
            .collect();
        let (status, mut theirs) = stream(s.port, &run_events, Some(&others));
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        if ending == "sign-out" {
            let page = s.get("/", Some(&cookie));
            let r = s.request(
                "POST",
                "/logout",
                Some(&cookie),
                &[("csrf", &csrf_of(&page.body))],
            );
            assert_eq!(r.status, 303, "{}", r.body);
        } else {
            p.cmd()
                .args(["principals", "revoke", "alice"])
                .assert()
                .success();
        }
        run.cmd()
            .args([
                "gates",
                "create",
                &format!("g_{}", ending.replace('-', "_")),
                "--prompt",
                "More?",
            ])
            .assert()
            .success();
        let heard = heard_until_change(&mut theirs);
        assert!(heard.contains("event: change"), "{heard}");
        for (i, mut r) in mine.into_iter().enumerate() {
            // The headers were read up to the status line; the rest, to the connection's end.
            let mut rest = String::new();
            r.read_to_string(&mut rest)
                .unwrap_or_else(|e| panic!("{ending}: stream {i} left open: {e}"));
            assert!(
                !rest.contains("event: change"),
                "{ending}: stream {i} went on: {rest}"
            );
        }
    }
}

/// Whether this process ignores SIGINT (inherited; `SigIgn` in /proc/self/status).
fn sigint_ignored() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}
