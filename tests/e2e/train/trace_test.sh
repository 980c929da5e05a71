#!/usr/bin/env bash
# logging.trace: trace.json is valid Trace Event Format with every rank (a process each, named
# with its host) and lane (a thread each), strictly nested slices per lane; with
# parallel.overlap true some bucket all-reduce overlaps backward, with false none does; `hpctrain
# trace summary` adds up to the step time and matches the slices; a window over the size bound
# is refused at start with the estimate. At tp=2 (GPT on dp=1 x tp=2) every rank records its
# tensor-parallel collectives on its `comm tp` lane, the same sequence on both ranks of the group,
# inside forward, backward and the gradient sync; the summary counts them as exposed
# communication, not compute, and still adds up to the step time. With a sharded optimizer state
# the parameter all-gather runs on into the next forward, which waits for it there.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
util=$HPCTRAIN_SOURCE_DIR/tests/e2e/train  # trace_util.py: the trace reader the checks share
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set run.max_steps=12 --set "model.hidden=[256,128]"
  --set parallel.bucket_mb=0 --set logging.trace.start_step=5 --set logging.trace.steps=3
  --set eval.every_steps=6 --set checkpoint.every_steps=6 --set data.batch_size=16)

for overlap in true false; do
  expect_exit 0 "$TMP/train-$overlap.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
    --set "run.dir=$TMP/$overlap" --set parallel.overlap=$overlap
  expect_grep "trace of steps 5..7 written" "$TMP/train-$overlap.txt"
  expect_exit 0 "$TMP/summary-$overlap.json" "$HPCTRAIN_BIN" -q trace summary "$TMP/$overlap" --json
  expect_exit 0 "$TMP/summary-$overlap.txt" "$HPCTRAIN_BIN" -q trace summary "$TMP/$overlap"
  expect_grep "step 6: slowest rank [01]" "$TMP/summary-$overlap.txt"
  PYTHONPATH=$util $PY - "$TMP/$overlap/trace.json" "$TMP/summary-$overlap.json" "$overlap" <<'PY' ||
