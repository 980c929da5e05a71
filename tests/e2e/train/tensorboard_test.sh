#!/usr/bin/env bash
# logging.tensorboard: the event file that rank 0 writes is read back by an independent reader
# (tensorboard_reader.py: protobuf from tb_event.proto, CRC-32C from crcmod) that checks both
# CRCs of every record and finds the values of metrics.jsonl (train, eval, checkpoint records
# and the resource monitor's fields); offline `hpctrain eval` adds its results under
# offline_eval/; a run killed with SIGKILL leaves a file whose records all decode.
source "$(dirname "$0")/../lib.sh"
export PYTHONDONTWRITEBYTECODE=1  # the reader is imported from the source tree
data=$HPCTRAIN_TEST_DATA/fashion-mnist
reader=$HPCTRAIN_SOURCE_DIR/tests/e2e/train/tensorboard_reader.py
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set logging.tensorboard=true)

expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/run" --set data.batch_size=16 --set checkpoint.every_steps=30
expect_exit 0 "$TMP/eval.txt" "$HPCTRAIN_BIN" eval --checkpoints "$TMP/run"

$PY - "$reader" "$TMP/run" <<'PY' || fail "event file contents"
import glob, json, math, sys
sys.path.insert(0, __import__("os").path.dirname(sys.argv[1]))
import tensorboard_reader as tb
run = sys.argv[2]
files = sorted(glob.glob(f"{run}/tensorboard/events.out.tfevents.*"))
assert len(files) == 2, files  # the training run's and the offline evaluation's
events = [e for f in files for e in tb.events(f)]
firsts = [tb.events(f)[0] for f in files]
assert all(e.get("file_version") == "brain.Event:2" for e in firsts), firsts
scalars = {}
for e in events:
    for tag, v in e.get("values", {}).items():
        scalars[(tag, e["step"])] = v
def close(a, b):  # simple_value is a float32
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-30)
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
checked = 0
for r in rows:
    if r["type"] not in ("train", "eval", "checkpoint"):
        continue
    def walk(prefix, obj):
        global checked
        for k, v in obj.items():
            if k in ("type", "step", "epoch", "time"):
                continue
            if isinstance(v, bool) or isinstance(v, str):
                continue
            if isinstance(v, dict):
                walk(prefix + k + "/", v)
            elif isinstance(v, (int, float)):
                key = (prefix + k, r["step"])
                assert key in scalars, (key, sorted(scalars)[:20])
                assert close(scalars[key], v), (key, scalars[key], v)
                checked += 1
    walk(r["type"] + "/", r)
train = [r for r in rows if r["type"] == "train"]
assert len(train) == 6 and checked > 6 * 12, (len(train), checked)
for tag in ("train/loss", "train/lr", "train/grad_norm", "train/samples_per_s", "train/data_wait",
            "train/comm_time", "train/resources/rss_bytes/max", "eval/accuracy",
            "checkpoint/save_seconds"):
    assert any(t == tag for t, _ in scalars), tag
results = [json.loads(l) for l in open(f"{run}/eval/results.jsonl")]
assert [r["step"] for r in results] == [30, 60], results
for r in results:
    assert close(scalars[("offline_eval/accuracy", r["step"])], r["accuracy"]), r
    assert close(scalars[("offline_eval/loss", r["step"])], r["loss"]), r
print(f"{len(events)} events, {checked} values match metrics.jsonl")
PY

# SIGKILL in the middle of a run: every record in the file still decodes (one write per record).
"$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/killed" --set run.max_steps=100000 \
  --set logging.every_steps=1 --set eval.every_steps=0 >"$TMP/killed.txt" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  n=$(grep -c '"train"' "$TMP/killed/metrics.jsonl" 2>/dev/null || true)
  [[ ${n:-0} -ge 20 ]] && break
  sleep 0.1
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
ls "$TMP"/killed/tensorboard/events.out.tfevents.* >/dev/null 2>&1 || fail "no event file in the killed run"
for f in "$TMP"/killed/tensorboard/events.out.tfevents.*; do
  $PY "$reader" "$f" >"$TMP/killed-events.txt" || fail "records of the killed run's $f do not all decode"
  [[ $(grep -c '"train/loss"' "$TMP/killed-events.txt") -ge 20 ]] ||
    fail "the killed run's event file holds fewer than 20 train events"
done
finish
