#!/usr/bin/env python3
"""Documented examples as tests (tests/e2e/runtime/docs_examples_test.sh, issue 44).

    docs_examples.py blocks SOURCE_DIR OUT_DIR BASE_CONFIG TEST_DATA
        Writes every config block of README.md and docs/*.md (a fenced block tagged yaml, or an
        untagged one that is a YAML map of config sections) verbatim into OUT_DIR/NN.yaml, and
        OUT_DIR/NN.full.yaml: the block followed by the sections of BASE_CONFIG it leaves out.
        Creates under OUT_DIR/work the data paths a block names (links to TEST_DATA's
        Fashion-MNIST train.h5) and a TorchScript classifier for a block that names one. Prints
        one line per block: NAME<TAB>SOURCE:LINE<TAB>run|plan (run: the suite has what it needs to
        train on it).
    docs_examples.py keys SOURCE_DIR KEYS_FILE
        Every config key in KEYS_FILE (HPCTRAIN_CONFIG_KEYS) that README.md and docs/*.md do not
        mention: the full key in backticks, or its last part in backticks within the section's
        part of docs/CONFIG.md (or docs/MODELS.md for model keys). Exit 1 listing them.
    docs_examples.py commands SOURCE_DIR COMMANDS_FILE
        Every command in COMMANDS_FILE (one per line, "bench data") that the docs never show as
        `hpctrain COMMAND`. Exit 1 listing them.
"""
import glob
import os
import re
import sys

import yaml

SECTIONS = {"run", "model", "data", "optim", "schedule", "parallel", "eval", "checkpoint",
            "logging", "debug"}


def documents(source):
    return [os.path.join(source, "README.md")] + sorted(glob.glob(os.path.join(source, "docs", "*.md")))


def config_blocks(source):
    """(path, line, text) of every config block."""
    out = []
    for path in documents(source):
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\S*)", lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            text = "\n".join(lines[i + 1:j]) + "\n"
            try:
                tree = yaml.safe_load(text)
            except yaml.YAMLError:
                tree = None
            is_config = isinstance(tree, dict) and tree and set(tree) <= SECTIONS
            if m.group(1) == "yaml" and not is_config:
                sys.exit(f"{path}:{i + 2}: a yaml block that is not a config of sections "
                         f"{sorted(SECTIONS)}: make it one, or tag it otherwise")
            if is_config:
                out.append((os.path.relpath(path, source), i + 2, text))
            i = j + 1
    return out


def top_sections(text):
    """{section: its lines} of a YAML config's text."""
    out, current = {}, None
    for line in text.split("\n"):
        m = re.match(r"^([a-z_]+):", line)
        if m:
            current = m.group(1)
            out[current] = []
        if current:
            out[current].append(line)
    return out


def link(target, path):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if not os.path.lexists(path):
        os.symlink(target, path)


def make_megatron(prefix):
    """A small Megatron indexed dataset PREFIX.bin + PREFIX.idx (docs/DATA.md's layout): 40000
    uint16 token ids in two documents of one sequence each."""
    import struct

    import numpy as np

    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    tokens = (np.arange(40000) % 250).astype(np.uint16)
    lengths = np.array([20000, 20000], np.int32)
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, 8) + struct.pack("<QQ", 2, 3))
        f.write(lengths.tobytes() + np.array([0, 40000], np.int64).tobytes())
        f.write(np.array([0, 1, 2], np.int64).tobytes())


def make_data(work, value, train_h5):
    """Creates what a data.train / data.val value names, relative to `work`."""
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item.get("format") == "megatron":
                make_megatron(os.path.join(work, item["path"]))
            else:
                make_data(work, item["path"] if isinstance(item, dict) else item, train_h5)
        return
    if not isinstance(value, str):
        return
    path = os.path.join(work, value)
    if value.endswith("/"):
        link(train_h5, os.path.join(path, "part-0.h5"))
    elif any(c in value for c in "*?["):
        link(train_h5, os.path.join(work, re.sub(r"\[[^]]*\]|[*?]", "0", value)))
    else:
        link(train_h5, path)


