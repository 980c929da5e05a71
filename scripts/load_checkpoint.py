#!/usr/bin/python3
"""Load an hpctrain checkpoint with nothing but h5py, numpy and PyTorch.

Proof that the format (docs/CHECKPOINTS.md) is open: the model tensors become a PyTorch
state_dict (the names are the state_dict names), optionally with the optimizer state.

    /usr/bin/python3 scripts/load_checkpoint.py RUN_DIR/checkpoints/step_00001200
    /usr/bin/python3 scripts/load_checkpoint.py RUN_DIR              # follows checkpoints/latest
    /usr/bin/python3 scripts/load_checkpoint.py CKPT --verify --save model.pt

    import load_checkpoint
    state_dict = load_checkpoint.load_state_dict("runs/x/checkpoints/step_00001200")
    model.load_state_dict(state_dict)

--verify checks every file's size and xxh3 checksum against the manifest (xxh3 with the
`xxhash` module when installed, else libxxhash through ctypes, else sizes only, saying so).
Exit status: 0 fine, 1 verification failed, 2 bad arguments or not a checkpoint.
"""

import argparse
import collections
import ctypes
import ctypes.util
import json
import os
import sys

import h5py
import numpy as np

# torch is imported on first use: load_arrays (numpy only) serves callers that only compare values.
torch = None
TORCH_DTYPES = {}


def import_torch():
    global torch
    if torch is None:
        import torch as torch_module
        torch = torch_module
        # How each manifest dtype is stored (see docs/CHECKPOINTS.md): numpy reads all of them
        # directly except bfloat16 (uint16 bits) and bool (uint8).
        TORCH_DTYPES.update({
            "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
            "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8,
            "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
        })
    return torch


def checkpoint_dir(path):
    """A step_<N> directory, or the one `latest` names in a run dir or its checkpoints/ dir."""
    for candidate in (path, os.path.join(path, "checkpoints")):
        latest = os.path.join(candidate, "latest")
        if os.path.isfile(latest) and not os.path.isfile(os.path.join(candidate, "manifest.json")):
            with open(latest) as f:
                return os.path.join(candidate, f.read().strip())
    return path


def read_manifest(ckpt):
    path = os.path.join(ckpt, "manifest.json")
    if not os.path.isfile(path):
        raise SystemExit(f"{ckpt}: no manifest.json: not a complete hpctrain checkpoint")
    with open(path) as f:
        manifest = json.load(f)
    if manifest.get("format") != "hpctrain-checkpoint":
        raise SystemExit(f"{path}: not an hpctrain checkpoint manifest")
    return manifest


def to_torch(array, dtype):
    import_torch()
    array = np.asarray(array)  # h5py returns numpy scalars for scalar datasets
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    if dtype == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    if dtype == "bool":
        return torch.from_numpy(array.astype(np.bool_))
    return torch.from_numpy(array).to(TORCH_DTYPES[dtype])


