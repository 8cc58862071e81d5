#!/usr/bin/env python3
"""Side by side start-up cost of two prose-state binaries: `bind`, `get` and `exec-append`,
interleaved.

    python3 benches/tools/ab_startup.py OLD_BINARY NEW_BINARY [CALLS]

Each binary gets a fresh project of its own (init, one bind) in a temporary directory; then
CALLS rounds (default 300) each run `bind`, `get` and `exec-append` with both binaries,
alternating which goes first. Prints the medians and the ratio new/old. Then, where valgrind
is installed (PROSE_AB_CALLGRIND=0 skips it), the instructions each command executes under
callgrind, the median of 3 runs a binary, interleaved: a count the machine's load does not
move. Copy both binaries to the same filesystem first: where a binary lives changes its
start-up (on this machine a binary under /work started 0.4 ms slower than the same file under
/tmp).
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"old": sys.argv[1], "new": sys.argv[2]}
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    runs = {}
    for name, binary in bins.items():
        d = tempfile.mkdtemp(prefix=f"prose-ab-{name}-")
        subprocess.run([binary, "init"], cwd=d, check=True, capture_output=True)
        rid = [r for r in os.listdir(os.path.join(d, ".prose/runs")) if not r.startswith(".")][0]
        subprocess.run([binary, "--run", rid, "bind", "x", "hello"], cwd=d, check=True,
                       capture_output=True)
        runs[name] = (binary, d, rid)
    commands = (
        ("bind", lambda i: ["bind", "x", f"v{i}"]),
        ("get", lambda i: ["get", "x"]),
        ("exec-append", lambda i: ["exec-append", "--index", str(i), "--text", f"s{i}",
                                   "--status", "completed"]),
    )
    times = {(n, c): [] for n in bins for c, _ in commands}
    for i in range(calls):
        for n in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
            binary, d, rid = runs[n]
            for c, args in commands:
                t = time.perf_counter()
                subprocess.run([binary, "--run", rid] + args(i), cwd=d, stdout=subprocess.DEVNULL,
                               check=True)
                times[(n, c)].append(time.perf_counter() - t)
    for c, _ in commands:
        old = statistics.median(times[("old", c)]) * 1000
        new = statistics.median(times[("new", c)]) * 1000
        print(f"{c}: old {old:.2f} ms, new {new:.2f} ms, ratio {new / old:.3f} (median of {calls})")
    if shutil.which("valgrind") and os.environ.get("PROSE_AB_CALLGRIND") != "0":
        counts = {(n, c): [] for n in bins for c, _ in commands}
        for i in range(3):
            for n in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
                binary, d, rid = runs[n]
                for c, args in commands:
                    out = subprocess.run(
                        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                         binary, "--run", rid] + args(calls + i),
                        cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                        check=True)
                    found = re.search(r"Collected : (\d+)", out.stderr)
                    counts[(n, c)].append(int(found.group(1)))
        for c, _ in commands:
            old = statistics.median(counts[("old", c)])
            new = statistics.median(counts[("new", c)])
            print(f"{c}: instructions old {old:,}, new {new:,}, ratio {new / old:.3f} "
                  "(callgrind, median of 3)")
    for n, binary in bins.items():
        print(f"{n}: {binary}, {os.path.getsize(binary)} bytes")


if __name__ == "__main__":
    main()
