#!/usr/bin/python3
"""safetensors files read and written with PyTorch alone (no safetensors package is needed).

The format (include/hpctrain/checkpoint/safetensors.hpp): an 8-byte little-endian header
length N, N bytes of JSON ({name: {"dtype", "shape", "data_offsets"}}, optional
"__metadata__"), then the tensors' little-endian bytes, data_offsets counted from the end of the
header. Used by the tests of `model.init_from` and `hpctrain export --format safetensors`, and by
scripts/gpt_torch_reference.py.

    import safetensors_io
    safetensors_io.save(path, {"wte.weight": tensor, ...}, metadata={"format": "pt"})
    state = safetensors_io.load(path)            # {name: torch.Tensor}, in the file's order
    header = safetensors_io.read_header(path)    # the parsed JSON header
"""
import json
import struct

import torch

DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
    "F32": torch.float32, "F64": torch.float64,
}
NAMES = {v: k for k, v in DTYPES.items()}


def save(path, tensors, metadata=None, order=None):
    """Writes {name: tensor} (in `order` if given) as a safetensors file; the header is padded
    with spaces to a multiple of 8 bytes, as the format's own writer does."""
    names = list(order) if order is not None else list(tensors)
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in names:
        t = tensors[name].detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def load(path):
    """{name: tensor} of a safetensors file, in the order of the header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[begin:end])
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(DTYPES[info["dtype"]]).reshape(info["shape"]).clone()
    return out
