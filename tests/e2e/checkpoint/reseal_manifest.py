#!/usr/bin/python3
"""Edits a checkpoint's manifest.json and recomputes its self-checksum, as a hostile user who
knows the format would: the edit then passes the manifest's own check, and only the cross-checks
against the files can catch it. Used by the e2e tests of issue 18.

    reseal_manifest.py CHECKPOINT_DIR 'PYTHON EXPRESSION ON m'   e.g. 'm["trainer_state"] = None'

The expression may call put(NAME, BYTES): replaces the checkpoint's file NAME and records its new
size and xxh3 in m["files"], so that the file passes the checksums too.

The seal is xxh3-64 (libxxhash, through ctypes) of the compact JSON dump of every other field,
keys sorted, as nlohmann::json writes it (docs/CHECKPOINTS.md)."""
import ctypes
import json
import sys

xxhash = ctypes.CDLL("libxxhash.so.0")
xxhash.XXH3_64bits.restype = ctypes.c_uint64
xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def seal(manifest):
    body = {k: v for k, v in manifest.items() if k != "manifest_xxh3"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    manifest["manifest_xxh3"] = "%016x" % xxhash.XXH3_64bits(text, len(text))
    return manifest


def put(name, data):
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(data)
    m["files"][name] = {"bytes": len(data), "xxh3": "%016x" % xxhash.XXH3_64bits(data, len(data))}


path = sys.argv[1] + "/manifest.json"
with open(path) as f:
    m = json.load(f)
exec(sys.argv[2] if len(sys.argv) > 2 else "pass")
with open(path, "w") as f:
    f.write(json.dumps(seal(m), indent=2, sort_keys=True, ensure_ascii=False) + "\n")
