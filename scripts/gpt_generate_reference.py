#!/usr/bin/python3
"""PyTorch reference for `hpctrain generate` (docs/GENERATE.md): greedy decoding of an hpctrain
gpt checkpoint through scripts/gpt_torch_reference.py's Gpt (the same weights, loaded with h5py by
scripts/load_checkpoint.py), with a KV cache written here (each block's keys and values of the
positions seen, concatenated step by step) or without one (the whole sequence through the model
for every new token). A test and benchmark reference only.

    /usr/bin/python3 scripts/gpt_generate_reference.py --checkpoint RUN_DIR --prompts p.json \\
        --max-new-tokens 32 [--no-cache] [--stop-id 0]
        p.json: [[token ids of prompt 1], ...]; prints one JSON line per prompt: {"tokens": [...]}
    /usr/bin/python3 scripts/gpt_generate_reference.py --checkpoint RUN_DIR --bench \\
        --batch 8 --prompt-len 16 --max-new-tokens 64 [--threads 1]
        prints {"batch", "new_tokens", "seconds", "tokens_per_s", "first_token_seconds"}: random
        prompts of one length (no padding), greedy, with the KV cache, the best of --repeat runs.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch_reference as ref  # noqa: E402
import load_checkpoint  # noqa: E402


def load_model(checkpoint):
    state = load_checkpoint.load_state_dict(checkpoint)
    ckpt = load_checkpoint.checkpoint_dir(checkpoint)
    config = None
    for path in (os.path.join(ckpt, "config.yaml"),
                 os.path.join(checkpoint, "config.yaml"),
                 os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ckpt))), "config.yaml")):
        if os.path.exists(path):
            config = yaml.safe_load(open(path))
            break
    if config is None:
        raise SystemExit(f"no config.yaml beside {checkpoint}")
    o = ref.gpt_options(config["model"])
    model = ref.Gpt(o, 0)
    model.load_state_dict(ref.from_hpctrain_state(dict(state)), strict=True)
    model.eval()
    return model


def cached_forward(model, tokens, cache):
    """Logits [B, t, V] of tokens [B, t] at the positions after the cache's; appends each block's
    keys and values ([B, H, t, hd]) to `cache` (a list of [k, v] per block, empty at first)."""
    b, t = tokens.shape
    start = cache[0][0].shape[2] if cache else 0
    x = F.embedding(tokens, model.wte) + model.wpe[start:start + t]
    for i, block in enumerate(model.blocks):
        d = x.shape[-1]
        h, hd = block.heads, d // block.heads
        qkv = F.linear(block.ln1(x), block.qkv_w.view(3 * d, d), block.qkv_b.view(3 * d))
        q, k, v = qkv.view(b, t, 3, h, hd).permute(2, 0, 3, 1, 4)
        if len(cache) <= i:
            cache.append([k, v])
        else:
            cache[i] = [torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)]
        keys, values = cache[i]
        scores = q @ keys.transpose(-2, -1) / math.sqrt(hd)
        total = keys.shape[2]
        # query j (position start + j) sees keys 0 .. start + j
        causal = torch.arange(total)[None, :] > (start + torch.arange(t))[:, None]
        scores = scores.masked_fill(causal, -math.inf)
        ctx = (torch.softmax(scores, -1) @ values).transpose(1, 2).reshape(b, t, d)
        y = x + F.linear(ctx, block.proj_w, block.proj_b)
        m = F.gelu(F.linear(block.ln2(y), block.fc_w, block.fc_b), approximate="tanh")
        x = y + F.linear(m, block.mproj_w, block.mproj_b)
    head = model.wte if model.lm_head is None else model.lm_head
    return F.linear(model.ln_f(x), head)


def greedy(model, prompt, max_new, stops, use_cache):
    """Greedy continuation of one prompt (a list of ids), stopping at a stop id (not included),
    after max_new tokens, or at the model's context."""
    context = model.o["seq_len"]
    limit = min(max_new, context - len(prompt))
    out, cache = [], []
    seq = torch.tensor([prompt])
    with torch.no_grad():
        logits = cached_forward(model, seq, cache) if use_cache else model(seq)
        while len(out) < limit:
            nxt = int(logits[0, -1].argmax())
            if nxt in stops:
                break
            out.append(nxt)
            if len(out) == limit:
                break
            if use_cache:
                logits = cached_forward(model, torch.tensor([[nxt]]), cache)
            else:
                logits = model(torch.tensor([prompt + out]))
    return out


def bench(model, batch, prompt_len, max_new, repeat):
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, model.o["vocab_size"], (batch, prompt_len), generator=gen)
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        cache = []
        with torch.no_grad():
            logits = cached_forward(model, prompts, cache)
            nxt = logits[:, -1].argmax(-1)
            first = time.perf_counter() - start
            new = 1
            while new < max_new:
                logits = cached_forward(model, nxt[:, None], cache)
                nxt = logits[:, -1].argmax(-1)
                new += 1
        seconds = time.perf_counter() - start
        if best is None or seconds < best[0]:
            best = (seconds, first)
    seconds, first = best
    return {"batch": batch, "prompt_len": prompt_len, "new_tokens": batch * max_new,
            "seconds": seconds, "tokens_per_s": batch * max_new / seconds,
            "first_token_seconds": first, "threads": torch.get_num_threads()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--prompts", help="JSON file: a list of prompts, each a list of token ids")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--stop-id", type=int, action="append", default=[])
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = load_model(a.checkpoint)
    if a.bench:
        print(json.dumps(bench(model, a.batch, a.prompt_len, a.max_new_tokens, a.repeat)))
        return 0
    for prompt in json.load(open(a.prompts)):
        tokens = greedy(model, prompt, a.max_new_tokens, set(a.stop_id), not a.no_cache)
        print(json.dumps({"tokens": tokens}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
