"""What the language-model evaluation tests read back (shared by
tests/e2e/eval/compress_export_gpt_test.sh and tests/e2e/model/llama_train_test.sh)."""
import glob
import json

import h5py
import numpy as np
import torch


def windows(val_h5, n, seq_len):
    """The first `n` evaluation sequences of a token file and their targets, as `hpctrain eval`
    reads them: consecutive windows of `seq_len` tokens, targets shifted by one."""
    with h5py.File(val_h5) as f:
        tokens = torch.from_numpy(f["tokens"][: n * seq_len + 1].astype(np.int64))
    x = torch.stack([tokens[i * seq_len: (i + 1) * seq_len] for i in range(n)])
    y = torch.stack([tokens[i * seq_len + 1: (i + 1) * seq_len + 1] for i in range(n)])
    return x, y


def result(results_dir, step):
    """The one evaluation result JSON of checkpoint step `step` under `results_dir`."""
    [path] = glob.glob(f"{results_dir}/**/step_{step:08d}*.json", recursive=True)
    with open(path) as f:
        return json.load(f)
