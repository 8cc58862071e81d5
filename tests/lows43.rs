//! Issue 43's low findings: `query` refuses a statement that calls a function with an effect
//! beyond its result (PostgreSQL: any VOLATILE function not on docs/query.md's list, however
//! it is reached; SQLite: any function SQLite marks SQLITE_DIRECTONLY); `doctor` names a run
//! directory that is a symbolic link as the link it is; `import` of a run whose state.db is a
//! symbolic link says so.

use crate::common::*;
use postgres::fallible_iterator::FallibleIterator;
use std::path::Path;
use std::time::Duration;

on_both!(
    query_refuses_what_acts_beyond_the_statement_and_reads_as_before,
    doctor_names_a_symlinked_run_directory_as_the_link,
    import_refuses_a_symlinked_state_db_saying_so,
);

/// On PostgreSQL, `query` runs as a role that may only read (it refuses a superuser).
fn as_reader(p: &Project) {
    if let Some(url) = &p.pg_url {
        let reader = pg::as_reader(url);
        p.write(
            ".prose/.env",
            format!("OPENPROSE_POSTGRES_URL={reader}\n").as_bytes(),
        );
    }
}

/// A session of the test's own on the project's database, as the user that made it.
fn admin(p: &Project) -> postgres::Client {
    let url = p.pg_url.as_ref().unwrap();
    postgres::Client::connect(
        &url.replace("sslmode=require", "sslmode=disable"),
        postgres::NoTls,
    )
    .unwrap()
}

/// Asserts `sql` is refused with exit 4, in one line holding `says`, and changes nothing.
fn refused(run: &Run, sql: &str, says: &str, before: &str) {
    let a = run.cmd().args(["query", sql]).assert().failure();
    let err = stderr(&a);
    assert_eq!(code(&a), 4, "{sql}: {err}");
    assert_eq!(err.lines().count(), 1, "{sql}: {err}");
    assert!(err.contains(says), "{sql}: wanted {says:?} in: {err}");
    assert!(a.get_output().stdout.is_empty(), "{sql}");
    assert_eq!(run.snapshot(), before, "{sql}");
}

