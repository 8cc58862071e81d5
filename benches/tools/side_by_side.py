#!/usr/bin/env python3
"""The hot rows (`bind`, `get`, `exec-append`, start-up) of several release binaries, side by
side in one run: each in a fresh project of its own, interleaved call by call (the order
rotated each round) so that the machine's load falls on all of them alike.

    python3 benches/tools/side_by_side.py N before=PATH after=PATH [...]

Prints a Markdown table of medians (ms) and the last binary's ratio to the first's."""
import os
import statistics
import subprocess
import sys
import tempfile
import time

n = int(sys.argv[1])
bins = dict(a.split("=", 1) for a in sys.argv[2:])
names = list(bins)
res = {}
for name, b in bins.items():
    d = tempfile.mkdtemp(prefix=f"side-{name}-")
    run = subprocess.check_output([b, "init", "-q"], cwd=d, text=True).strip()
    env = dict(os.environ, PROSE_RUN=run)
    subprocess.check_call([b, "bind", "x", "v"], cwd=d, env=env, stdout=subprocess.DEVNULL)
    res[name] = (d, env, b)
ops = (
    ("bind", ["bind", "x", "v"]),
    ("get", ["get", "x"]),
    ("exec-append", ["exec-append", "--index", "2", "--text", "s", "--status", "completed"]),
    ("--version", ["--version"]),
)
times = {(k, op): [] for k in names for op, _ in ops}
for i in range(n):
    for name in names[i % len(names):] + names[: i % len(names)]:
        d, env, b = res[name]
        for op, args in ops:
            t = time.perf_counter()
            subprocess.run([b] + args, cwd=d, env=env, stdout=subprocess.DEVNULL, check=True)
            times[(name, op)].append(time.perf_counter() - t)
print("| row, median of %d | %s | ratio |" % (n, " | ".join(names)))
print("|---|" + "---|" * (len(names) + 1))
for op, _ in ops:
    m = [statistics.median(times[(k, op)]) * 1000 for k in names]
    print("| `%s` | %s | %.3f |" % (op, " | ".join("%.2f ms" % x for x in m), m[-1] / m[0]))
