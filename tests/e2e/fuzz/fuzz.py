#!/usr/bin/python3
"""Seeded, bounded fuzzing of hpctrain's inputs through the real binary (ctest label `fuzz`).

    fuzz.py HPCTRAIN_BIN WORK_DIR [--seed S] [--configs N] [--data N] [--checkpoints N]
            [--jobs J] [--case-timeout SECONDS]

Three families of inputs, each mutated from a small valid one:
  configs      a tiny MLP config, with keys deleted, set to hostile values (huge, negative, NaN,
               wrong types, 10 KB strings, non-UTF-8 bytes), duplicated, unknown, or the text
               truncated or byte-flipped; run through `hpctrain plan -c` (which reads the config
               as train does, builds the model and opens the data) and, for every twentieth case,
               `hpctrain train` for 2 steps;
  data files   a small classification file and a token file, damaged at the byte level
               (flips, truncation, zeroed ranges) or rewritten with h5py (dtypes, shapes,
               attributes, label values); run through `hpctrain inspect data`;
  checkpoints  a checkpoint of the tiny run, with files flipped, truncated, removed or replaced,
               and its manifest edited and resealed; run through `hpctrain inspect checkpoint`
               and, for every tenth case, `hpctrain eval --checkpoint`.
Every case must end, within the case timeout, with a documented exit code of its family and,
when it is not 0, an "error:" line; never a signal, exit 1, a C++ exception trace or a hang.
Failures are listed with the command and the case's files kept under WORK_DIR/failures."""
import argparse
import concurrent.futures
import ctypes
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from forked_hpctrain import ForkServer  # noqa: E402

TRACE = re.compile(r"unexpected failure|Exception raised from|frame #\d|terminate called|"
                   r"std::bad_alloc|what\(\):|Segmentation|Aborted|HDF5-DIAG")

