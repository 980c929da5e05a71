#!/usr/bin/env python3
"""Writes a text corpus made of Debian package files, for the tokenizer tests and benchmark.

usage: make_text_corpus.py OUT_DIR [--bytes N]

OUT_DIR/corpus.txt holds the documents concatenated; OUT_DIR/docs.txt their byte lengths, one a
line. Documents are whole files, in a fixed order: the fortunes, /usr/share/common-licenses,
/usr/share/doc (copyright files, READMEs and changelogs, gzip'd or not), then Python sources
under /usr/lib/python3* (numpy's tests and pip's vendored rich carry emoji), until N bytes
(default 12,000,000). Files that are not UTF-8 or hold a NUL byte are left out. The script checks
that the corpus holds non-ASCII text, emoji, runs of whitespace and digits, and says what it wrote.
"""
import glob
import gzip
import os
import re
import sys


def read_text(path):
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        with open(path, "rb") as f:
            data = f.read(2_000_000)
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        if b"\x00" in data:
            return None
        data.decode("utf-8")
        return data
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None


def cut_utf8(data):
    """`data` less a character cut short at its end."""
    for drop in range(4):
        try:
            return data[: len(data) - drop].decode("utf-8") and data[: len(data) - drop]
        except UnicodeDecodeError:
            continue
    return b""


def sources():
    """(category share of the corpus, paths) in the order they are written."""
    yield 0.25, sorted(p for p in glob.glob("/usr/share/games/fortunes/*") if not p.endswith(".dat"))
    yield 0.05, sorted(glob.glob("/usr/share/common-licenses/*"))
    docs = []
    for pattern in ("copyright", "README*", "changelog*", "NEWS*"):
        docs += glob.glob("/usr/share/doc/*/" + pattern)
    yield 0.30, sorted(docs)
    # Emoji and other non-ASCII text first among the Python sources, then the rest.
    preferred = ["numpy/lib/tests/test_loadtxt.py", "pip/_vendor/rich/_emoji_codes.py",
                 "pip/_vendor/rich/_spinners.py", "pip/_vendor/idna/uts46data.py"]
    python = []
    for tail in preferred:
        python += sorted(glob.glob("/usr/lib/python3/dist-packages/" + tail))
    for root in sorted(glob.glob("/usr/lib/python3*")):
        python += sorted(glob.glob(root + "/**/*.py", recursive=True))
    yield 1.0, python


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    out_dir = args[0]
    limit = int(args[args.index("--bytes") + 1]) if "--bytes" in args else 12_000_000
    os.makedirs(out_dir, exist_ok=True)
    seen, lengths = set(), []
    with open(os.path.join(out_dir, "corpus.txt"), "wb") as corpus:
        for share, paths in sources():
            end = min(limit, sum(lengths) + int(share * limit))
            for path in paths:
                if sum(lengths) >= end or os.path.realpath(path) in seen:
                    continue
                seen.add(os.path.realpath(path))
                data = cut_utf8((read_text(path) or b"")[: end - sum(lengths)])
                if data:
                    corpus.write(data)
                    lengths.append(len(data))
    total = sum(lengths)
    with open(os.path.join(out_dir, "docs.txt"), "w") as f:
        f.write("".join(f"{n}\n" for n in lengths))
    text = open(os.path.join(out_dir, "corpus.txt"), encoding="utf-8").read()
    checks = {
        "non-ASCII characters": sum(1 for c in text if ord(c) > 127),
        "emoji": len(re.findall("[\U0001F300-\U0001FAFF]", text)),
        "runs of 8+ spaces": len(re.findall(" {8,}", text)),
        "digits": sum(1 for c in text if c.isdigit()),
    }
    print(f"corpus: {total} bytes in {len(lengths)} documents; "
          + ", ".join(f"{v} {k}" for k, v in checks.items()))
    missing = [k for k, v in checks.items() if v == 0]
    if total < min(limit, 10_000_000) or missing:
        sys.exit(f"corpus too small or lacking {missing}: install scripts/setup.sh's packages")


if __name__ == "__main__":
    main()
