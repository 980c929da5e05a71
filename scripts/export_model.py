#!/usr/bin/python3
"""Turns an hpctrain state_dict into a TorchScript or ONNX file of a built-in model.

`hpctrain export CHECKPOINT --format torchscript|onnx` runs this script (docs/MODELS.md): it
writes the checkpoint's weights with PyTorch's own file format (`--format pytorch`), then this
script rebuilds the same architecture in PyTorch (the mlp and cnn definitions below, with the
built-in models' layer names, so the state_dict loads strictly; the gpt through
scripts/gpt_torch_reference.py's Gpt, its names mapped), loads the weights, and scripts it (the
gpt: traces it on int64 tokens [1, --seq-len]) or exports it to ONNX (checked with onnx.checker;
no ONNX runtime is used here). A gpt's ONNX graph takes tokens [batch, --seq-len] (default
model.seq_len, at most that) and returns logits [batch, --seq-len, vocab_size].

    /usr/bin/python3 scripts/export_model.py --model '{name: mlp}' --state sd.pt \\
        --format torchscript --out model.pt

Exit status: 0 written, 2 a model or option this script cannot export (nothing written),
1 anything else.
"""
import argparse
import collections
import inspect
import os
import sys
import warnings

import torch
import torch.nn as nn
import yaml


