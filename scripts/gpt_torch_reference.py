#!/usr/bin/python3
"""PyTorch reference for hpctrain's GPT (include/hpctrain/model/gpt.hpp), trained with DDP.

The same architecture (token + learned position embeddings, pre-norm blocks with causal
self-attention computed as baddbmm(mask, q, k^T / sqrt(hd)) -> softmax -> bmm and a tanh-GELU
MLP, final LayerNorm, tied or untied output head), the same initialisation (every parameter drawn
from its own CPU generator seeded with hpctrain's parameter_seed(seed, name), so the initial
weights are bit-identical to hpctrain's), the same sample order (scripts/data_order.py), the same
AdamW, gradient clipping and LR schedule, on `--nproc` processes with DistributedDataParallel over
gloo, one thread each. Reports steady-state step time, tokens/s and achieved FLOP/s with the
formula hpctrain's ledger uses (Gpt::forward_flops_per_sample, times 3 for training).

    /usr/bin/python3 scripts/gpt_torch_reference.py -c configs/gpt-small-tp2.yaml \\
        --set run.max_steps=12 --nproc 2 --warmup-steps 2 --json

With --logits WEIGHTS it trains nothing: it loads WEIGHTS as hpctrain's model.init_from reads them
(hpctrain's or GPT-2's Hugging Face names; docs/MODELS.md, "Pretrained weights") and writes the
logits of --tokens to --out:

    /usr/bin/python3 scripts/gpt_torch_reference.py -c CONFIG --logits gpt2.safetensors \\
        --tokens tokens.npy --out logits.npy

Used by scripts/bench_gpt.sh, scripts/gpu_check.sh and tests/e2e/model/init_from_test.sh. Needs
torch, yaml and h5py (Debian: python3-torch python3-yaml python3-h5py); without h5py it reads the
kit's NAME.tokens.npz copy.
"""
import argparse
import json
import math
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_order  # noqa: E402  (hpctrain's sample order, docs/DATA.md)

MASK = (1 << 64) - 1
SDPA = False  # set by --attention sdpa


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def parameter_seed(seed, name):
    """src/parallel/tensor_parallel_shard.cpp: FNV-1a of the name mixed with the seed."""
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & MASK
    mixed = splitmix64(splitmix64(seed & MASK) ^ h)
    return (mixed ^ (mixed >> 32)) & 0xFFFFFFFF


def normal_param(seed, name, shape, std):
    gen = torch.Generator().manual_seed(parameter_seed(seed, name))
    return torch.nn.Parameter(torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=gen))


class Block(torch.nn.Module):
    def __init__(self, o, i, seed):
        super().__init__()
        d, f, p = o["width"], o["mlp_width"], f"blocks.{i}"
        res_std = 0.02 / math.sqrt(2.0 * o["layers"])
        self.heads = o["heads"]
        self.ln1 = torch.nn.LayerNorm(d, eps=1e-5)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-5)
        # Logical shapes as hpctrain stores them: qkv [3, D, D] (q, k, v stacked) and [3, D].
        self.qkv_w = normal_param(seed, f"{p}.attn.qkv.weight", (3, d, d), 0.02)
        self.qkv_b = torch.nn.Parameter(torch.zeros(3, d))
        self.proj_w = normal_param(seed, f"{p}.attn.proj.weight", (d, d), res_std)
        self.proj_b = torch.nn.Parameter(torch.zeros(d))
        self.fc_w = normal_param(seed, f"{p}.mlp.fc.weight", (f, d), 0.02)
        self.fc_b = torch.nn.Parameter(torch.zeros(f))
        self.mproj_w = normal_param(seed, f"{p}.mlp.proj.weight", (d, f), res_std)
        self.mproj_b = torch.nn.Parameter(torch.zeros(d))

    def forward(self, x, mask):
        b, t, d = x.shape
        h, hd = self.heads, d // self.heads
        qkv = F.linear(self.ln1(x), self.qkv_w.view(3 * d, d), self.qkv_b.view(3 * d))
        qkv = qkv.view(b, t, 3, h, hd).permute(2, 0, 3, 1, 4).contiguous()
        q, k, v = (qkv[j].view(b * h, t, hd) for j in range(3))
        if SDPA:  # hpctrain's model.attention: sdpa
            ctx = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
            ctx = ctx.transpose(1, 2).reshape(b, t, d)
        else:
            scores = torch.baddbmm(mask, q, k.transpose(1, 2), beta=1.0, alpha=1.0 / math.sqrt(hd))
            ctx = torch.bmm(torch.softmax(scores, -1), v)
            ctx = ctx.view(b, h, t, hd).transpose(1, 2).reshape(b, t, d)
        y = x + F.linear(ctx, self.proj_w, self.proj_b)
        m = F.gelu(F.linear(self.ln2(y), self.fc_w, self.fc_b), approximate="tanh")
        return y + F.linear(m, self.mproj_w, self.mproj_b)