def make_torchscript(path):
    import torch

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(784, 10)

        def forward(self, x):
            return self.fc(x.flatten(1))

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    torch.jit.script(Classifier()).save(path)


def blocks(source, out, base_config, test_data):
    os.makedirs(out, exist_ok=True)
    work = os.path.join(out, "work")
    os.makedirs(work, exist_ok=True)
    train_h5 = os.path.join(test_data, "fashion-mnist", "train.h5")
    for split in ("train", "test"):  # the base config's own data paths
        link(os.path.join(test_data, "fashion-mnist", f"{split}.h5"),
             os.path.join(work, "data", "fashion-mnist", f"{split}.h5"))
    base = top_sections(open(base_config, encoding="utf-8").read())
    # Token data (a Megatron source) needs a language model: the tiny gpt's sections fill in.
    lm_base = top_sections(open(os.path.join(os.path.dirname(base_config), "gpt-tiny.yaml"),
                                encoding="utf-8").read())
    for n, (doc, line, text) in enumerate(config_blocks(source)):
        name = f"{n:02d}"
        tree = yaml.safe_load(text)
        data = tree.get("data") or {}
        fill = lm_base if "megatron" in str(data) else base
        with open(os.path.join(out, name + ".yaml"), "w", encoding="utf-8") as f:
            f.write(text)
        full = text + "".join("\n".join(lines) + "\n" for s, lines in fill.items() if s not in tree)
        with open(os.path.join(out, name + ".full.yaml"), "w", encoding="utf-8") as f:
            f.write(full)
        runnable = True
        for key in ("train", "val"):
            if key in data:
                make_data(work, data[key], train_h5)
        model = tree.get("model") or {}
        if model.get("name") == "torchscript":
            make_torchscript(os.path.join(work, model["file"]))
        if model.get("name") in ("gpt", "llama") or model.get("init_from"):
            runnable = False  # a language model's weights and text of its vocabulary: not here
        if "megatron" in str(data) or (tree.get("eval") or {}).get("tasks") or \
                (tree.get("logging") or {}).get("sample_every"):
            runnable = False  # token data, tasks and samples need a language model
        print(f"{name}\t{doc}:{line}\t{'run' if runnable else 'plan'}")


def section_text(source, doc, heading):
    text = open(os.path.join(source, "docs", doc), encoding="utf-8").read()
    m = re.search(rf"^## {re.escape(heading)}\b.*?(?=^## |\Z)", text, re.M | re.S)
    return m.group(0) if m else ""


def keys(source, keys_file):
    everything = "".join(open(p, encoding="utf-8").read() for p in documents(source))
    missing = []
    for key in sorted(set(open(keys_file).read().split())):
        parts = key.split(".")
        if len(parts) < 2:
            continue  # a section
        if any(f"`{'.'.join(parts[i:])}`" in everything for i in range(len(parts) - 1)):
            continue
        leaf = f"`{parts[-1]}`"
        local = section_text(source, "CONFIG.md", parts[0])
        if parts[0] == "model":
            local += open(os.path.join(source, "docs", "MODELS.md"), encoding="utf-8").read()
        if leaf in local:
            continue
        missing.append(key)
    for key in missing:
        print(f"config key {key} is read by hpctrain but not documented (docs/CONFIG.md)")
    return 1 if missing else 0


def commands(source, commands_file):
    everything = "".join(open(p, encoding="utf-8").read() for p in documents(source))
    missing = [c for c in open(commands_file).read().split("\n") if c.strip()
               and not re.search(rf"hpctrain {re.escape(c)}\b", everything)]
    for c in missing:
        print(f"command 'hpctrain {c}' is in hpctrain --help but in no document")
    return 1 if missing else 0


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "blocks" and len(sys.argv) == 6:
        blocks(*sys.argv[2:])
    elif what == "keys" and len(sys.argv) == 4:
        sys.exit(keys(*sys.argv[2:]))
    elif what == "commands" and len(sys.argv) == 4:
        sys.exit(commands(*sys.argv[2:]))
    else:
        sys.exit(__doc__)