/// What `query --json` prints for `sql`, which must succeed.
fn read(run: &Run, sql: &str) -> serde_json::Value {
    let a = run.cmd().args(["--json", "query", sql]).assert();
    let out = a.get_output();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `query` refuses a statement that calls a function with an effect beyond its result, in
/// every form that reaches one (exit 4, one line naming it), and nothing happens: on
/// PostgreSQL no notification reaches a listener and no advisory lock is taken, not even
/// while the statement would have run. Reads, random values and the clock work as before.
fn query_refuses_what_acts_beyond_the_statement_and_reads_as_before(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    as_reader(&p);
    let before = run.snapshot();
    if b == Backend::Sqlite {
        for (sql, says) in [
            ("SELECT sqlite_log(1, 'x')", "sqlite_log"),
            ("SELECT Sqlite_Log(1, 'x')", "Sqlite_Log"),
            ("SELECT * FROM (SELECT sqlite_log(1, 'y'))", "sqlite_log"),
            (
                "WITH c(v) AS (SELECT sqlite_log(1, 'z')) SELECT v FROM c",
                "sqlite_log",
            ),
            ("SELECT hex(fts3_tokenizer('simple'))", "fts3_tokenizer"),
            ("SELECT load_extension('nothing')", "load_extension"),
        ] {
            refused(&run, sql, says, &before);
        }
        let v = read(
            &run,
            "SELECT typeof(random()) AS r, length(randomblob(4)) AS n, changes() AS c, \
             date('now') IS NOT NULL AS d, (SELECT value FROM bindings WHERE name = 'keep') AS v",
        );
        assert_eq!(
            v,
            serde_json::json!([{"r": "integer", "n": 4, "c": 0, "d": 1, "v": "me"}])
        );
        assert_eq!(run.snapshot(), before);
        return;
    }
    let mut listener = admin(&p);
    listener.batch_execute("LISTEN prose_l43").unwrap();
    let mut other = admin(&p);
    let notify = "pg_notify(text,text)";
    let lock = "pg_advisory_lock(bigint)";
    let utility = "a utility statement";
    for (sql, says) in [
        ("SELECT pg_notify('prose_l43', 'y')", notify),
        ("SELECT pg_catalog.pg_notify('prose_l43', 'y')", notify),
        ("SELECT \"pg_notify\"('prose_l43', 'y')", notify),
        ("SELECT PG_CATALOG.\"pg_notify\"('prose_l43', 'y')::text", notify),
        ("SELECT * FROM pg_notify('prose_l43', 'y')", notify),
        ("SELECT 1 FROM (SELECT pg_notify('prose_l43', 'y')) s", notify),
        (
            "WITH n AS (SELECT pg_notify('prose_l43', 'y')) SELECT 1 FROM n",
            notify,
        ),
        (
            "SELECT 1 WHERE EXISTS (SELECT pg_notify('prose_l43', 'y'))",
            notify,
        ),
        (
            "SELECT v FROM (VALUES (1)) t(v), LATERAL pg_notify('prose_l43', 'y') n",
            notify,
        ),
        ("SELECT pg_advisory_lock(4343)", lock),
        ("SELECT pg_advisory_lock(4343)::text AS locked", lock),
        (
            "SELECT x FROM generate_series(1, 2) x WHERE x > (SELECT count(*) FROM pg_advisory_lock(4343))",
            lock,
        ),
        (
            "SELECT pg_try_advisory_lock(4343)",
            "pg_try_advisory_lock(bigint)",
        ),
        (
            "SELECT pg_advisory_xact_lock(4343)::text",
            "pg_advisory_xact_lock(bigint)",
        ),
        (
            "SELECT set_config('application_name', 'x', false)",
            "set_config(text,text,boolean)",
        ),
        (
            "SELECT query_to_xml('SELECT pg_notify(''prose_l43'', ''y'')', true, true, '')",
            "query_to_xml(text,boolean,boolean,text)",
        ),
        (
            "SELECT nextval('openprose.execution_id_seq')",
            "nextval(regclass)",
        ),
        (
            "DO $$BEGIN PERFORM pg_notify('prose_l43', 'y'); END$$",
            utility,
        ),
        (
            "DO $$BEGIN EXECUTE 'SELECT pg_advisory_lock(4343)'; END$$",
            utility,
        ),
        ("NOTIFY prose_l43, 'y'", utility),
        ("EXPLAIN ANALYZE SELECT pg_notify('prose_l43', 'y')", utility),
    ] {
        refused(&run, sql, says, &before);
    }
    // Refused before it runs: the lock is never held, even while the statement would sleep.
    let mut child = run
        .std_cmd()
        .args(["query", "SELECT pg_advisory_lock(4343), pg_sleep(5)"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = loop {
        let free: bool = other
            .query_one("SELECT pg_try_advisory_lock(4343)", &[])
            .unwrap()
            .get(0);
        assert!(free, "the statement took the advisory lock");
        other
            .batch_execute("SELECT pg_advisory_unlock_all()")
            .unwrap();
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(4));
    // No notification reached the listener.
    listener.batch_execute("SELECT 1").unwrap();
    let heard: Vec<_> = listener
        .notifications()
        .timeout_iter(Duration::from_millis(300))
        .collect()
        .unwrap();
    assert!(heard.is_empty(), "a listener was notified: {heard:?}");
    // What a reader needs still runs: the openprose tables, random values and the clock,
    // sizes, the locks view, a sample, sleeping within --timeout.
    let v = read(
        &run,
        "SELECT b.name, b.value, random() < 1 AS r, gen_random_uuid() IS NOT NULL AS u,
                clock_timestamp() >= now() AS c, pg_total_relation_size('openprose.bindings') > 0 AS s,
                (SELECT count(*) FROM pg_locks) > 0 AS l, pg_sleep(0)::text = '' AS z,
                current_setting('search_path') <> '' AS p
           FROM openprose.bindings b
          WHERE b.name IN (SELECT 'keep') ORDER BY 1",
    );
    assert_eq!(
        v,
        serde_json::json!([{"name": "keep", "value": "me", "r": true, "u": true, "c": true,
                            "s": true, "l": true, "z": true, "p": true}])
    );
    let v = read(
        &run,
        "WITH t AS (SELECT name, length(value) AS n FROM openprose.bindings TABLESAMPLE BERNOULLI (100))
         SELECT name, n, sum(n) OVER (ORDER BY n RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS w
           FROM t",
    );
    assert_eq!(v, serde_json::json!([{"name": "keep", "n": 2, "w": 2}]));
    assert_eq!(
        read(&run, "VALUES (1, 'a')"),
        serde_json::json!([{"column1": 1, "column2": "a"}])
    );
    assert_eq!(run.snapshot(), before);
}

/// On PostgreSQL the functions a statement calls are the server's reading of it: a VOLATILE
/// function reached through a view of a view, a cast, an operator, a domain's CHECK, an
/// aggregate's state function, a function's default argument or its SQL-standard body, or a
/// row-level security policy is refused as a direct call is (exit 4, one line naming it).
/// The same objects' harmless neighbours run.
#[test]
fn query_on_postgres_refuses_volatile_functions_however_they_are_reached() {
    let Some(p) = Project::on(Backend::Postgres) else {
        return;
    };
    let run = p.init();
    run.bind("keep", "me", None);
    admin(&p)
        .batch_execute(
            "CREATE FUNCTION public.vol(x int) RETURNS int LANGUAGE sql VOLATILE
               AS $$ SELECT x FROM (SELECT pg_advisory_lock(4344)) s $$;
             CREATE FUNCTION public.vol_bool(x int) RETURNS boolean LANGUAGE sql VOLATILE
               AS $$ SELECT x IS NOT NULL $$;
             CREATE FUNCTION public.calm(x int) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT x $$;
             CREATE TYPE public.mood AS ENUM ('ok');
             CREATE FUNCTION public.to_mood(x int) RETURNS public.mood LANGUAGE sql VOLATILE
               AS $$ SELECT 'ok'::public.mood $$;
             CREATE CAST (int AS public.mood) WITH FUNCTION public.to_mood(int);
             CREATE FUNCTION public.vol_op(a int, b int) RETURNS int LANGUAGE sql VOLATILE
               AS $$ SELECT a + b $$;
             CREATE OPERATOR public.### (LEFTARG = int, RIGHTARG = int, FUNCTION = public.vol_op);
             CREATE VIEW public.notifier AS SELECT 1 AS n FROM (SELECT pg_notify('a', 'b')) s;
             CREATE VIEW public.notifier2 AS SELECT * FROM public.notifier;
             CREATE VIEW public.plain AS SELECT public.calm(7) AS n;
             CREATE DOMAIN public.checked AS int CHECK (public.vol_bool(VALUE));
             CREATE FUNCTION public.defaulted(a int DEFAULT public.vol(1)) RETURNS int
               LANGUAGE sql STABLE AS $$ SELECT a $$;
             CREATE FUNCTION public.atomic() RETURNS int LANGUAGE sql STABLE
               BEGIN ATOMIC SELECT public.vol(2); END;
             CREATE FUNCTION public.sfunc(s int, x int) RETURNS int LANGUAGE sql VOLATILE
               AS $$ SELECT s + x $$;
             CREATE AGGREGATE public.agg(int) (SFUNC = public.sfunc, STYPE = int, INITCOND = 0);
             CREATE TABLE public.guarded (id int);
             INSERT INTO public.guarded VALUES (1);
             ALTER TABLE public.guarded ENABLE ROW LEVEL SECURITY;
             CREATE POLICY p ON public.guarded USING (public.vol_bool(id));",
        )
        .unwrap();
    as_reader(&p);
    admin(&p)
        .batch_execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO prose_reader")
        .unwrap();
    let before = run.snapshot();
    for (sql, says) in [
        ("SELECT 1::public.mood", "to_mood(integer)"),
        ("SELECT CAST(1 AS public.mood)", "to_mood(integer)"),
        ("SELECT 1 OPERATOR(public.###) 2", "vol_op(integer,integer)"),
        ("SELECT * FROM public.notifier2", "pg_notify(text,text)"),
        ("SELECT 1::public.checked", "vol_bool(integer)"),
        ("SELECT public.defaulted()", "vol(integer)"),
        // A default is looked at whether or not the call leaves it out.
        ("SELECT public.defaulted(3)", "vol(integer)"),
        ("SELECT public.atomic()", "vol(integer)"),
        (
            "SELECT public.agg(x) FROM generate_series(1, 3) x",
            "sfunc(integer,integer)",
        ),
        ("SELECT count(*) FROM public.guarded", "vol_bool(integer)"),
        (
            "SELECT (SELECT public.vol(1)) FROM openprose.bindings",
            "vol(integer)",
        ),
    ] {
        refused(&run, sql, says, &before);
    }
    assert_eq!(
        read(
            &run,
            "SELECT p.n, public.calm(2) AS c, 1 + 2 AS d FROM public.plain p"
        ),
        serde_json::json!([{"n": 7, "c": 2, "d": 3}])
    );
    assert_eq!(run.snapshot(), before);
}

/// docs/query.md lists the VOLATILE functions `query` allows on PostgreSQL, and the code
/// allows exactly those.
#[test]
fn the_documented_volatile_allow_list_is_the_one_the_code_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/query.md")).unwrap();
    let listed = doc
        .split("<!-- volatile-allowed -->")
        .nth(1)
        .and_then(|s| s.split("<!-- /volatile-allowed -->").next())
        .expect("docs/query.md marks its allow list");
    // Each item: "- `name`, `name`: why".
    let mut documented: Vec<&str> = listed
        .split("\n- ")
        .skip(1)
        .flat_map(|item| {
            item.split(':')
                .next()
                .unwrap()
                .split('`')
                .skip(1)
                .step_by(2)
        })
        .collect();
    let code = std::fs::read_to_string(root.join("src/store/postgres/query.rs")).unwrap();
    let array = code
        .split("const VOLATILE_ALLOWED: &[&str] = &[")
        .nth(1)
        .and_then(|s| s.split("];").next())
        .expect("the allow list in src/store/postgres/query.rs");
    let mut held: Vec<&str> = array
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('"'))
        .map(|l| l.trim_end_matches(',').trim_matches('"'))
        .collect();
    documented.sort_unstable();
    held.sort_unstable();
    assert!(!held.is_empty());
    assert_eq!(documented, held);
}

/// `doctor` names a run directory that is a symbolic link as the link (its own name, and
/// where it points), never as the run it leads to, and does not check that run through it;
/// the run itself is checked, healthy, under its own name. So does `doctor --run LINK`.
fn doctor_names_a_symlinked_run_directory_as_the_link(b: Backend) {
    let Some(p) = Project::on(b) else { return };
    let run = p.init();
    run.bind("keep", "me", None);
    let link = "20990101-000000-link43";
    std::os::unix::fs::symlink(&run.id, p.root().join(".prose/runs").join(link)).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let away = outside.path().join(&run.id);
    copy_dir(&run.dir, &away);
    let far = "20990101-000000-away43";
    std::os::unix::fs::symlink(&away, p.root().join(".prose/runs").join(far)).unwrap();
    let before = run.snapshot();
    let a = p.cmd().args(["--json", "doctor"]).assert().failure();
    assert_eq!(code(&a), 1, "{}", stderr(&a));
    let v = stdout_json(&a);
    let problems = v["problems"].as_array().unwrap();
    let of = |id: &str| -> Vec<&serde_json::Value> {
        problems
            .iter()
            .filter(|p| p["run_id"] == id || p["detail"].as_str().unwrap().contains(id))
            .collect()
    };
    let linked = of(link);
    assert_eq!(linked.len(), 1, "{v}");
    assert_eq!(linked[0]["run_id"], link, "{v}");
    assert_eq!(linked[0]["kind"], "symlink", "{v}");
    assert_eq!(linked[0]["fixed"], false, "{v}");
    let detail = linked[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("{link} -> {}", run.id))
            && detail.contains("a symbolic link to another run's directory")
            && detail.contains("not followed"),
        "{detail}"
    );
    let far_problems = of(far);
    assert_eq!(far_problems.len(), 1, "{v}");
    assert_eq!(far_problems[0]["run_id"], far, "{v}");
    let detail = far_problems[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("not a run of this project")
            && detail.contains(&away.display().to_string()),
        "{detail}"
    );
    // The run it leads to is named by no problem: it is healthy.
    assert!(
        problems.iter().all(|p| p["run_id"] != run.id.as_str()),
        "{v}"
    );
    assert_eq!(problems.len(), 2, "{v}");
    // The text names the link first.
    let a = p.cmd().args(["doctor"]).assert().failure();
    let out = String::from_utf8(a.get_output().stdout.clone()).unwrap();
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("{link}: symlink: ")) && l.contains(&run.id)),
        "{out}"
    );
    // One run named: the link, as the link.
    let a = p
        .cmd()
        .args(["--json", "--run", link, "doctor"])
        .assert()
        .failure();
    let v = stdout_json(&a);
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{v}");
    assert_eq!(problems[0]["run_id"], link, "{v}");
    assert_eq!(problems[0]["kind"], "symlink", "{v}");
    // doctor --fix leaves the link, the run and the copy as they are.
    p.cmd().args(["doctor", "--fix"]).assert().failure();
    assert!(
        std::fs::symlink_metadata(p.root().join(".prose/runs").join(link))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(run.snapshot(), before);
    p.cmd()
        .args(["--run", &run.id, "doctor"])
        .assert()
        .success();
}