import json, sys
import trace_util
lanes, slices, summary = trace_util.load(sys.argv[1], sys.argv[2])
overlap = sys.argv[3] == "true"
procs = {e["pid"]: e["args"]["name"] for e in json.load(open(sys.argv[1]))["traceEvents"]
         if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(procs) == [0, 1] and all("(" in n for n in procs.values()), procs
for pid in (0, 1):
    names = {n for (p, _), n in lanes.items() if p == pid}
    assert {"main", "comm dp", "checkpoint writer"} <= names, (pid, names)
trace_util.assert_nested(slices)
for pid in (0, 1):
    main = slices["main", pid]
    steps = sorted(s[3]["step"] for s in main if s[2] == "step")
    assert steps == [5, 6, 7], steps
    names = {s[2] for s in main}
    assert {"data wait", "input copy", "forward", "backward", "gradient sync", "optimizer", "eval",
            "checkpoint save"} <= names, names
    writer = slices["checkpoint writer", pid]
    # Data-parallel rank 0 holds what is saved and copies it; every rank takes part in the write.
    want = {"checkpoint copy", "checkpoint write"} if pid == 0 else {"checkpoint write"}
    assert want <= {s[2] for s in writer}, writer
    comm = slices["comm dp", pid]
    reduces = [s for s in comm if s[2] == "all_reduce"]
    assert len(reduces) >= 3 * 6, len(reduces)  # 6 parameter buckets per step
    backward = [s for s in main if s[2] == "backward"]
    hidden = sum(max(0, min(a[1], b[1]) - max(a[0], b[0])) for a in reduces for b in backward)
    if overlap:
        assert hidden > 0, "no all-reduce overlaps backward with parallel.overlap true"
    else:
        assert hidden == 0, ("all-reduce overlaps backward with parallel.overlap false", hidden)
# The summary adds up and agrees with the slices.
rows = summary["rows"]
assert sorted((r["step"], r["rank"]) for r in rows) == [(s, r) for s in (5, 6, 7) for r in (0, 1)], rows
for r in rows:
    parts = r["compute_ms"] + r["exposed_ms"] + r["data_wait_ms"] + r["other_ms"]
    assert abs(parts - r["step_ms"]) < 1e-6, r
    assert r["other_ms"] >= -1e-6 and r["hidden_ms"] <= r["comm_ms"] + 1e-9, r
    main = slices["main", r["rank"]]
    step = [s for s in main if s[2] == "step" and s[3]["step"] == r["step"]][0]
    inside = [s for s in main if s[0] >= step[0] and s[1] <= step[1]]
    compute = sum(s[1] - s[0] for s in inside if s[2] in ("input copy", "forward", "backward", "optimizer"))
    assert abs(compute / 1000 - r["compute_ms"]) < 1e-6, (compute, r)
    assert abs((step[1] - step[0]) / 1000 - r["step_ms"]) < 1e-6, r
if overlap:
    assert any(r["hidden_ms"] > 0 for r in rows), rows
else:
    assert all(r["hidden_ms"] == 0 for r in rows), rows
strag = summary["stragglers"]
assert [s["step"] for s in strag] == [5, 6, 7], strag
for s in strag:
    mine = [r for r in rows if r["step"] == s["step"]]
    assert s["step_ms"] == max(r["step_ms"] for r in mine), (s, mine)
print("trace checks passed, overlap", overlap)
PY
    fail "trace of the run with parallel.overlap=$overlap"
done

# A sharded optimizer state on dp=2: the parameter all-gather of each update runs on into the next
# step's forward, which waits there for each layer's buckets ("parameter gather wait" slices
# inside forward); the summary counts those waits as exposed communication, not compute.
expect_exit 0 "$TMP/train-sharded.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/sharded" --set parallel.shard_optimizer=true \
  --set "model.hidden=[2048,2048]"  # gathers long enough for forward to wait while they run
expect_exit 0 "$TMP/summary-sharded.json" "$HPCTRAIN_BIN" -q trace summary "$TMP/sharded" --json
PYTHONPATH=$util $PY - "$TMP/sharded/trace.json" "$TMP/summary-sharded.json" <<'PY' || fail "trace of the sharded run"
import sys
import trace_util
from trace_util import inside
lanes, slices, summary = trace_util.load(sys.argv[1], sys.argv[2])
for pid in (0, 1):
    main = slices[("main", pid)]
    gathers = [s for s in slices[("comm dp", pid)] if s[2] == "all_gather"]
    assert len(gathers) >= 2 * 6, ("one all-gather per bucket and update", len(gathers))
    forwards = [s for s in main if s[2] == "forward"]
    waits = [s for s in main if s[2] == "parameter gather wait"]
    # Steps 5 and 6 follow a step without evaluation or save, so their forward finds the gather
    # in flight (after step 6 the evaluation waits for it first).
    waiting = [f for f in forwards if any(inside(w, f) for w in waits)]
    assert len(waiting) >= 2, ("forward did not wait for the gather", pid, waits, forwards)
    for r in summary["rows"]:
        if r["rank"] != pid:
            continue
        step = [s for s in main if s[2] == "step" and s[3].get("step") == r["step"]][0]
        mine = [s for s in main if inside(s, step)]
        compute = sum(s[1] - s[0] for s in mine
                      if s[2] in ("input copy", "forward", "backward", "optimizer"))
        waited = sum(s[1] - s[0] for s in mine if s[2] == "parameter gather wait")
        assert abs((compute - waited) / 1000 - r["compute_ms"]) < 1e-6, (compute, waited, r)
        assert r["exposed_ms"] >= waited / 1000 - 1e-6, (waited, r)
        # Hidden: dp communication behind forward and backward, less while forward waits for it.
        ov = lambda a, b: max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
        comm = slices[("comm dp", pid)]  # the last update's gather runs into this step
        behind = [s for s in mine if s[2] in ("forward", "backward")]
        stalled = [w for w in mine if w[2] == "parameter gather wait" and
                   any(inside(w, f) for f in behind)]
        hidden = sum(ov(c, f) for c in comm for f in behind) - \
            sum(ov(c, w) for c in comm for w in stalled)
        assert abs(hidden / 1000 - r["hidden_ms"]) < 1e-3, (hidden, r)
        parts = r["compute_ms"] + r["exposed_ms"] + r["data_wait_ms"] + r["other_ms"]
        assert abs(parts - r["step_ms"]) < 1e-6, r
print("sharded trace checks passed")
PY

# Tensor parallelism: a small GPT (2 layers, width 64, context 32) on dp=1 x tp=2.
fortunes=/usr/share/games/fortunes/science
[[ -f $fortunes ]] || fail "$fortunes missing: apt-get install fortunes (scripts/setup.sh)"
expect_exit 0 "$TMP/prepare-text.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes" \
  --out "$TMP/text" --val-fraction 0.05
expect_exit 0 "$TMP/train-tp.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny-tp2.yaml" --set "data.train=$TMP/text/train.h5" \
  --set "data.val=$TMP/text/val.h5" --set "run.dir=$TMP/tp" --set run.max_steps=6 \
  --set model.layers=2 --set model.width=64 --set model.seq_len=32 --set data.batch_size=4 \
  --set eval.every_steps=0 --set eval.at_end=false --set checkpoint.at_end=false \
  --set logging.trace.start_step=3 --set logging.trace.steps=3
expect_grep "on dp=1 x tp=2" "$TMP/train-tp.txt"
expect_grep "trace of steps 3..5 written" "$TMP/train-tp.txt"
expect_exit 0 "$TMP/summary-tp.json" "$HPCTRAIN_BIN" -q trace summary "$TMP/tp" --json
expect_exit 0 "$TMP/summary-tp.txt" "$HPCTRAIN_BIN" -q trace summary "$TMP/tp"
expect_grep "exposed +tp +data wait" "$TMP/summary-tp.txt"
PYTHONPATH=$util $PY - "$TMP/tp/trace.json" "$TMP/summary-tp.json" <<'PY' || fail "trace of the tensor-parallel run"
import sys
import trace_util
from trace_util import inside
lanes, slices, summary = trace_util.load(sys.argv[1], sys.argv[2])
trace_util.assert_nested(slices)
sequences = []
for pid in (0, 1):
    main, tp = slices["main", pid], slices["comm tp", pid]
    steps = [s for s in main if s[2] == "step"]
    assert len(steps) == 3, steps
    assert tp, f"rank {pid}: no tensor-parallel collective on a 'comm tp' lane"
    # 2 blocks: attention and MLP each all-reduce once forward (row parallel) and once backward
    # (column parallel), plus the embedding and the vocab-parallel cross entropy.
    per_step = [[s for s in tp if inside(s, step)] for step in steps]
    assert all(len(p) >= 8 for p in per_step), [len(p) for p in per_step]
    assert all(p[0][2] == "all_reduce" for p in per_step), per_step
    phases = [s for s in main if s[2] in ("forward", "backward", "gradient sync")]
    for s in (s for p in per_step for s in p):
        assert any(inside(s, ph) for ph in phases), ("tp collective outside forward/backward/sync", s)
    sequences.append([[s[2] for s in p] for p in per_step])
assert sequences[0] == sequences[1], "the two ranks of the tp group saw different collectives"
COMPUTE = ("input copy", "forward", "backward", "optimizer")
for r in summary["rows"]:
    parts = r["compute_ms"] + r["exposed_ms"] + r["data_wait_ms"] + r["other_ms"]
    assert abs(parts - r["step_ms"]) < 1e-6, r
    assert r["other_ms"] >= -1e-6 and r["hidden_ms"] <= r["comm_ms"] + 1e-9, r
    main, tp = slices["main", r["rank"]], slices["comm tp", r["rank"]]
    step = [s for s in main if s[2] == "step"][r["step"] - 3]
    compute = [s for s in main if s[2] in COMPUTE and inside(s, step)]
    # The tp collectives inside compute phases (they are serial on the lane, so a plain sum).
    tp_wait = sum(min(t[1], c[1]) - max(t[0], c[0]) for t in tp for c in compute
                  if min(t[1], c[1]) > max(t[0], c[0]))
    assert tp_wait > 0 and abs(tp_wait / 1000 - r["tp_ms"]) < 1e-6, (tp_wait, r)
    assert abs((sum(c[1] - c[0] for c in compute) - tp_wait) / 1000 - r["compute_ms"]) < 1e-6, r
    assert r["exposed_ms"] >= r["tp_ms"] - 1e-9 and r["comm_ms"] >= r["tp_ms"] - 1e-9, r
print("tp trace checks passed:", [len(p) for p in sequences[0]], "tp collectives per step")
PY

# logging.profile: LibTorch's operator profiler for steps 3..4 (step 2 its discarded warmup), per
# rank; no timeline asked for, so no trace.json.
expect_exit 0 "$TMP/train-profile.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/profile" --set logging.trace.steps=0 --set logging.profile.start_step=3 \
  --set logging.profile.steps=2 --set logging.profile.warmup=1 --set run.max_steps=6
expect_grep "operator profile of steps 3..4 written to .*/profile/rank_0.json" "$TMP/train-profile.txt"
[[ -e $TMP/profile/trace.json ]] && fail "trace.json written without logging.trace"
$PY - "$TMP/profile/profile" <<'PY' || fail "operator profiles"
import json, sys
for rank in (0, 1):
    events = json.load(open(f"{sys.argv[1]}/rank_{rank}.json"))
    if isinstance(events, dict):
        events = events["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert any(n.startswith("aten::") for n in names), sorted(names)[:20]
    # Two steps of MLP 784-256-128-10: three linear layers forward (addmm), their backward (mm).
    assert sum(1 for e in events if e.get("name") == "aten::addmm" and e.get("ph") in ("X", "B")) >= 6, rank
PY

# Over the size bound: refused at start, naming the estimate and the key.
expect_exit 2 "$TMP/too-big.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/too-big" --set logging.trace.steps=100000000
expect_grep "logging.trace: 100000000 steps x 2 ranks .* more than logging.trace_max_mb = 64" \
  "$TMP/too-big.txt"
[[ -e $TMP/too-big/trace.json ]] && fail "a refused trace was written"
# No trace: the summary says how to make one.
expect_exit 2 "$TMP/no-trace.txt" "$HPCTRAIN_BIN" trace summary "$TMP/too-big"
expect_grep "trace.json not found: trace a run with logging.trace" "$TMP/no-trace.txt"
finish
