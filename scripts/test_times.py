#!/usr/bin/env python3
"""Where the test suite's time goes: each test's wall time and, for the end-to-end scripts, the
CPU time of the script and every process it waited for (tests/e2e/lib.sh prints it at the end),
read from ctest's logs of the last run (scripts/test.sh keeps both of its passes' logs,
Testing/Temporary/LastTest-parallel.log and LastTest-timing.log; without them, a plain ctest's
LastTest.log. e2e_gpu_check_plumbing runs ctest itself and replaces LastTest.log: its own pass's
log may then be the inner one's).

    scripts/test_times.py [BUILD_DIR] [--top N] [--costs]

--costs prints tests/test_costs.txt instead: every test's wall seconds, longest first, which a
fresh build's ctest uses to start the longest tests first.

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
    ap.add_argument("--costs", action="store_true")
    a = ap.parse_args()
    tmp = os.path.join(a.build, "Testing", "Temporary")
    logs = [os.path.join(tmp, f"LastTest-{p}.log") for p in ("parallel", "timing")]
    if not all(os.path.exists(log) for log in logs):
        logs = [os.path.join(tmp, "LastTest.log")]
    tests = {}
    for log in logs:  # a fixture both passes ran counts once, with its longer time
        for name, wall, cpu in parse(log):
            if name not in tests or wall > tests[name][1]:
                tests[name] = (name, wall, cpu)
    tests = sorted(tests.values(), key=lambda t: (-t[1], t[0]))
    if a.costs:
        print("# Each test's wall seconds in a run of the whole suite, the order in which a fresh build's ctest")
        print("# starts them (cmake/HpctrainTesting.cmake, hpctrain_test_cost). Written by")
        print("# `scripts/test_times.py BUILD --costs` from that run's logs; a test not listed starts last.")
        for name, wall, _ in tests:
            print(f"{name} {wall:.0f}")
        return
    # (ctest --show-only rewrites LastTest.log: keep the run's log as it was)
    log = os.path.join(tmp, "LastTest.log")
    kept = open(log, "rb").read() if os.path.exists(log) else None
    procs = processors(a.build)
    if kept is not None:
        open(log, "wb").write(kept)
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
