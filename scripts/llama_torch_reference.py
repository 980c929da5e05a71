#!/usr/bin/python3
"""Independent PyTorch reference of hpctrain's llama family (docs/MODELS.md, "The llama family"),
written from the published equations, reading and writing Hugging Face model folders.

The family: token embedding; `layers` pre-norm blocks, each
    h = x + o(attention(rope(qnorm(q(rms(x)))), rope(knorm(k(rms(x)))), v(rms(x))))
    y = h + down(silu(gate(rms(h))) * up(rms(h)))
with RMSNorm rms(x) = x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019), rotary position
embedding (Su et al. 2021) with base theta and, optionally, Llama-3.1's frequency scaling (factor,
low/high frequency factors, original context), grouped-query attention (heads query heads sharing
kv_heads key/value heads, MQA at kv_heads = 1; Ainslie et al. 2023), optional q/k/v bias (Qwen2),
optional per-head RMSNorm of q and k before the rotation (Qwen3), SwiGLU MLP (Shazeer 2020), a
final RMSNorm and a tied or untied head.

This reference rotates ADJACENT pairs (2i, 2i+1) of each head as complex numbers, as the RoPE paper
writes it; Hugging Face folders store q and k (their biases and q/k norm weights too) for a
rotation of the two HALVES of each head (i, i + head_dim/2). Loading a folder therefore reorders
each head's rows (half-split -> interleaved), and saving reorders them back: a mapping that got
this wrong would give other logits than hpctrain, which rotates halves and reads the folder as it is.

Modes:
  --make-folder DIR --arch llama3|qwen2|qwen3|mistral [--kv-heads N] [--dtype f32|bf16]
       [--shards N] [--tied] [--seed S] [--vocab V]: a tiny random model folder (config.json,
       weights as model.safetensors or N shards with model.safetensors.index.json); with --from-config
       CONFIG, a random folder of the shape of CONFIG's model section (benchmarks)
  --logits DIR --tokens T.npy --out L.npy: float32 logits [B, T, V] of the folder's model
  --generate DIR --prompts P.json --context C [--max-new-tokens N] [--stop-id I]: greedy
       continuations (as `hpctrain generate` with model.init_from: DIR and model.seq_len: C), one
       prompt at a time, the whole sequence through the model for every new token (no cache);
       P.json: [[token ids of prompt 1], ...]; prints one JSON line per prompt: {"tokens": [...]}
  --train DIR -c CONFIG [--nproc N]: trains from the folder's weights on CONFIG's data, sample
       order and AdamW (as `hpctrain train` does with model.init_from: DIR), DistributedDataParallel
       over gloo; prints one JSON line (losses, tokens/s). --steps overrides run.max_steps,
       --global-batch G the sequences of a step (default data.batch_size x nproc).

--each FILE runs each line of FILE as the arguments of one call, in one process.

Needs torch and numpy (yaml and h5py for --train). Not a copy of any library's code.
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
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

ARCHS = {
    "llama3": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "mistral": ("MistralForCausalLM", "mistral"),
}


# ----------------------------------------------------------------------------- the folder
def read_folder(path):
    """(config dict, {hf name: tensor}) of a Hugging Face model folder: model.safetensors or the
    shards model.safetensors.index.json lists."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(path, "model.safetensors.index.json")
    state = {}
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        for shard in sorted(set(weight_map.values())):
            for name, t in safetensors_io.load(os.path.join(path, shard)).items():
                assert weight_map[name] == shard, f"{name} is in {shard}, the index says {weight_map[name]}"
                state[name] = t
        missing = set(weight_map) - set(state)
        assert not missing, f"the index lists tensors no shard holds: {sorted(missing)[:3]}"
    else:
        state = safetensors_io.load(os.path.join(path, "model.safetensors"))
    return cfg, state