/// `import` of a run directory whose state.db is a symbolic link (to a live run's database,
/// or to nothing) is refused with exit 4 and one line saying that the state.db is a symbolic
/// link, which import does not follow; nothing is imported, whichever backend receives it.
/// On main the message was about a value "replaced while the run was read" (exit 1), or "no
/// state.db" (exit 3) for a dangling link.
fn import_refuses_a_symlinked_state_db_saying_so(b: Backend) {
    let source = Project::new();
    let src = source.init();
    src.bind("small", "v", None);
    let big = source.write("big.txt", &vec![b'x'; 300_000]);
    src.cmd()
        .args(["bind", "big", "--file"])
        .arg(&big)
        .assert()
        .success();
    let Some(p) = Project::on(b) else { return };
    p.init();
    let outside = tempfile::tempdir().unwrap();
    let linked = outside.path().join(&src.id);
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(
        std::fs::canonicalize(&src.db).unwrap(),
        linked.join("state.db"),
    )
    .unwrap();
    let dangling = outside.path().join("20990101-000000-gone43");
    std::fs::create_dir(&dangling).unwrap();
    std::os::unix::fs::symlink(outside.path().join("nowhere.db"), dangling.join("state.db"))
        .unwrap();
    let src_before = src.snapshot();
    for path in [
        linked.clone(),
        linked.join("state.db"),
        dangling.clone(),
        dangling.join("state.db"),
    ] {
        let a = p.cmd().arg("import").arg(&path).assert().failure();
        let err = stderr(&a);
        assert_eq!(code(&a), 4, "{}: {err}", path.display());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("state.db is a symbolic link")
                && err.contains("import does not follow")
                && err.contains("nothing was imported"),
            "{err}"
        );
    }
    // Nothing landed: the run is not in the project, and the source is as it was.
    let a = p
        .cmd()
        .args(["--run", &src.id, "get", "small"])
        .assert()
        .failure();
    assert_eq!(code(&a), 3, "{}", stderr(&a));
    assert_eq!(src.snapshot(), src_before);
    // The run's own directory imports.
    p.cmd().arg("import").arg(&src.dir).assert().success();
    assert_eq!(
        p.cmd()
            .args(["--run", &src.id, "get", "small"])
            .assert()
            .success()
            .get_output()
            .stdout,
        b"v"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}
