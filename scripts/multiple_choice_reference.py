#!/usr/bin/python3
"""PyTorch reference for hpctrain's multiple-choice evaluation (docs/EVAL.md, "Multiple choice"):
the same checkpoint through scripts/gpt_torch_reference.py's Gpt (weights read with h5py by
scripts/load_checkpoint.py), the same HellaSwag-layout JSON lines, byte-level tokens (a token is a
byte of the UTF-8 text; data.tokenizer: bytes). Each ending is its own sequence: context tokens,
then the tokens of " " + ending, cut to the model's context from the left; its score is the sum of
log_softmax(logits)[next token] over the ending's tokens; the example is right when the labelled
ending has the highest sum (accuracy) or the highest sum per scored token (accuracy_norm), the
lowest index winning ties. One sequence at a time, no batching or padding: an independent check
of hpctrain's batched, padded, distributed scoring. A test reference only.

    /usr/bin/python3 scripts/multiple_choice_reference.py --checkpoint RUN_DIR --data set.jsonl
    /usr/bin/python3 scripts/multiple_choice_reference.py --llama HF_DIR --context 48 --data set.jsonl

--llama reads a llama-family Hugging Face folder through scripts/llama_torch_reference.py's
Reference instead of a gpt checkpoint (--context: the model.seq_len hpctrain runs it with).

Prints one JSON line: examples, correct, accuracy, correct_norm, accuracy_norm, chosen,
chosen_norm.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_generate_reference  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", help="an hpctrain gpt checkpoint or run directory")
    p.add_argument("--llama", metavar="DIR", help="a llama-family Hugging Face folder")
    p.add_argument("--context", type=int, default=0, help="--llama: the model's context")
    p.add_argument("--data", required=True)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if bool(a.checkpoint) == bool(a.llama):
        p.error("give one of --checkpoint and --llama")
    if a.llama:
        import llama_torch_reference
        model = llama_torch_reference.Reference(*llama_torch_reference.read_folder(a.llama)).eval()
        if a.context < 1:
            p.error("--llama needs --context (the model.seq_len hpctrain runs it with)")
        context = a.context
    else:
        model = gpt_generate_reference.load_model(a.checkpoint)
        context = model.o["seq_len"]
    chosen, chosen_norm, labels = [], [], []
    with torch.no_grad():
        for line in open(a.data, encoding="utf-8"):
            if not line.strip():
                continue
            ex = json.loads(line)
            ctx = list(ex["ctx"].encode("utf-8"))
            sums, norms = [], []
            for ending in ex["endings"]:
                end = list((" " + ending).encode("utf-8"))
                seq = (ctx + end)[-(context + 1):]
                first = max(1, len(seq) - len(end))
                logits = model(torch.tensor([seq[:-1]]))[0]
                logp = torch.log_softmax(logits.double(), -1)
                total = sum(logp[i - 1, seq[i]].item() for i in range(first, len(seq)))
                sums.append(total)
                norms.append(total / max(1, len(seq) - first))
            chosen.append(max(range(len(sums)), key=lambda i: (sums[i], -i)))
            chosen_norm.append(max(range(len(norms)), key=lambda i: (norms[i], -i)))
            labels.append(int(ex["label"]))
    n = len(labels)
    correct = sum(c == y for c, y in zip(chosen, labels))
    correct_norm = sum(c == y for c, y in zip(chosen_norm, labels))
    print(json.dumps({"examples": n, "correct": correct, "accuracy": correct / n,
                      "correct_norm": correct_norm, "accuracy_norm": correct_norm / n,
                      "chosen": chosen, "chosen_norm": chosen_norm}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