class Reshape(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.shape = [int(v) for v in shape]

    def forward(self, x):
        return x.reshape([x.shape[0]] + self.shape)


def mlp(in_features=784, hidden=(256, 128, 100), num_classes=10, dropout=0.0):
    """include/hpctrain/model/mlp.hpp: flatten, Linear + ReLU layers, a Linear classifier.
    Parameters fc1.weight, fc1.bias, ... as hpctrain names them (dropout is off in eval)."""
    layers = [("flatten", nn.Flatten(1))]
    width = in_features
    sizes = list(hidden) + [num_classes]
    for i, size in enumerate(sizes):
        layers.append((f"fc{i + 1}", nn.Linear(width, size)))
        if i + 1 < len(sizes):
            layers.append((f"relu{i + 1}", nn.ReLU()))
        width = size
    return nn.Sequential(collections.OrderedDict(layers))


def cnn(input_shape=(1, 28, 28), channels=(32, 64), kernel=5, fc=1024, num_classes=10,
        dropout=0.0):
    """include/hpctrain/model/cnn.hpp: [conv k x k same + ReLU + maxpool 2] per channel count,
    then Linear(fc) + ReLU and a Linear classifier; conv1.weight, ..., fc1.weight, fc2.weight."""
    c, h, w = [int(v) for v in input_shape]
    layers = [("reshape", Reshape([c, h, w]))]
    for i, out in enumerate(channels):
        layers += [(f"conv{i + 1}", nn.Conv2d(c, out, kernel, padding=kernel // 2)),
                   (f"relu_conv{i + 1}", nn.ReLU()), (f"pool{i + 1}", nn.MaxPool2d(2))]
        c, h, w = out, h // 2, w // 2
    layers += [("flatten", nn.Flatten(1)), ("fc1", nn.Linear(c * h * w, fc)),
               ("relu_fc1", nn.ReLU()), ("fc2", nn.Linear(fc, num_classes))]
    return nn.Sequential(collections.OrderedDict(layers))


def gpt(section, seq_len):
    """include/hpctrain/model/gpt.hpp through scripts/gpt_torch_reference.py's Gpt (the
    reference the GPT benchmarks train): tokens [batch, seq_len] -> logits [batch, seq_len, V]."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_torch_reference as ref
    o = ref.gpt_options(section)
    seq_len = o["seq_len"] if seq_len is None else seq_len
    if not 1 <= seq_len <= o["seq_len"]:
        raise ValueError(f"--seq-len {seq_len}: this gpt reads at most model.seq_len = "
                         f"{o['seq_len']} tokens (its position table wpe is [{o['seq_len']}, "
                         f"{o['width']}]); export with a --seq-len from 1 to {o['seq_len']}")
    return ref.Gpt(o, 0), [1, seq_len], ref.from_hpctrain_state


def build(section, seq_len=None, input_shape=None):
    name = section.get("name", "mlp")
    if name == "gpt":
        return gpt(section, seq_len)
    if name == "torchscript":
        # The run's own module (model.file) with the checkpoint's weights; one sample's shape
        # comes from hpctrain (the run's data file), the batch dimension stays free.
        if not input_shape:
            raise ValueError("a TorchScript module's ONNX export needs one sample's shape "
                             "(--input-shape C,H,W)")
        return torch.jit.load(section["file"], map_location="cpu"), [1] + list(input_shape), dict
    if seq_len is not None:
        raise ValueError(f"--seq-len is the token length of a gpt's export; a {name} takes "
                         f"fixed-size inputs: leave it out")
    # The resolved section may carry keys of other models (seq_len, ...): take the model's own.
    own = {"mlp": ("in_features", "hidden", "num_classes", "dropout"),
           "cnn": ("input_shape", "channels", "kernel", "fc", "num_classes", "dropout")}
    keys = {k: v for k, v in section.items() if k in own.get(name, ())}
    if name == "mlp":
        return mlp(**keys), [1, keys.get("in_features", 784)], dict
    if name == "cnn":
        return cnn(**keys), [1] + list(keys.get("input_shape", [1, 28, 28])), dict
    raise ValueError(f"model.name {name}: this script rebuilds the built-in mlp, cnn and gpt "
                     f"models (a plugin model has no PyTorch definition here)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the run's model section (YAML)")
    parser.add_argument("--state", required=True, help="state_dict file (torch.load)")
    parser.add_argument("--format", required=True, choices=["torchscript", "onnx"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seq-len", type=int, default=None,
                        help="gpt: tokens per sequence of the export (default model.seq_len)")
    parser.add_argument("--input-shape", default=None,
                        help="torchscript: one sample's shape, e.g. 1,28,28")
    args = parser.parse_args()
    section = yaml.safe_load(args.model) or {}
    try:
        sample = [int(v) for v in args.input_shape.split(",")] if args.input_shape else None
        module, input_shape, rename = build(section, args.seq_len, sample)
    except (ValueError, TypeError) as e:
        print(f"export_model.py: {e}", file=sys.stderr)
        return 2
    # hpctrain's own file (torch::pickle_save): its typed dict's LibTorch tag is refused by the
    # weights_only loading that PyTorch 2.6 made the default.
    module.load_state_dict(rename(torch.load(args.state, weights_only=False)), strict=True)
    module.eval()
    tmp = args.out + ".tmp"
    language_model = section.get("name") == "gpt"
    # The gpt is traced on int64 tokens (its reference definition is written for speed, not for
    # the script compiler); batch and length stay free in the traced graph.
    example = torch.zeros(input_shape, dtype=torch.long if language_model else torch.float32)
    # The trace keeps 1 / sqrt(head width) as a constant, which it is: not worth a warning.
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    # A TorchScript module has no Python signature for the exporter to look at: expected.
    warnings.filterwarnings("ignore", message="no signature found")
    if args.format == "torchscript":
        with torch.no_grad():
            scripted = torch.jit.trace(module, (example,)) if language_model else torch.jit.script(module)
        scripted.save(tmp)
    else:
        import onnx
        names = (["tokens"], ["logits"]) if language_model else (["inputs"], ["outputs"])
        # PyTorch 2.9 and later export through dynamo (and onnxscript) by default; the
        # TorchScript-based exporter that dynamic_axes and opset 13 belong to is asked for.
        legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
        with torch.no_grad():
            torch.onnx.export(module, (example,), tmp, input_names=names[0], output_names=names[1],
                              dynamic_axes={names[0][0]: {0: "batch"}, names[1][0]: {0: "batch"}},
                              opset_version=13, **legacy)
        graph = onnx.load(tmp)
        if language_model:  # the traced length is symbolic; the input fixes it at --seq-len
            graph.graph.output[0].type.tensor_type.shape.dim[1].ClearField("dim_param")
            graph.graph.output[0].type.tensor_type.shape.dim[1].dim_value = input_shape[1]
            onnx.save(graph, tmp)
        onnx.checker.check_model(graph)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
