#!/usr/bin/env bash
# The resource monitor: a run that holds a known extra buffer (debug.extra_memory_mb) records a
# resident-memory peak higher by that amount (within 10%) than the same run without it, in
# metrics.jsonl (max over ranks) and in the ledger's per-rank peaks; every train record carries
# min <= mean <= max of CPU, memory and peak over the ranks. The ledger's tensor peak (live host
# tensors) lies between the training state and the resident peak and ignores the extra buffer.
source "$(dirname "$0")/../lib.sh"
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set run.max_steps=20 --set eval.at_end=false
  --set eval.every_steps=0 --set checkpoint.at_end=false --set data.batch_size=16)
extra_mb=256
expect_exit 0 "$TMP/base.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/base"
expect_exit 0 "$TMP/extra.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/extra" --set debug.extra_memory_mb=$extra_mb

$PY - "$TMP/base" "$TMP/extra" "$extra_mb" <<'PY' || fail "recorded memory peaks"
import json, sys
base, extra, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
want = mb * 1048576
def last_train(run):
    rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    train = [r for r in rows if r["type"] == "train"]
    for r in train:
        for k in ("cpu_percent", "rss_bytes", "peak_rss_bytes"):
            v = r["resources"][k]
            assert 0 <= v["min"] <= v["mean"] <= v["max"], (k, v)
        assert r["resources"]["rss_bytes"]["min"] > 1e6, r
    return train[-1]["resources"]
a, b = last_train(base), last_train(extra)
rise = b["peak_rss_bytes"]["max"] - a["peak_rss_bytes"]["max"]
assert abs(rise - want) < 0.1 * want, ("metrics.jsonl peak rose by", rise, "not", want)
rise = b["peak_rss_bytes"]["min"] - a["peak_rss_bytes"]["min"]
assert abs(rise - want) < 0.1 * want, ("metrics.jsonl peak (min over ranks) rose by", rise)
la = json.load(open(f"{base}/ledger.json"))["peak_rss_bytes_per_rank"]
lb = json.load(open(f"{extra}/ledger.json"))["peak_rss_bytes_per_rank"]
for x, y in zip(la, lb):
    assert abs((y - x) - want) < 0.1 * want, ("ledger peak rose by", y - x, "not", want)
print("peak rise per rank (MiB):", [(y - x) / 1048576 for x, y in zip(la, lb)])
# The tensor peak (counting CPU allocator) holds at least the training state, stays below the
# resident peak, and ignores the extra buffer, which is no tensor.
for run in (base, extra):
    ledger = json.load(open(f"{run}/ledger.json"))
    m = ledger["memory_per_rank"]
    state = m["parameter_bytes"] + m["gradient_bytes"] + m["optimizer_state_bytes"]
    for t, r in zip(ledger["peak_tensor_bytes_per_rank"], ledger["peak_rss_bytes_per_rank"]):
        assert state < t < r, ("tensor peak", t, "state", state, "rss peak", r)
ta = json.load(open(f"{base}/ledger.json"))["peak_tensor_bytes_per_rank"]
tb = json.load(open(f"{extra}/ledger.json"))["peak_tensor_bytes_per_rank"]
for x, y in zip(ta, tb):
    assert abs(y - x) < 0.01 * want, ("tensor peak moved by", y - x, "with a non-tensor buffer")
PY
finish