def shape_of(cfg):
    heads = cfg["num_attention_heads"]
    return {
        "vocab": cfg["vocab_size"],
        "dim": cfg["hidden_size"],
        "layers": cfg["num_hidden_layers"],
        "heads": heads,
        "kv_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
        "ffn": cfg["intermediate_size"],
        "eps": cfg.get("rms_norm_eps", 1e-6),
        "theta": cfg.get("rope_theta", 10000.0),
        "scaling": cfg.get("rope_scaling"),
        "tied": cfg.get("tie_word_embeddings", False),
        "qkv_bias": cfg.get("architectures", [""])[0] == "Qwen2ForCausalLM"
                    or bool(cfg.get("attention_bias", False)),
        "qk_norm": cfg.get("architectures", [""])[0] == "Qwen3ForCausalLM",
    }


def halves_to_pairs(t, heads):
    """Rows of each head from the half-split order (i, i + hd/2 rotate together) to adjacent pairs
    (2i, 2i+1): new row 2i is old row i, new row 2i+1 is old row i + hd/2."""
    rows = t.shape[0]
    hd = rows // heads
    rest = t.shape[1:]
    return t.reshape(heads, 2, hd // 2, *rest).transpose(1, 2).reshape(rows, *rest).contiguous()


def pairs_to_halves(t, heads):
    rows = t.shape[0]
    hd = rows // heads
    rest = t.shape[1:]
    return t.reshape(heads, hd // 2, 2, *rest).transpose(1, 2).reshape(rows, *rest).contiguous()


# ----------------------------------------------------------------------------- the model
def rope_frequencies(s, seq_len):
    """[seq_len, head_dim/2] complex rotations e^{i m w_j}, w_j = theta^(-2j/hd), with Llama-3.1's
    scaling: wavelengths 2 pi / w shorter than original_context / high_freq_factor are kept,
    longer than original_context / low_freq_factor divided by factor, and in between blended
    linearly in original_context / wavelength."""
    hd = s["head_dim"]
    j = torch.arange(0, hd // 2, dtype=torch.float64)
    w = s["theta"] ** (-2.0 * j / hd)
    sc = s["scaling"]
    if sc and sc.get("rope_type", sc.get("type")) == "llama3":
        factor, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        ctx = sc["original_max_position_embeddings"]
        wavelength = 2 * math.pi / w
        blend = ((ctx / wavelength - lo) / (hi - lo)).clamp(0, 1)
        scaled = (1 - blend) * w / factor + blend * w
        w = torch.where(wavelength < ctx / hi, w, torch.where(wavelength > ctx / lo, w / factor, scaled))
    elif sc:
        raise SystemExit(f"llama_torch_reference.py: rope_scaling {sc} is not implemented")
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), w)
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


def rotate(x, freqs):
    """x [B, T, H, hd] with adjacent pairs as complex numbers, times e^{i m w}."""
    b, t, h, hd = x.shape
    z = torch.view_as_complex(x.float().reshape(b, t, h, hd // 2, 2))
    return torch.view_as_real(z * freqs[:t].view(1, t, 1, hd // 2)).reshape(b, t, h, hd)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Reference(torch.nn.Module):
    """Parameters under Hugging Face's names ('.' -> '__'), q/k in adjacent-pair order."""

    def __init__(self, cfg, state):
        super().__init__()
        self.s = shape_of(cfg)
        s = self.s
        for name, t in state.items():
            t = t.to(torch.float32)
            heads = s["heads"] if ".q_proj." in name else s["kv_heads"] if ".k_proj." in name else 0
            if heads:
                t = halves_to_pairs(t, heads)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                t = halves_to_pairs(t, 1)
            self.register_parameter(name.replace(".", "__"), torch.nn.Parameter(t.clone()))
        self.freqs = None

    def p(self, name):
        return getattr(self, name.replace(".", "__"))

    def has(self, name):
        return hasattr(self, name.replace(".", "__"))

    def hf_state(self):
        """The parameters back under Hugging Face's names and half-split q/k order."""
        out = {}
        for key, t in self.named_parameters():
            name = key.replace("__", ".")
            t = t.detach()
            if ".q_proj." in name:
                t = pairs_to_halves(t, self.s["heads"])
            elif ".k_proj." in name:
                t = pairs_to_halves(t, self.s["kv_heads"])
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                t = pairs_to_halves(t, 1)
            out[name] = t.contiguous()
        return out

    def linear(self, x, name):
        bias = self.p(name + ".bias") if self.has(name + ".bias") else None
        return F.linear(x, self.p(name + ".weight"), bias)

    def attention(self, x, i):
        s, b, t = self.s, x.shape[0], x.shape[1]
        h, kv, hd = s["heads"], s["kv_heads"], s["head_dim"]
        pre = f"model.layers.{i}.self_attn."
        q = self.linear(x, pre + "q_proj").view(b, t, h, hd)
        k = self.linear(x, pre + "k_proj").view(b, t, kv, hd)
        v = self.linear(x, pre + "v_proj").view(b, t, kv, hd)
        if s["qk_norm"]:
            q = rms_norm(q, self.p(pre + "q_norm.weight"), s["eps"])
            k = rms_norm(k, self.p(pre + "k_norm.weight"), s["eps"])
        q, k = rotate(q, self.freqs), rotate(k, self.freqs)
        # Query head j reads key/value head j // (h / kv).
        group = torch.arange(h) // (h // kv)
        k, v = k[:, :, group], v[:, :, group]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        ctx = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, -1), v).reshape(b, t, h * hd)
        return self.linear(ctx, pre + "o_proj")

    def forward(self, tokens):
        s, t = self.s, tokens.shape[1]
        if self.freqs is None or self.freqs.shape[0] < t:
            self.freqs = rope_frequencies(s, t)
        x = F.embedding(tokens, self.p("model.embed_tokens.weight"))
        for i in range(s["layers"]):
            pre = f"model.layers.{i}."
            x = x + self.attention(rms_norm(x, self.p(pre + "input_layernorm.weight"), s["eps"]), i)
            h = rms_norm(x, self.p(pre + "post_attention_layernorm.weight"), s["eps"])
            m = F.silu(self.linear(h, pre + "mlp.gate_proj")) * self.linear(h, pre + "mlp.up_proj")
            x = x + self.linear(m, pre + "mlp.down_proj")
        x = rms_norm(x, self.p("model.norm.weight"), s["eps"])
        head = self.p("model.embed_tokens.weight") if s["tied"] else self.p("lm_head.weight")
        return F.linear(x, head)

    def flops_per_token(self, seq_len):
        """6 N per trained token over the matrices (head included, embedding not) plus attention's
        scores and weighted sum, 6 * 2 * layers * T * heads * head_dim (causal not discounted)."""
        s = self.s
        n = sum(p.numel() for k, p in self.named_parameters()
                if p.dim() == 2 and "embed_tokens" not in k)
        if s["tied"]:
            n += s["vocab"] * s["dim"]
        return 6.0 * n + 12.0 * s["layers"] * seq_len * s["heads"] * s["head_dim"]


# ----------------------------------------------------------------------------- tiny folders
def make_folder(path, arch, kv_heads, dtype, shards, tied, seed, layers=4, vocab=96):
    """A tiny random model of `arch`: vocabulary 96 (or `vocab`: 256 reads bytes), width 64, 4
    heads of 16 (Qwen3: head_dim 24, so heads * head_dim differs from the width), MLP 96."""
    g = torch.Generator().manual_seed(seed)
    hf_arch, model_type = ARCHS[arch]
    heads, dim, ffn = 4, 64, 96
    hd = 24 if arch == "qwen3" else dim // heads
    cfg = {
        "architectures": [hf_arch], "model_type": model_type, "vocab_size": vocab,
        "hidden_size": dim, "intermediate_size": ffn, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "hidden_act": "silu",
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5 if arch != "qwen3" else 1e-6,
        "rope_theta": 10000.0, "tie_word_embeddings": tied, "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[dtype],
        "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2,
    }
    if arch == "llama3":
        # original context 32: with head_dim 16 and theta 1e4 the wavelengths 6.3, 19.9, 62.8, ...
        # fall in all three regions of the scaling (below 8 kept, 8 to 32 blended, above divided).
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
        cfg["attention_bias"] = False
        cfg["mlp_bias"] = False
    if arch == "qwen3":
        cfg["head_dim"] = hd
        cfg["attention_bias"] = False
    if arch == "mistral":
        cfg["sliding_window"] = None

    def rnd(*shape, std=0.08, mean=0.0):
        return torch.randn(*shape, generator=g) * std + mean

    # A tied embedding is also the output head: drawn at the untied head's scale, so that the logits
    # stay in the same range as the other folders' (at 0.25 they reach about 11, and 10 AdamW steps
    # amplify float32 rounding to above 1e-5 in the loss even at one rank).
    state = {"model.embed_tokens.weight": rnd(vocab, dim, std=0.1 if tied else 0.25)}
    for i in range(layers):
        p = f"model.layers.{i}."
        state[p + "input_layernorm.weight"] = rnd(dim, std=0.1, mean=1.0)
        state[p + "self_attn.q_proj.weight"] = rnd(heads * hd, dim, std=0.15)
        state[p + "self_attn.k_proj.weight"] = rnd(kv_heads * hd, dim, std=0.15)
        state[p + "self_attn.v_proj.weight"] = rnd(kv_heads * hd, dim)
        if arch == "qwen2":
            state[p + "self_attn.q_proj.bias"] = rnd(heads * hd, std=0.1)
            state[p + "self_attn.k_proj.bias"] = rnd(kv_heads * hd, std=0.1)
            state[p + "self_attn.v_proj.bias"] = rnd(kv_heads * hd, std=0.1)
        state[p + "self_attn.o_proj.weight"] = rnd(dim, heads * hd)
        if arch == "qwen3":
            state[p + "self_attn.q_norm.weight"] = rnd(hd, std=0.1, mean=1.0)
            state[p + "self_attn.k_norm.weight"] = rnd(hd, std=0.1, mean=1.0)
        state[p + "post_attention_layernorm.weight"] = rnd(dim, std=0.1, mean=1.0)
        state[p + "mlp.gate_proj.weight"] = rnd(ffn, dim)
        state[p + "mlp.up_proj.weight"] = rnd(ffn, dim)
        state[p + "mlp.down_proj.weight"] = rnd(dim, ffn)
    state["model.norm.weight"] = rnd(dim, std=0.1, mean=1.0)
    if not tied:
        state["lm_head.weight"] = rnd(vocab, dim, std=0.1)
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    state = {k: v.to(torch_dtype) for k, v in state.items()}
    write_folder(path, cfg, state, shards)


def make_folder_from_config(path, config, seed):
    """A random folder of the shape of an hpctrain config's llama model section (benchmarks):
    matrices N(0, 0.02^2), norms at 1."""
    import yaml
    m = yaml.safe_load(open(config))["model"]
    heads = m.get("heads", 4)
    arch = m.get("architecture", "llama")
    hf_arch = {"llama": "llama3", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral"}[arch]
    cfg = {"architectures": [ARCHS[hf_arch][0]], "model_type": ARCHS[hf_arch][1],
           "vocab_size": m.get("vocab_size", 256), "hidden_size": m.get("width", 128),
           "intermediate_size": m.get("ffn_width", 3 * m.get("width", 128)),
           "num_hidden_layers": m.get("layers", 4), "num_attention_heads": heads,
           "num_key_value_heads": m.get("kv_heads", heads),
           "head_dim": m.get("head_dim", m.get("width", 128) // heads), "hidden_act": "silu",
           "max_position_embeddings": m.get("max_positions", m.get("seq_len", 128)),
           "rms_norm_eps": m.get("norm_eps", 1e-5), "rope_theta": float(m.get("rope_theta", 500000)),
           "tie_word_embeddings": m.get("tied_embeddings", False), "attention_bias": False}
    if m.get("qkv_bias") or m.get("qk_norm") or m.get("rope_scaling", "none") != "none":
        raise SystemExit("--from-config: plain llama/mistral shapes only")
    g = torch.Generator().manual_seed(seed)
    s = shape_of(cfg)
    d, hd, f = s["dim"], s["head_dim"], s["ffn"]
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.02
    state = {"model.embed_tokens.weight": rnd(s["vocab"], d)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        state[p + "input_layernorm.weight"] = torch.ones(d)
        state[p + "self_attn.q_proj.weight"] = rnd(s["heads"] * hd, d)
        state[p + "self_attn.k_proj.weight"] = rnd(s["kv_heads"] * hd, d)
        state[p + "self_attn.v_proj.weight"] = rnd(s["kv_heads"] * hd, d)
        state[p + "self_attn.o_proj.weight"] = rnd(d, s["heads"] * hd)
        state[p + "post_attention_layernorm.weight"] = torch.ones(d)
        state[p + "mlp.gate_proj.weight"] = rnd(f, d)
        state[p + "mlp.up_proj.weight"] = rnd(f, d)
        state[p + "mlp.down_proj.weight"] = rnd(d, f)
    state["model.norm.weight"] = torch.ones(d)
    if not s["tied"]:
        state["lm_head.weight"] = rnd(s["vocab"], d)
    write_folder(path, cfg, state)


def write_folder(path, cfg, state, shards=1):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(state)
    if shards <= 1:
        safetensors_io.save(os.path.join(path, "model.safetensors"), state, metadata={"format": "pt"})
        return
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        part = names[s * per:(s + 1) * per]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        safetensors_io.save(os.path.join(path, file), {n: state[n] for n in part}, metadata={"format": "pt"})
        for n in part:
            weight_map[n] = file
            total += state[n].numel() * state[n].element_size()
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# ----------------------------------------------------------------------------- generation
def greedy(model, prompt, max_new, context, stops=()):
    """Greedy continuation of one prompt (a list of ids): the whole sequence through the model for
    every new token; stops at a stop id (not included), after max_new tokens, or at `context`."""
    limit = min(max_new, context - len(prompt))
    out = []
    with torch.no_grad():
        while len(out) < limit:
            nxt = int(model(torch.tensor([prompt + out]))[0, -1].argmax())
            if nxt in stops:
                break
            out.append(nxt)
    return out


# ----------------------------------------------------------------------------- training
def train_worker(rank, args, port, queue):
    import torch.distributed as dist
    import yaml
    import data_order

    torch.set_num_threads(args.threads)
    if hasattr(os, "sched_setaffinity") and args.pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    # TCPStore without libuv: its default since PyTorch 2.4, absent from Debian 13's build
    # (PyTorch 1.13 ignores the variable).
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.nproc)
    cfg = yaml.safe_load(open(args.config))
    hf_cfg, state = read_folder(args.train)
    model = Reference(hf_cfg, state)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if args.nproc > 1 else model
    o = cfg["optim"]
    opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=tuple(o.get("betas", (0.9, 0.999))),
                            eps=o.get("eps", 1e-8), weight_decay=o.get("weight_decay", 0.01))
    clip = o.get("grad_clip", 0.0)
    data, run = cfg["data"], cfg.get("run", {})
    import h5py
    with h5py.File(data["train"], "r") as f:
        tokens = torch.from_numpy(f["tokens"][:].astype(np.int64))
    t = cfg["model"]["seq_len"]
    num_samples = (tokens.numel() - 1) // t
    # data.batch_size is per rank, as hpctrain's; --global-batch G gives G / nproc per process.
    g = args.global_batch or data.get("batch_size", 64) * args.nproc
    b = g // args.nproc
    total = args.steps or run.get("max_steps", 10)
    seed = run.get("seed", 1234)
    batches = data_order.global_batches(num_samples, g, seed, data.get("shuffle", True), total)
    losses, ends, cpus = [], [], []
    dist.barrier()
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(total):
        rows = torch.stack([tokens[i * t:i * t + t + 1] for i in batches[step][rank * b:(rank + 1) * b]])
        logits = ddp(rows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=False)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / args.nproc)
        ends.append(time.perf_counter())
        cpus.append(time.process_time())
    # CPU seconds (user + system, every thread of the process) per timed step, mean over ranks: a
    # cost that other processes on a shared machine inflate far less than the wall time.
    w = min(args.warmup_steps, total - 1)
    cpu = torch.tensor([(cpus[-1] - (cpus[w - 1] if w > 0 else cpu_start)) / (total - w)],
                       dtype=torch.float64)
    dist.all_reduce(cpu)
    if rank == 0:
        step_time = (ends[-1] - (ends[w - 1] if w > 0 else start)) / (total - w)
        queue.put({"impl": f"pytorch {torch.__version__} DDP gloo", "model": "llama reference",
                   "parameters": sum(p.numel() for p in model.parameters()),
                   "world_size": args.nproc, "threads_per_rank": args.threads, "global_batch": g,
                   "tokens_per_sample": t, "steps": total, "warmup_steps": w,
                   "step_time_s": step_time, "tokens_per_s": g * t / step_time,
                   "cpu_s_per_step_per_rank": cpu.item() / args.nproc,
                   "train_flops_per_token": model.flops_per_token(t), "losses": losses})
        if args.save:
            write_folder(args.save, hf_cfg, model.hf_state())
    dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--make-folder", metavar="DIR")
    p.add_argument("--arch", choices=sorted(ARCHS), default="llama3")
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=96, help="--make-folder: vocabulary size")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--from-config", metavar="CONFIG",
                   help="--make-folder: the shape of CONFIG's model section instead of a tiny one")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--logits", metavar="DIR")
    p.add_argument("--generate", metavar="DIR")
    p.add_argument("--prompts", help="--generate: JSON list of prompts, each a list of token ids")
    p.add_argument("--context", type=int, default=0, help="--generate: the model's context")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--stop-id", type=int, action="append", default=[])
    p.add_argument("--tokens")
    p.add_argument("--out")
    p.add_argument("--train", metavar="DIR")
    p.add_argument("-c", "--config")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=0,
                   help="--train: sequences per step (default data.batch_size x nproc)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--no-pin", dest="pin", action="store_false")
    p.add_argument("--save", metavar="DIR", help="--train: write the trained weights as a folder")
    args = p.parse_args(argv)
    if args.make_folder and args.from_config:
        make_folder_from_config(args.make_folder, args.from_config, args.seed)
    elif args.make_folder:
        make_folder(args.make_folder, args.arch, args.kv_heads, args.dtype, args.shards, args.tied,
                    args.seed, args.layers, args.vocab)
    elif args.logits:
        cfg, state = read_folder(args.logits)
        model = Reference(cfg, state).eval()
        tokens = torch.from_numpy(np.load(args.tokens).astype(np.int64))
        with torch.no_grad():
            np.save(args.out, model(tokens).numpy())
    elif args.generate:
        torch.set_num_threads(args.threads)
        cfg, state = read_folder(args.generate)
        model = Reference(cfg, state).eval()
        context = args.context or cfg["max_position_embeddings"]
        for prompt in json.load(open(args.prompts)):
            print(json.dumps({"tokens": greedy(model, prompt, args.max_new_tokens, context,
                                               set(args.stop_id))}))
    elif args.train:
        import torch.multiprocessing as mp
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        mp.start_processes(train_worker, args=(args, port, queue), nprocs=args.nproc, join=True,
                           start_method="spawn")
        print(json.dumps(queue.get()))
    else:
        p.error("give --make-folder, --logits, --generate or --train")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--each"]:
        # --each FILE: each line of FILE is the arguments of one call, all in this process (one
        # import of torch for many folders or logits).
        import shlex
        for line in open(sys.argv[2]):
            if line.strip():
                main(shlex.split(line))
    else:
        main()
