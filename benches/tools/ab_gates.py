#!/usr/bin/env python3
"""Side by side cost of the gate commands of two prose-state binaries, interleaved:
`gates wait` on a decided gate (which checks the whole log and the gate against it) and
`approve` (which checks the gate against its history inside the decision's transaction).

    python3 benches/tools/ab_gates.py OLD_BINARY NEW_BINARY [ROUNDS] [GATES]

Each binary gets a fresh project and home of its own in a temporary directory, with GATES
gates (default 250) created and approved, so the run's audit log holds about 2 * GATES rows.
Then ROUNDS rounds (default 100) each time, with both binaries, alternating which goes first:
`gates wait` on the first gate, and `approve` of a gate made just before (not timed). Prints
the medians and the ratio new/old. Copy both binaries to the same filesystem first (see
ab_startup.py).
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"old": sys.argv[1], "new": sys.argv[2]}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    gates = int(sys.argv[4]) if len(sys.argv) > 4 else 250
    runs = {}
    for name, binary in bins.items():
        d = tempfile.mkdtemp(prefix=f"prose-ab-gates-{name}-")
        env = dict(os.environ, HOME=d, PROSE_HOME=d)
        env.pop("PROSE_RUN", None)
        subprocess.run([binary, "init", "--run-id", "20261124-000000-abgate"], cwd=d, env=env,
                       check=True, capture_output=True)
        base = [binary, "--run", "20261124-000000-abgate"]
        for i in range(gates):
            subprocess.run(base + ["gates", "create", f"g{i}", "--prompt", f"ship {i}?"], cwd=d,
                           env=env, check=True, capture_output=True)
            subprocess.run(base + ["approve", f"g{i}", "--as", "alice", "--yes"], cwd=d,
                           env=env, check=True, capture_output=True)
        runs[name] = (base, d, env)
    times = {(n, c): [] for n in bins for c in ("wait", "approve")}
    for i in range(rounds):
        for n in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
            base, d, env = runs[n]
            t = time.perf_counter()
            subprocess.run(base + ["gates", "wait", "g0"], cwd=d, env=env,
                           stdout=subprocess.DEVNULL, check=True)
            times[(n, "wait")].append(time.perf_counter() - t)
            subprocess.run(base + ["gates", "create", f"r{i}", "--prompt", "again?"], cwd=d,
                           env=env, check=True, capture_output=True)
            t = time.perf_counter()
            subprocess.run(base + ["approve", f"r{i}", "--as", "alice", "--yes"], cwd=d,
                           env=env, stdout=subprocess.DEVNULL, check=True)
            times[(n, "approve")].append(time.perf_counter() - t)
    for c in ("wait", "approve"):
        old = statistics.median(times[("old", c)]) * 1000
        new = statistics.median(times[("new", c)]) * 1000
        print(f"{c}: old {old:.2f} ms, new {new:.2f} ms, ratio {new / old:.3f} "
              f"(median of {rounds}, about {2 * gates} audit rows)")
    for n, (base, _, _) in runs.items():
        print(f"{n}: {base[0]}")


if __name__ == "__main__":
    main()