def to_numpy(array, dtype):
    """The stored values as a numpy array: bfloat16 widened exactly to float32, bool as bool."""
    array = np.asarray(array)
    if dtype == "bfloat16":
        return (array.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "bool":
        return array.astype(np.bool_)
    return array


def load_tensors(ckpt, manifest, prefix, convert=to_torch):
    """{record name minus prefix: tensor} for the records whose name starts with prefix
    (`convert(array, dtype)` makes each one: to_torch, or to_numpy)."""
    out = collections.OrderedDict()
    files = {}
    try:
        for name, entry in sorted(manifest["tensors"].items()):
            if not name.startswith(prefix):
                continue
            f = files.get(entry["file"])
            if f is None:
                f = files[entry["file"]] = h5py.File(os.path.join(ckpt, entry["file"]), "r")
            dataset = f[entry["dataset"]]
            dtype = dataset.attrs.get("dtype", entry["dtype"])
            if isinstance(dtype, bytes):
                dtype = dtype.decode()
            tensor = convert(dataset[()], dtype)
            if list(tensor.shape) != entry["shape"]:
                raise SystemExit(f"{ckpt}/{entry['file']}: {name} has shape {list(tensor.shape)}"
                                 f" but the manifest says {entry['shape']}")
            out[name[len(prefix):]] = tensor
    finally:
        for f in files.values():
            f.close()
    return out


def load_state_dict(path):
    """The model's state_dict (parameter name -> tensor) of the checkpoint at `path`."""
    ckpt = checkpoint_dir(path)
    return load_tensors(ckpt, read_manifest(ckpt), "model/")


def load_arrays(path):
    """The model's tensors as numpy arrays (no torch import): for comparing checkpoints."""
    ckpt = checkpoint_dir(path)
    return load_tensors(ckpt, read_manifest(ckpt), "model/", to_numpy)


def load_optimizer_state(path):
    """{state name: {parameter name: tensor}} ("exp_avg", "exp_avg_sq", "momentum_buffer")."""
    ckpt = checkpoint_dir(path)
    state = collections.OrderedDict()
    for name, tensor in load_tensors(ckpt, read_manifest(ckpt), "optimizer/").items():
        group, _, param = name.partition("/")
        state.setdefault(group, collections.OrderedDict())[param or group] = tensor
    return state


class Xxh3:
    """Streaming xxh3-64: the xxhash module if installed, else libxxhash through ctypes."""

    def __init__(self):
        self.kind = None
        try:
            import xxhash  # noqa: F401
            self.kind = "xxhash module"
            return
        except ImportError:
            pass
        name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
        try:
            lib = ctypes.CDLL(name)
            lib.XXH3_createState.restype = ctypes.c_void_p
            lib.XXH3_64bits_reset.argtypes = [ctypes.c_void_p]
            lib.XXH3_64bits_update.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
            lib.XXH3_64bits_digest.argtypes = [ctypes.c_void_p]
            lib.XXH3_64bits_digest.restype = ctypes.c_uint64
            lib.XXH3_freeState.argtypes = [ctypes.c_void_p]
            self.lib = lib
            self.kind = f"libxxhash ({name})"
        except (OSError, AttributeError):
            self.kind = None

    def file(self, path):
        with open(path, "rb") as f:
            if self.kind == "xxhash module":
                import xxhash
                h = xxhash.xxh3_64()
                for block in iter(lambda: f.read(8 << 20), b""):
                    h.update(block)
                return h.hexdigest()
            state = self.lib.XXH3_createState()
            try:
                self.lib.XXH3_64bits_reset(state)
                for block in iter(lambda: f.read(8 << 20), b""):
                    self.lib.XXH3_64bits_update(state, block, len(block))
                return "%016x" % self.lib.XXH3_64bits_digest(state)
            finally:
                self.lib.XXH3_freeState(state)


def verify(ckpt, manifest, out=sys.stdout):
    """Checks sizes and checksums; returns a list of problems (empty when it verifies)."""
    hasher = Xxh3()
    if hasher.kind is None:
        print("# no xxhash module or libxxhash: checking sizes only", file=out)
    else:
        print(f"# checking sizes and xxh3 checksums ({hasher.kind})", file=out)
    problems = []
    for name, entry in sorted(manifest["files"].items()):
        path = os.path.join(ckpt, name)
        if not os.path.isfile(path):
            problems.append(f"{name}: missing")
            continue
        size = os.path.getsize(path)
        if size != entry["bytes"]:
            problems.append(f"{name}: size {size} but the manifest says {entry['bytes']}")
            continue
        if hasher.kind is not None:
            digest = hasher.file(path)
            if digest != entry["xxh3"]:
                problems.append(f"{name}: xxh3 {digest} but the manifest says {entry['xxh3']}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="step_<N> directory, run directory or checkpoints/")
    parser.add_argument("--verify", action="store_true", help="check sizes and xxh3 checksums")
    parser.add_argument("--optimizer", action="store_true", help="also load the optimizer state")
    parser.add_argument("--save", metavar="OUT.pt", help="torch.save the state_dict to OUT.pt")
    parser.add_argument("--quiet", action="store_true", help="no tensor table")
    args = parser.parse_args()

    ckpt = checkpoint_dir(args.checkpoint)
    if not os.path.isdir(ckpt):
        print(f"{ckpt}: no such checkpoint directory", file=sys.stderr)
        return 2
    manifest = read_manifest(ckpt)
    print(f"# {ckpt}: step {manifest['step']}, epoch {manifest['epoch']}, "
          f"{manifest['consumed_samples']} samples, saved on dp={manifest['grid']['dp']} x "
          f"tp={manifest['grid']['tp']} by hpctrain {manifest.get('hpctrain_version', '?')}")
    if args.verify:
        problems = verify(ckpt, manifest)
        for p in problems:
            print(f"verification failed: {p}", file=sys.stderr)
        if problems:
            return 1
        print("# verified")
    import_torch()
    state_dict = load_state_dict(ckpt)
    optimizer = load_optimizer_state(ckpt) if args.optimizer else None
    if not args.quiet:
        print(f"{'name':<48} {'dtype':<14} shape")
        for name, t in state_dict.items():
            print(f"{name:<48} {str(t.dtype):<14} {tuple(t.shape)}")
        for group, tensors in (optimizer or {}).items():
            for name, t in tensors.items():
                full = f"optimizer/{group}" + (f"/{name}" if name != group else "")
                print(f"{full:<48} {str(t.dtype):<14} {tuple(t.shape)}")
    params = sum(t.numel() for t in state_dict.values())
    print(f"# {len(state_dict)} model tensors, {params} parameters")
    if args.save:
        torch.save({"model": state_dict, "optimizer": optimizer} if optimizer else state_dict,
                   args.save)
        print(f"# saved {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
