#!/usr/bin/python3
"""Turns an hpctrain state_dict into a TorchScript or ONNX file of a built-in model.

`hpctrain export CHECKPOINT --format torchscript|onnx` runs this script (docs/MODELS.md): it
writes the checkpoint's weights with PyTorch's own file format (`--format pytorch`), then this
script rebuilds the same architecture in PyTorch (the definitions below, with the built-in
models' layer names, so the state_dict loads strictly), loads the weights, and scripts it or
exports it to ONNX (checked with onnx.checker; no ONNX runtime is used here).

    /usr/bin/python3 scripts/export_model.py --model '{name: mlp}' --state sd.pt \\
        --format torchscript --out model.pt

Exit status: 0 written, 2 a model or option this script cannot export (nothing written),
1 anything else.
"""
import argparse
import collections
import os
import sys

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


def build(section):
    name = section.get("name", "mlp")
    # The resolved section may carry keys of other models (seq_len, ...): take the model's own.
    own = {"mlp": ("in_features", "hidden", "num_classes", "dropout"),
           "cnn": ("input_shape", "channels", "kernel", "fc", "num_classes", "dropout")}
    keys = {k: v for k, v in section.items() if k in own.get(name, ())}
    if name == "mlp":
        return mlp(**keys), [1, keys.get("in_features", 784)]
    if name == "cnn":
        return cnn(**keys), [1] + list(keys.get("input_shape", [1, 28, 28]))
    raise ValueError(f"model.name {name}: this script rebuilds the built-in mlp and cnn models "
                     f"(a gpt or plugin model has no PyTorch definition here yet)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the run's model section (YAML)")
    parser.add_argument("--state", required=True, help="state_dict file (torch.load)")
    parser.add_argument("--format", required=True, choices=["torchscript", "onnx"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        module, input_shape = build(yaml.safe_load(args.model) or {})
    except (ValueError, TypeError) as e:
        print(f"export_model.py: {e}", file=sys.stderr)
        return 2
    module.load_state_dict(torch.load(args.state), strict=True)
    module.eval()
    scripted = torch.jit.script(module)
    tmp = args.out + ".tmp"
    if args.format == "torchscript":
        scripted.save(tmp)
    else:
        import onnx
        example = torch.zeros(input_shape)
        torch.onnx.export(module, (example,), tmp, input_names=["inputs"],
                          output_names=["outputs"], dynamic_axes={"inputs": {0: "batch"},
                                                                  "outputs": {0: "batch"}},
                          opset_version=13)
        onnx.checker.check_model(onnx.load(tmp))
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