class Gpt(torch.nn.Module):
    def __init__(self, o, seed):
        super().__init__()
        self.o = o
        v, d, t = o["vocab_size"], o["width"], o["seq_len"]
        self.wte = normal_param(seed, "wte.weight", (v, d), 0.02)
        self.wpe = normal_param(seed, "wpe.weight", (t, d), 0.02)
        self.blocks = torch.nn.ModuleList(Block(o, i, seed) for i in range(o["layers"]))
        self.ln_f = torch.nn.LayerNorm(d, eps=1e-5)
        self.lm_head = None if o["tied_embeddings"] else normal_param(seed, "lm_head.weight", (v, d), 0.02)
        self.register_buffer("mask", torch.full((t, t), -math.inf).triu_(1), persistent=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = F.embedding(tokens, self.wte) + self.wpe[:t]
        mask = self.mask[:t, :t]
        for block in self.blocks:
            x = block(x, mask)
        return F.linear(self.ln_f(x), self.wte if self.lm_head is None else self.lm_head)

    def non_embedding_parameters(self):
        skip = {id(self.wte), id(self.wpe), id(self.lm_head)}
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)

    def forward_flops_per_sample(self):
        """Gpt::forward_flops_per_sample: 2 N T + 2 layers T^2 width (Kaplan et al. 2020)."""
        o, t = self.o, float(self.o["seq_len"])
        return 2.0 * self.non_embedding_parameters() * t + 2.0 * o["layers"] * t * t * o["width"]


