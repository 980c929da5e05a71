#!/usr/bin/env python3
"""Where the test suite's time goes: each test's wall time and, for the end-to-end scripts, the
CPU time of the script and every process it waited for (tests/e2e/lib.sh prints it at the end),
read from ctest's log of the last run (Testing/Temporary/LastTest.log; e2e_gpu_check_plumbing runs
ctest itself and replaces that log: select the tests without it, -E gpu_check_plumbing).

    scripts/test_times.py [BUILD_DIR] [--top N]

Columns: wall seconds, CPU seconds (user + system), their ratio (cores busy on average; a test
near 1 leaves one of two cores idle, near 2 uses both) and the test's PROCESSORS (what ctest
reserves for it). The suite's wall time at -j 2 is about the sum of wall x PROCESSORS / 2."""
import argparse
import os
import re
import subprocess


def parse(log):
    tests, name, cpu = [], None, None
    for line in open(log, encoding="utf-8", errors="replace"):
        m = re.match(r"^\d+/\d+ Testing: (\S+)", line)
        if m:
            name, cpu = m.group(1), None
            continue
        m = re.match(r"^cpu times: (.*)", line)
        if m and name:
            secs = [float(a) * 60 + float(b) for a, b in re.findall(r"(\d+)m([\d.]+)s", m.group(1))]
            cpu = sum(secs)
            continue
        m = re.match(r"^Test time = +([\d.]+) sec", line)
        if m and name:
            tests.append((name, float(m.group(1)), cpu))
            name = None
    return tests


def processors(build):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True,
                         text=True, check=False).stdout
    import json

    procs = {}
    for t in json.loads(out or "{}").get("tests", []):
        p = 1
        for prop in t.get("properties", []):
            if prop["name"] == "PROCESSORS":
                p = prop["value"]
        procs[t["name"]] = p
    return procs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    log = os.path.join(a.build, "Testing", "Temporary", "LastTest.log")
    tests = parse(log)
    # (ctest --show-only rewrites LastTest.log: keep the run's log as it was)
    kept = open(log, "rb").read()
    procs = processors(a.build)
    open(log, "wb").write(kept)
    tests.sort(key=lambda t: -t[1])
    print(f"{'wall s':>8} {'cpu s':>8} {'cores':>6} {'procs':>5}  test")
    for name, wall, cpu in tests[: a.top]:
        ratio = f"{cpu / wall:6.2f}" if cpu is not None and wall > 0 else "     -"
        cpu_s = f"{cpu:8.1f}" if cpu is not None else "       -"
        print(f"{wall:8.1f} {cpu_s} {ratio} {procs.get(name, '?'):>5}  {name}")
    total = sum(w for _, w, _ in tests)
    slots = sum(w * procs.get(n, 1) for n, w, _ in tests) / 2
    print(f"{len(tests)} tests: {total:.0f} s of test time; about {slots:.0f} s of wall at -j 2")


if __name__ == "__main__":
    main()
