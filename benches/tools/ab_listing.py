#!/usr/bin/env python3
"""Side by side cost of the project listings of two prose-state binaries over many runs:
`gates --json` (every pending gate), `gates --json --limit 50` and `runs --json --limit 50`.

    python3 benches/tools/ab_listing.py OLD_BINARY NEW_BINARY [RUNS] [ROUNDS] [DIR]

One project of RUNS runs (default 100,000), each with one pending gate, is made from a
template run (as benches/compare.rs makes its catalog fixture: the template's state.db copied
and given each run's id). A second project holds the same run directories as hard links (the
listings read the runs' files, never write them), so that each binary keeps a catalog of its
own version. Each binary lists once to build its catalog (not timed); then ROUNDS rounds
(default 5) run each listing with both binaries, alternating which goes first. Prints the
medians and the ratio new/old. DIR (default a temporary directory) is removed at the end.
"""
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time


def make_project(binary, root, n):
    os.makedirs(root)
    env = dict(os.environ, HOME=root, PROSE_HOME=root)
    env.pop("PROSE_RUN", None)
    subprocess.run([binary, "init", "--run-id", "20260101-000000-templt"], cwd=root, env=env,
                   check=True, capture_output=True)
    base = [binary, "--run", "20260101-000000-templt"]
    subprocess.run(base + ["gates", "create", "approve", "--prompt", "Ship it?", "--timeout",
                           "1d"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(base + ["checkpoint"], cwd=root, env=env, check=True, capture_output=True)
    runs = os.path.join(root, ".prose", "runs")
    template = os.path.join(runs, "20260101-000000-templt")
    data = open(os.path.join(template, "state.db"), "rb").read()
    shutil.rmtree(template)
    for f in os.listdir(os.path.join(root, ".prose")):
        if f.startswith("catalog"):
            os.remove(os.path.join(root, ".prose", f))
    for i in range(n):
        rid = f"20260101-000000-{i:06x}"
        d = os.path.join(runs, rid)
        os.makedirs(os.path.join(d, "attachments"))
        db = os.path.join(d, "state.db")
        with open(db, "wb") as f:
            f.write(data)
        c = sqlite3.connect(db)
        c.executescript(
            "PRAGMA synchronous = OFF; PRAGMA foreign_keys = OFF; "
            f"UPDATE run SET id = '{rid}'; UPDATE gates SET run_id = '{rid}';")
        c.close()
        if i and i % 20000 == 0:
            print(f"  {i} runs made", file=sys.stderr)
    return env


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"old": sys.argv[1], "new": sys.argv[2]}
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    top = sys.argv[5] if len(sys.argv) > 5 else tempfile.mkdtemp(prefix="prose-ab-listing-")
    try:
        a = os.path.join(top, "a")
        t = time.perf_counter()
        env_a = make_project(bins["old"], a, n)
        print(f"  {n} runs made in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        b = os.path.join(top, "b")
        subprocess.run(["cp", "-al", a, b], check=True)
        env_b = dict(env_a, HOME=b, PROSE_HOME=b)
        projects = {"old": (a, env_a), "new": (b, env_b)}
        listings = {
            "gates (all)": ["--json", "gates"],
            "gates --limit 50": ["--json", "gates", "--limit", "50"],
            "runs --limit 50": ["--json", "runs", "--limit", "50"],
        }
        for name, binary in bins.items():
            root, env = projects[name]
            out = subprocess.run([binary, "--json", "gates", "--limit", "1"], cwd=root, env=env,
                                 check=True, capture_output=True)
            assert out.stdout.strip() not in (b"", b"[]"), out
        times = {(n_, l): [] for n_ in bins for l in listings}
        for i in range(rounds):
            for name in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
                root, env = projects[name]
                for label, args in listings.items():
                    t = time.perf_counter()
                    subprocess.run([bins[name]] + args, cwd=root, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   check=True)
                    times[(name, label)].append(time.perf_counter() - t)
        for label in listings:
            old = statistics.median(times[("old", label)]) * 1000
            new = statistics.median(times[("new", label)]) * 1000
            print(f"{label}: old {old:.1f} ms, new {new:.1f} ms, ratio {new / old:.3f} "
                  f"(median of {rounds}, {n} runs)")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