def lr_at(cfg, step, total):
    """src/train/lr_schedule.cpp."""
    base, s = cfg["optim"]["lr"], cfg["schedule"]
    warm = s.get("warmup_steps", 0)
    if warm > 0 and step < warm:
        return base * (step + 1) / warm
    if s.get("name", "constant") == "cosine":
        span = max(1, total - warm)
        progress = min(1.0, (step - warm) / span)
        lo = s.get("min_lr", 0.0)
        return lo + 0.5 * (base - lo) * (1 + math.cos(math.pi * progress))
    if s.get("name") == "step":
        return base * s.get("gamma", 0.1) ** ((step - warm) // s.get("step_size", 1))
    return base


def read_tokens(path):
    """The token stream of an hpctrain text file; without h5py (a GPU machine's python may lack
    it), the copy beside it that scripts/gpu_kit.sh writes (NAME.tokens.npz)."""
    try:
        import h5py
    except ImportError:
        sidecar = os.path.splitext(path)[0] + ".tokens.npz"
        if os.path.exists(sidecar):
            return np.load(sidecar)["tokens"]
        raise SystemExit(f"gpt_torch_reference.py: no h5py to read {path}, and no {sidecar}")
    with h5py.File(path, "r") as f:
        return f["tokens"][:]


def load_config(path, overrides):
    cfg = yaml.safe_load(open(path))
    for item in overrides:
        key, _, value = item.partition("=")
        node = cfg
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    if cfg["model"].get("dropout", 0.0):
        raise SystemExit("gpt_torch_reference.py: dropout is not implemented (use 0)")
    return cfg, gpt_options(cfg["model"])


def gpt_options(m):
    """The sizes of a `model:` section (hpctrain's defaults, include/hpctrain/model/gpt.hpp).
    Dropout is off in evaluation and export, so it is not among them."""
    o = {
        "vocab_size": m.get("vocab_size", 256),
        "seq_len": m.get("seq_len", 128),
        "layers": m.get("layers", 4),
        "heads": m.get("heads", 4),
        "width": m.get("width", 128),
        "tied_embeddings": m.get("tied_embeddings", True),
    }
    o["mlp_width"] = int(round(o["width"] * m.get("mlp_ratio", 4)))
    return o


# hpctrain's state_dict names (include/hpctrain/model/gpt.hpp, at tp = 1) -> this module's.
HPCTRAIN_NAMES = {"attn.qkv.weight": "qkv_w", "attn.qkv.bias": "qkv_b", "attn.proj.weight": "proj_w",
                  "attn.proj.bias": "proj_b", "mlp.fc.weight": "fc_w", "mlp.fc.bias": "fc_b",
                  "mlp.proj.weight": "mproj_w", "mlp.proj.bias": "mproj_b"}


def from_hpctrain_state(state):
    """An hpctrain gpt state_dict (logical tensors: `hpctrain export --format pytorch`, or
    scripts/load_checkpoint.py) under this module's parameter names, for load_state_dict."""
    out = {}
    for name, tensor in state.items():
        if name in ("wte.weight", "wpe.weight", "lm_head.weight"):
            out[name.split(".")[0]] = tensor
            continue
        parts = name.split(".")
        if parts[0] == "blocks" and ".".join(parts[2:]) in HPCTRAIN_NAMES:
            name = f"blocks.{parts[1]}.{HPCTRAIN_NAMES['.'.join(parts[2:])]}"
        out[name] = tensor
    return out


# GPT-2's (Hugging Face) names of a block's tensors -> hpctrain's, and whether the tensor is a
# Conv1D weight ([in, out]: the transpose of hpctrain's [out, in]). docs/MODELS.md has the table.
GPT2_BLOCK = {"ln_1.weight": ("ln1.weight", False), "ln_1.bias": ("ln1.bias", False),
              "attn.c_attn.weight": ("attn.qkv.weight", True), "attn.c_attn.bias": ("attn.qkv.bias", False),
              "attn.c_proj.weight": ("attn.proj.weight", True), "attn.c_proj.bias": ("attn.proj.bias", False),
              "ln_2.weight": ("ln2.weight", False), "ln_2.bias": ("ln2.bias", False),
              "mlp.c_fc.weight": ("mlp.fc.weight", True), "mlp.c_fc.bias": ("mlp.fc.bias", False),
              "mlp.c_proj.weight": ("mlp.proj.weight", True), "mlp.c_proj.bias": ("mlp.proj.bias", False)}


def from_gpt2_state(state, o):
    """A GPT-2 state_dict (transformer.h.N.attn.c_attn.weight, ...; the "transformer." prefix
    optional) as an hpctrain gpt state_dict of logical tensors: Conv1D weights transposed, c_attn
    viewed as the stacked [3, D, D] qkv, the attention-mask buffers dropped, a tied lm_head
    dropped."""
    d, out = o["width"], {}
    for name, t in state.items():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        parts = name.split(".")
        if parts[0] == "h":
            rest = ".".join(parts[2:])
            if rest in ("attn.bias", "attn.masked_bias"):
                continue
            target, conv1d = GPT2_BLOCK[rest]
            t = t.t() if conv1d else t
            if rest == "attn.c_attn.weight":
                t = t.reshape(3, d, d)
            elif rest == "attn.c_attn.bias":
                t = t.reshape(3, d)
            out[f"blocks.{parts[1]}.{target}"] = t.contiguous()
        elif name == "lm_head.weight" and o["tied_embeddings"]:
            continue
        else:
            out[name] = t
    return out


def load_state_file(path):
    """The tensors of a safetensors file, a torch.save state_dict (a training checkpoint's under
    'model' or 'state_dict' too), an hpctrain checkpoint or run directory, or a folder holding
    model.safetensors: {name: tensor}."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "model.safetensors")):
            path = os.path.join(path, "model.safetensors")
        else:
            import load_checkpoint
            return dict(load_checkpoint.load_state_dict(path))
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PK\x03\x04":
        state = torch.load(path, map_location="cpu")
        for key in ("state_dict", "model", "model_state_dict", "module"):
            if not any(torch.is_tensor(v) for v in state.values()) and isinstance(state.get(key), dict):
                state = state[key]
        return {k: v for k, v in state.items() if torch.is_tensor(v)}
    import safetensors_io
    return safetensors_io.load(path)


def pretrained_logits(cfg, o, state_path, tokens):
    """The logits of this reference Gpt initialised from the weights at `state_path` (hpctrain's or
    GPT-2's names, as model.init_from reads them: vocabulary tables padded with zero rows to
    vocab_size, the position table cut to seq_len) for int64 `tokens` [B, T], in float32."""
    state = load_state_file(state_path)
    if any(k.startswith(("h.", "transformer.")) for k in state):
        state = from_gpt2_state(state, o)
    if o["tied_embeddings"]:
        state.pop("lm_head.weight", None)
    elif "lm_head.weight" not in state:
        state["lm_head.weight"] = state["wte.weight"].clone()
    for name in ("wte.weight", "lm_head.weight"):
        if name in state and state[name].shape[0] < o["vocab_size"]:
            t = state[name]
            state[name] = torch.cat([t, t.new_zeros(o["vocab_size"] - t.shape[0], t.shape[1])])
    state["wpe.weight"] = state["wpe.weight"][: o["seq_len"]]
    state = {k: v.to(torch.float32) for k, v in state.items()}
    model = Gpt(o, cfg.get("run", {}).get("seed", 1234))
    model.load_state_dict(from_hpctrain_state(state), strict=True)
    model.eval()
    with torch.no_grad():
        return model(tokens)


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    if hasattr(os, "sched_setaffinity") and args.pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    global SDPA
    SDPA = args.attention == "sdpa"
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # TCPStore without libuv: its default since PyTorch 2.4, absent from Debian 13's build
    # (PyTorch 1.13 ignores the variable).
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.nproc)
    cfg, o = load_config(args.config, args.set)
    seed = cfg.get("run", {}).get("seed", 1234)
    model = Gpt(o, seed).to(device)  # initialised on the CPU (hpctrain's generators), then moved
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=cfg.get("parallel", {}).get("bucket_mb", 25),
        device_ids=[rank] if cuda else None)
    bf16 = args.precision == "bf16"
    optim = cfg["optim"]
    if optim.get("name") != "adamw":
        raise SystemExit("gpt_torch_reference.py: only optim.name = adamw is implemented")
    opt = torch.optim.AdamW(model.parameters(), lr=optim["lr"], betas=tuple(optim.get("betas", (0.9, 0.999))),
                            eps=optim.get("eps", 1e-8), weight_decay=optim.get("weight_decay", 0.01),
                            **({"fused": True} if cuda else {}))
    clip = optim.get("grad_clip", 0.0)

    data = cfg["data"]
    tokens = torch.from_numpy(read_tokens(data["train"]).astype(np.int64))
    t = o["seq_len"]
    num_samples = (tokens.numel() - 1) // t
    b = data.get("batch_size", 64)
    g = b * args.nproc
    epoch_steps = num_samples // g
    total = epoch_steps * cfg.get("run", {}).get("epochs", 1)
    if cfg.get("run", {}).get("max_steps", 0) > 0:
        total = min(total, cfg["run"]["max_steps"])
    batches = data_order.global_batches(num_samples, g, seed, data.get("shuffle", True), total)
    windows = tokens[: num_samples * t + 1]

    def read(indices):
        rows = torch.stack([windows[i * t : i * t + t + 1] for i in indices])
        if cuda:
            rows = rows.pin_memory().to(device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]

    losses, ends = [], []
    dist.barrier()
    start = time.perf_counter()
    for step in range(total):
        inputs, targets = read(batches[step][rank * b : (rank + 1) * b])
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step, total)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = ddp(inputs)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=False)
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the logged loss is the global mean, as hpctrain's
        losses.append(mean.item() / args.nproc)
        ends.append(time.perf_counter())
    if rank == 0:
        w = args.warmup_steps
        if total <= w:
            raise SystemExit(f"ran {total} steps, not more than --warmup-steps {w}")
        step_time = (ends[-1] - (ends[w - 1] if w > 0 else start)) / (total - w)
        flops = 3.0 * model.forward_flops_per_sample()
        queue.put({
            "benchmark": "train",
            "impl": f"pytorch {torch.__version__} DDP {'nccl' if cuda else 'gloo'}"
                    f"{' bf16' if bf16 else ''}{' sdpa' if SDPA else ''}",
            "device": str(device),
            "model": "gpt",
            "parameters": sum(p.numel() for p in model.parameters()),
            "world_size": args.nproc,
            "dp": args.nproc,
            "tp": 1,
            "threads_per_rank": args.threads,
            "global_batch": g,
            "tokens_per_sample": t,
            "steps": total,
            "warmup_steps": w,
            "step_time_s": step_time,
            "samples_per_s": g / step_time,
            "tokens_per_s": g * t / step_time,
            "train_flops_per_sample": flops,
            "flops_per_s": g * flops / step_time,
            "first_loss": losses[0],
            "last_loss": losses[-1],
            "losses": losses,
        })
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-c", "--config", required=True)
    p.add_argument("--set", action="append", default=[], help="key=value override (repeatable)")
    p.add_argument("--nproc", type=int, default=2, help="DDP processes (default 2)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--warmup-steps", type=int, default=2, help="steps left out of the timing")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin process r to core r")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a summary")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: one GPU per process, NCCL (scripts/gpu_check.sh)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: autocast with float32 weights, as hpctrain's run.precision")
    p.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit",
                   help="sdpa: F.scaled_dot_product_attention, as hpctrain's model.attention")
    p.add_argument("--logits", metavar="WEIGHTS",
                   help="no training: load WEIGHTS (as model.init_from reads them) and write the "
                        "logits of --tokens to --out")
    p.add_argument("--tokens", help="--logits: int64 token ids [B, T], a .npy file")
    p.add_argument("--out", help="--logits: the float32 logits [B, T, vocab_size], a .npy file")
    args = p.parse_args()
    if args.logits:
        cfg, o = load_config(args.config, args.set)
        tokens = torch.from_numpy(np.load(args.tokens).astype(np.int64))
        np.save(args.out, pretrained_logits(cfg, o, args.logits, tokens).numpy())
        return
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(worker, args=(args, port, queue), nprocs=args.nproc, join=True,
                       start_method="spawn")
    r = queue.get()
    if args.json:
        print(json.dumps(r))
        return
    print(f"# {r['impl']}: {args.config}, {r['parameters']} parameters, {args.nproc} processes x "
          f"{args.threads} thread(s), global batch {r['global_batch']}, {r['steps']} steps "
          f"({r['warmup_steps']} warm-up steps not timed)")
    print(f"step time        {r['step_time_s']:10.4f} s")
    print(f"tokens/s         {r['tokens_per_s']:10.0f}")
    print(f"achieved FLOP/s  {r['flops_per_s']:10.3g}")
    print(f"loss             {r['first_loss']:10.4f} -> {r['last_loss']:.4f}")


if __name__ == "__main__":
    main()