xxhash = ctypes.CDLL("libxxhash.so.0")
xxhash.XXH3_64bits.restype = ctypes.c_uint64
xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def seal(manifest):
    body = {k: v for k, v in manifest.items() if k != "manifest_xxh3"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    manifest["manifest_xxh3"] = "%016x" % xxhash.XXH3_64bits(text, len(text))
    return manifest


BASE_CONFIG = {
    "run": {"dir": "RUN", "seed": 3, "epochs": 1, "max_steps": 2},
    "model": {"name": "mlp", "in_features": 16, "hidden": [8], "num_classes": 4},
    "data": {"train": "TRAIN", "val": "VAL", "batch_size": 8, "prefetch": 1},
    "optim": {"name": "adam", "lr": 0.01},
    "schedule": {"name": "cosine", "warmup_steps": 1},
    "parallel": {"tp": 1},
    "eval": {"every_steps": 0, "batch_size": 16, "max_samples": 32},
    "checkpoint": {"every_steps": 0},
    "logging": {"every_steps": 1, "progress": "plain"},
}

HOSTILE_VALUES = [0, -1, 1, 2**31, 2**63 - 1, -2**63, 2**64, 10**30, 1e308, -1e-300, ".nan",
                  ".inf", "-.inf", "true", "null", "~", "''", "'x'", "[]", "[1, -2, 3]",
                  "{a: 1}", "'" + "y" * 10000 + "'", "3.5", "0x10", "1e3", "'../../etc/passwd'",
                  "/dev/null", "'\\u00e9'", "[[[[[[1]]]]]]", "!!binary aGVsbG8=", "*nothing",
                  "&a [*a]"]


def yaml_text(config):
    lines = []
    for section, keys in config.items():
        lines.append(f"{section}:")
        for key, value in keys.items():
            lines.append(f"  {key}: {json.dumps(value) if not isinstance(value, str) else value}")
    return "\n".join(lines) + "\n"


def mutate_config(rng, base, work):
    config = json.loads(json.dumps(base))
    text = None
    kind = rng.choice(["value", "value", "value", "delete", "unknown", "duplicate", "truncate",
                       "flip", "nonutf8", "toplevel", "section"])
    section = rng.choice(list(config))
    key = rng.choice(list(config[section]))
    if kind == "value":
        config[section][key] = rng.choice(HOSTILE_VALUES)
    elif kind == "delete":
        del config[section][key]
    elif kind == "unknown":
        config[section][key + rng.choice(["x", "_", "s"])] = 1
    elif kind == "section":
        config[section] = rng.choice([None, 5, "text", [1, 2]])
    text = yaml_text({s: (k if isinstance(k, dict) else {}) for s, k in config.items()})
    if kind == "section" and not isinstance(config[section], dict):
        text = text.replace(f"{section}:\n", f"{section}: {json.dumps(config[section])}\n", 1)
    if kind == "duplicate":
        text = text.replace(f"  {key}:", f"  {key}: 1\n  {key}:", 1)
    elif kind == "truncate":
        text = text[: rng.randrange(len(text))]
    elif kind == "flip":
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    elif kind == "nonutf8":
        return text.encode() + b"# \xff\xfe\n"
    elif kind == "toplevel":
        text = rng.choice(["- a\n- b\n", "42\n", "'just text'\n", "", "{}\n", "[}\n"])
    return text.encode()


def make_classification(path, n=64, features=(1, 4, 4), classes=4, seed=0):
    r = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = 1
        x = f.create_dataset("inputs", data=r.integers(0, 255, (n, *features), dtype=np.uint8),
                             chunks=(16, *features))
        x.attrs["scale"] = 1 / 255
        y = f.create_dataset("labels", data=r.integers(0, classes, n).astype(np.int64))
        y.attrs["num_classes"] = classes


def make_tokens(path, n=512):
    with h5py.File(path, "w") as f:
        t = f.create_dataset("tokens", data=np.arange(n, dtype=np.uint8) % 200)
        t.attrs["vocab_size"] = 256
        t.attrs["tokenizer"] = "bytes"


def mutate_data(rng, base_files, path):
    base = rng.choice(base_files)
    kind = rng.choice(["flip", "flip", "truncate", "zero", "h5py", "h5py", "h5py", "h5py"])
    if kind != "h5py":
        data = bytearray(open(base, "rb").read())
        if kind == "flip":
            for _ in range(rng.randint(1, 16)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            data = data[: rng.randrange(len(data))]
        else:
            start = rng.randrange(len(data))
            data[start:start + rng.randint(1, 4096)] = bytes(min(4096, len(data) - start))
        open(path, "wb").write(bytes(data))
        return
    shutil.copy(base, path)
    with h5py.File(path, "r+") as f:
        name = rng.choice(list(f.keys()))
        ds = f[name]
        choice = rng.randrange(9)
        if choice == 0:
            values = ds[()]
            del f[name]
            f.create_dataset(name, data=values.astype(rng.choice(
                [np.float64, np.int8, np.uint64, np.float16, np.int32, np.bool_])))
        elif choice == 1:
            del f[name]
            f.create_dataset(name, data=np.zeros(rng.choice([(0,), (3,), (2, 0), (64, 2, 2, 2, 2)]),
                                                 np.uint8))
        elif choice == 2:
            ds.attrs[rng.choice(["num_classes", "scale", "vocab_size"])] = rng.choice(
                [0, -3, 2.5, float("nan"), float("inf"), 2**62, 2**40, "many", 1e300])
        elif choice == 3 and name == "labels":
            values = ds[()]
            values[rng.randrange(len(values))] = rng.choice([-1, 4, 2**40, 2**62])
            ds[...] = values
        elif choice == 4 and name == "labels":
            del f[name]
            f.create_dataset(name, data=np.array([0, 1, 2**63 + rng.randrange(100)] * 21 + [0],
                                                 dtype=np.uint64))
        elif choice == 5:
            f.attrs["schema_version"] = rng.choice([0, 2, 99, -1, "x"])
        elif choice == 6:
            del f[name]
            f.create_group(name)
        elif choice == 7:
            f.create_dataset("tokens" if name != "tokens" else "inputs", data=np.zeros(8, np.uint8))
        else:
            del f[name]
            f.create_dataset(name, data=np.array(["a", "b"], dtype=h5py.string_dtype()))


def mutate_checkpoint(rng, base_dir, target):
    shutil.copytree(base_dir, target)
    files = sorted(os.listdir(target))
    name = rng.choice(files)
    path = os.path.join(target, name)
    kind = rng.choice(["flip", "truncate", "remove", "replace", "reseal", "reseal", "reseal",
                       "reseal", "manifest_text"])
    if kind == "flip":
        data = bytearray(open(path, "rb").read())
        data[rng.randrange(len(data))] ^= 0xFF
        open(path, "wb").write(bytes(data))
    elif kind == "truncate":
        data = open(path, "rb").read()
        open(path, "wb").write(data[: rng.randrange(len(data))])
    elif kind == "remove":
        os.remove(path)
    elif kind == "replace":
        os.remove(path)
        how = rng.randrange(3)
        if how == 0:
            os.mkfifo(path)
        elif how == 1:
            os.mkdir(path)
        else:
            os.symlink(path, path)  # a symlink loop
    elif kind == "manifest_text":
        manifest = os.path.join(target, "manifest.json")
        text = open(manifest).read()
        text = rng.choice([text[: len(text) // 2], text.replace("{", "[", 1), "null", "[]",
                           text + "garbage"])
        open(manifest, "w").write(text)
    else:
        manifest_path = os.path.join(target, "manifest.json")
        m = json.load(open(manifest_path))
        tensor = rng.choice(list(m["tensors"]))
        t = m["tensors"][tensor]
        edit = rng.randrange(14)
        if edit == 0:
            t["dtype"] = rng.choice(["float64", "int8", "quaternion", "bfloat16", "", 7])
        elif edit == 1:
            t["shape"] = rng.choice([[], [1], [2**40, 2**40], [-1, 4], [8, 16, 1], "x"])
        elif edit == 2:
            t["split_dim"] = rng.choice([-2, 3, 1, 0, "0", None])
        elif edit == 3:
            m["trainer_state"] = rng.choice([None, {}, [], 5, {"step": -3}, {"step": "x"}])
        elif edit == 4:
            m["step"] = rng.choice([-1, 2**62, 0, "10", None])
        elif edit == 5:
            m["files"].pop(rng.choice(list(m["files"])))
        elif edit == 6:
            m["files"][rng.choice(list(m["files"]))]["bytes"] = rng.choice([0, 2**63, -1, "1"])
        elif edit == 7:
            t["file"] = rng.choice(["../../etc/passwd", "nope.h5", "", "manifest.json"])
        elif edit == 8:
            t["dataset"] = rng.choice(["", "/", "/nope", "//x", "/" + "a" * 5000])
        elif edit == 9:
            m["grid"] = rng.choice([{"dp": 0, "tp": 1}, {"dp": 1, "tp": 0}, {}, None, {"dp": 2**40, "tp": 1}])
        elif edit == 10:
            m["world_size"] = rng.choice([0, -1, 2**31, 1000])
        elif edit == 11:
            m["rng"] = rng.choice([None, {}, {"ranks": 1, "bytes": 2**40}, {"ranks": -1, "bytes": 8}, 5])
        elif edit == 12:
            m["tensors"][tensor + "x"] = m["tensors"].pop(tensor)
        else:
            m["format_version"] = rng.choice([0, 2, "1", None])
        open(manifest_path, "w").write(json.dumps(seal(m), indent=2, sort_keys=True))


FORK_SERVER = None  # set by main: the cases' processes are forks of one loaded binary


def run_case(case):
    start = time.monotonic()
    try:
        if FORK_SERVER:
            with open(os.path.join(case["cwd"], f"output-{threading.get_ident()}.txt"), "w+b") as out, \
                    open(os.devnull, "rb") as null:
                how, code = FORK_SERVER.run(case["cmd"][1:], cwd=case["cwd"], env=case["env"],
                                            stdin=null.fileno(), stdout=out.fileno(),
                                            stderr=out.fileno(), timeout=case["timeout"])
                out.seek(0)
                output = out.read().decode(errors="replace")
            if how == "timeout":
                return case, f"hang: no exit within {case['timeout']} s", output
            if how == "signal":
                code = -code
        else:
            proc = subprocess.run(case["cmd"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=case["timeout"], cwd=case["cwd"], env=case["env"])
            output = proc.stdout.decode(errors="replace")
            code = proc.returncode
    except subprocess.TimeoutExpired as e:
        return case, f"hang: no exit within {case['timeout']} s", (e.stdout or b"").decode(errors="replace")
    finally:
        case["seconds"] = time.monotonic() - start
    problem = None
    if code < 0:
        problem = f"killed by signal {-code}"
    elif code not in case["allowed"]:
        problem = f"exit {code}, expected one of {sorted(case['allowed'])}"
    elif code != 0 and "error:" not in output:
        problem = f"exit {code} without an error message"
    elif TRACE.search(output):
        problem = f"a raw exception or library trace: {TRACE.search(output).group(0)}"
    return case, problem, output


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("work")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--configs", type=int, default=200)
    ap.add_argument("--data", type=int, default=100)
    ap.add_argument("--checkpoints", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--case-timeout", type=float, default=30)
    ap.add_argument("--no-fork-server", action="store_true",
                    help="start every case's process from the binary (not forked from one loaded "
                         "copy: src/cli/fork_server.hpp)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    # One BLAS/OpenMP thread per case: several cases run at once on few cores, and idle BLAS
    # threads spinning beside another case's start-up only slow it down.
    env = dict(os.environ, HPCTRAIN_COLLECTIVE_TIMEOUT="20", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    base = os.path.join(work, "base")
    os.makedirs(base, exist_ok=True)
    train, val, tokens = (os.path.join(base, n) for n in ("train.h5", "val.h5", "tokens.h5"))
    make_classification(train, 64, seed=1)
    make_classification(val, 32, seed=2)
    make_tokens(tokens)
    config = json.loads(json.dumps(BASE_CONFIG))
    config["data"]["train"], config["data"]["val"] = train, val
    config["run"]["dir"] = os.path.join(base, "run")
    open(os.path.join(base, "config.yaml"), "w").write(yaml_text(config))
    made = subprocess.run([a.binary, "-q", "train", "-c", os.path.join(base, "config.yaml"),
                           "--set", "checkpoint.at_end=true"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env, timeout=120)
    checkpoint = os.path.join(base, "run", "checkpoints", "step_00000002")
    if made.returncode != 0 or not os.path.isdir(checkpoint):
        print(made.stdout.decode(errors="replace"))
        sys.exit("fuzz: the base run did not produce its checkpoint")

    cases = []
    def add(family, cmd, allowed, files):
        cases.append({"family": family, "cmd": cmd, "allowed": set(allowed), "files": files,
                      "timeout": a.case_timeout, "cwd": work, "env": env})
    for i in range(a.configs):
        path = os.path.join(work, f"config_{i:03d}.yaml")
        open(path, "wb").write(mutate_config(rng, config, work))
        if i % 20 == 0:
            add("config", [a.binary, "-q", "train", "-c", path, "--set", "run.max_steps=2",
                           "--set", f"run.dir={work}/run_{i:03d}"], {0, 2, 3, 6}, [path])
        else:
            add("config", [a.binary, "-q", "plan", "-c", path, "--devices", "2", "--peak-flops",
                           "1e11"], {0, 2, 3}, [path])
    for i in range(a.data):
        path = os.path.join(work, f"data_{i:03d}.h5")
        mutate_data(rng, [train, tokens], path)
        add("data", [a.binary, "-q", "inspect", "data", path, "--seq-len", "8"], {0, 3}, [path])
    for i in range(a.checkpoints):
        target = os.path.join(work, f"ckpt_{i:03d}", "checkpoints", "step_00000002")
        mutate_checkpoint(rng, checkpoint, target)
        add("checkpoint", [a.binary, "-q", "inspect", "checkpoint", target], {0, 4}, [target])
        if i % 10 == 0:
            add("checkpoint", [a.binary, "-q", "eval", "--checkpoint", target, "--data", val,
                               "--results", os.path.join(work, f"results_{i:03d}")],
                {0, 2, 3, 4}, [target])

    failures = []
    counts = {}
    seconds = {}
    started = time.monotonic()
    print(f"fuzz seed {a.seed}: {len(cases)} cases, {a.jobs} at a time", flush=True)
    global FORK_SERVER
    if not a.no_fork_server:
        FORK_SERVER = ForkServer(a.binary, os.path.join(work, "fork.sock"), env,
                                 log=open(os.path.join(work, "fork-server.txt"), "wb"))
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for n, (case, problem, output) in enumerate(pool.map(run_case, cases), 1):
            counts[case["family"]] = counts.get(case["family"], 0) + 1
            command = case["family"] + " " + case["cmd"][2]
            seconds[command] = seconds.get(command, 0) + case["seconds"]
            if problem:
                failures.append((case, problem, output))
            if n % 50 == 0:
                print(f"  {n} cases done, {len(failures)} failure(s)", flush=True)
    if FORK_SERVER:
        FORK_SERVER.close()
    keep = os.path.join(work, "failures")
    for n, (case, problem, output) in enumerate(failures):
        print(f"FAIL ({case['family']}): {problem}\n  command: {' '.join(case['cmd'])}")
        print("  " + "\n  ".join(output.strip().splitlines()[-6:]))
        os.makedirs(os.path.join(keep, str(n)), exist_ok=True)
        for f in case["files"]:
            if os.path.isdir(f):
                shutil.copytree(f, os.path.join(keep, str(n), os.path.basename(f)), symlinks=True,
                                ignore_dangling_symlinks=True, dirs_exist_ok=True,
                                copy_function=lambda s, d: shutil.copy2(s, d) if os.path.isfile(s) else None)
            elif os.path.isfile(f):
                shutil.copy(f, os.path.join(keep, str(n)))
    print(f"fuzz seed {a.seed}: {counts} cases, {len(failures)} failure(s), "
          f"{time.monotonic() - started:.0f} s; seconds per family and command: "
          + ", ".join(f"{k} {v:.0f}" for k, v in sorted(seconds.items())))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
