#!/usr/bin/env python3
"""Lists the functions in src/ longer than a limit (default 120 lines) and exits 1 if any are.

A function's length is its extent as Universal Ctags reports it: from the line that names the
function to the line of its closing brace, both counted (the measure issue 41 used). Lambdas
count toward the function that holds them.

Usage: scripts/long_functions.py [--max N] [--all] [DIR ...]   (default DIR: src)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys


def function_extents(dirs):
    """Yields (lines, path, start_line, name) for every C++ function definition under dirs."""
    cmd = ["ctags", "--languages=C++", "--langmap=C++:+.cu.cuh", "--kinds-C++=f",
           "--fields=+ne", "--extras=-F", "-o", "-", "-R"] + dirs
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for row in out.splitlines():
        cols = row.split("\t")
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" not in fields or "end" not in fields:
            continue
        start, end = int(fields["line"]), int(fields["end"])
        scope = fields.get("class") or fields.get("struct") or fields.get("namespace")
        name = f"{scope}::{cols[0]}" if scope else cols[0]
        name = re.sub(r"__anon[0-9a-f]+", "(anonymous)", name)
        yield end - start + 1, cols[1], start, name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=120, help="longest allowed function (lines)")
    parser.add_argument("--all", action="store_true", help="list every function, longest first")
    parser.add_argument("dirs", nargs="*", default=["src"])
    args = parser.parse_args()
    if shutil.which("ctags") is None:
        sys.exit("long_functions.py: Universal Ctags (`ctags`) is not on PATH; install "
                 "universal-ctags (apt-get install universal-ctags)")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    dirs = [d if os.path.isabs(d) else os.path.relpath(os.path.join(root, d)) for d in args.dirs]
    rows = sorted(function_extents(dirs), key=lambda r: (-r[0], r[1], r[2]))
    long_rows = [r for r in rows if r[0] > args.max]
    for lines, path, start, name in (rows if args.all else long_rows):
        print(f"{lines:5d}  {path}:{start}  {name}")
    print(f"{len(long_rows)} function(s) over {args.max} lines", file=sys.stderr)
    return 1 if long_rows else 0


if __name__ == "__main__":
    sys.exit(main())
