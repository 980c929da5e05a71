#!/usr/bin/env bash
# Multiple-choice evaluation (docs/EVAL.md, "Multiple choice"): 200 examples in HellaSwag's layout
# generated from Debian's fortunes (the true continuation of a line among three from other
# lines), a tiny byte-level gpt trained a few steps, then
#  - `hpctrain eval --task multiple-choice` at 1, 2 and 3 ranks and at tp = 2: accuracy and
#    length-normalised accuracy equal to the PyTorch reference's (scripts/
#    multiple_choice_reference.py: one sequence at a time, no padding), the results in the store
#    (step file tagged mc-<name>-<checksum>, results.jsonl) and a rerun skipped;
#  - eval.tasks: the periodic evaluation records the task in metrics.jsonl ("tasks"), the offline
#    evaluation of the same checkpoint carries it in its result, with the same numbers; so does
#    the offline watcher (eval --watch) of the finished run, equal to the reference's;
#  - the llama family: a tiny random Llama-3 Hugging Face folder (grouped-query attention) trained
#    20 steps from model.init_from with the task in its periodic evaluation: `hpctrain eval
#    --task multiple-choice` at 1 rank and at tp = 2 chooses, example by example, the endings
#    scripts/multiple_choice_reference.py --llama chooses on the checkpoint's export, and the
#    offline evaluation at tp = 2 gives training's val loss and task numbers; int8 and pruned
#    evaluation at 1 rank compress every linear layer, beside training's float32 loss;
#  - bad files: exit 3 naming the line and the field.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
fortunes=/usr/share/games/fortunes
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes/science" \
  "$fortunes/wisdom" --out "$TMP/text" --val-fraction 0.1 || finish
"$PY" - "$fortunes/fortunes" "$TMP/set.jsonl" <<'PY' || fail "cannot write the examples"
import json, random, sys
rng = random.Random(3)
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8", errors="replace")
         if len(l.strip()) > 30 and l.strip() != "%"]
rng.shuffle(lines)
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for i in range(200):
        line = lines[i]
        cut = rng.randint(10, len(line) - 12)
        ctx, true = line[:cut], line[cut:].strip()
        others = [l[rng.randint(5, len(l) - 8):].strip() for l in rng.sample(lines[200:], 3)]
        label = rng.randrange(4)
        endings = others[:label] + [true] + others[label:]
        out.write(json.dumps({"ind": i, "activity_label": "fortunes", "ctx": ctx,
                              "endings": endings, "label": label, "split": "val"}) + "\n")
PY
run=$TMP/run
task="[{name: fortunes, type: multiple-choice, path: \"$TMP/set.jsonl\", max_examples: 60, batch_size: 6}]"
expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set model.layers=2 --set model.width=32 \
  --set model.heads=2 --set model.seq_len=64 --set "data.train=$TMP/text/train.h5" \
  --set "data.val=$TMP/text/val.h5" --set "run.dir=$run" --set run.max_steps=40 \
  --set data.batch_size=8 --set optim.lr=0.01 --set schedule.warmup_steps=5 \
  --set eval.every_steps=40 --set eval.max_samples=64 --set "eval.tasks=$task" \
  --set checkpoint.every_steps=40 --set logging.progress=plain || finish
expect_grep "eval step 40 task fortunes: accuracy [0-9.]+, accuracy_norm [0-9.]+ \(60 examples\)" \
  "$TMP/train.txt"
ckpt=$run/checkpoints/step_00000040

"$PY" "$HPCTRAIN_SOURCE_DIR/scripts/multiple_choice_reference.py" --checkpoint "$ckpt" \
  --data "$TMP/set.jsonl" >"$TMP/ref.json" || fail "the reference failed"
for launch in "1" "2" "3" "2 --tp 2"; do
  np=${launch%% *}
  extra=()
  [[ $launch == *--tp* ]] && extra=(--tp 2)
  name=np${np}${extra[*]:+_tp2}
  cmd=("$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --task multiple-choice "$TMP/set.jsonl"
    --results "$TMP/res_$name" --batch-size 7 "${extra[@]}")
  ((np > 1)) && cmd=(mpirun_np "$np" "${cmd[@]}")
  expect_exit 0 "$TMP/mc_$name.txt" "${cmd[@]}" || continue
  expect_grep "eval step 40 \(multiple choice, .*set.jsonl\): accuracy [0-9.]+, accuracy_norm [0-9.]+ \(200 examples\)" \
    "$TMP/mc_$name.txt"
  "$PY" - "$TMP/res_$name" "$TMP/ref.json" <<'PY' || fail "$name: not the reference's accuracy"
import glob, json, sys
[path] = glob.glob(f"{sys.argv[1]}/step_00000040.mc-set-*.json")
r = json.load(open(path))
ref = json.load(open(sys.argv[2]))
for k in ("examples", "correct", "correct_norm", "accuracy", "accuracy_norm"):
    assert r[k] == ref[k], (k, r[k], ref[k])
assert r["metric"] == "accuracy" and r["split"] == "multiple-choice", r
lines = [json.loads(l) for l in open(f"{sys.argv[1]}/results.jsonl")]
assert len(lines) == 1 and lines[0]["correct"] == ref["correct"], lines
print(path.split("/")[-1], f"accuracy {r['accuracy']} ({r['correct']}/200), accuracy_norm",
      f"{r['accuracy_norm']} ({r['correct_norm']}/200), as the reference; grid {r['grid']}")
PY
done
expect_exit 0 "$TMP/mc_again.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --task multiple-choice \
  "$TMP/set.jsonl" --results "$TMP/res_np1" --batch-size 7
expect_grep "already evaluated" "$TMP/mc_again.txt"

# eval.tasks: metrics.jsonl during training, the offline result of the same checkpoint, and
# --task with --max-samples 60 give the same numbers.
expect_exit 0 "$TMP/offline.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --results "$TMP/offline"
expect_grep "eval step 40 task fortunes: accuracy" "$TMP/offline.txt"
expect_exit 0 "$TMP/mc60.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --task multiple-choice \
  "$TMP/set.jsonl" --max-samples 60 --results "$TMP/res60"
"$PY" - "$run" "$TMP/offline" "$TMP/res60" <<'PY' || fail "eval.tasks numbers differ"
import glob, json, sys
run, offline, res60 = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
[ev] = [r for r in rows if r.get("type") == "eval" and r["step"] == 40]
periodic = ev["tasks"]["fortunes"]
[path] = glob.glob(f"{offline}/step_00000040.json")
stored = json.load(open(path))["tasks"]["fortunes"]
[path] = glob.glob(f"{res60}/step_00000040.mc-set-*.json")
task = json.load(open(path))
for k in ("examples", "correct", "correct_norm", "accuracy", "accuracy_norm"):
    assert periodic[k] == stored[k] == task[k], (k, periodic[k], stored[k], task[k])
assert periodic["examples"] == 60
print("eval.tasks in metrics.jsonl, in the offline result and --task --max-samples 60 agree:",
      {k: periodic[k] for k in ("correct", "correct_norm")})
PY

# The offline watcher (eval --watch) scores the run's eval.tasks too: on the finished run it
# evaluates step 40 and stops at the completion marker; its result carries the task with the
# PyTorch reference's numbers on the task's 60 examples (max_examples: the file's first 60).
head -n 60 "$TMP/set.jsonl" >"$TMP/set60.jsonl"
"$PY" "$HPCTRAIN_SOURCE_DIR/scripts/multiple_choice_reference.py" --checkpoint "$ckpt" \
  --data "$TMP/set60.jsonl" >"$TMP/ref60.json" || fail "the reference failed on 60 examples"
expect_exit 0 "$TMP/watch.txt" "$HPCTRAIN_BIN" eval --watch "$run" --poll 0.2 --timeout 30 \
  --results "$TMP/watch"
expect_grep "eval step 40 task fortunes: accuracy [0-9.]+, accuracy_norm [0-9.]+ \(60 examples\)" \
  "$TMP/watch.txt"
expect_grep "watch ended: training is complete .*; 1 checkpoint\(s\) evaluated, 0 already" \
  "$TMP/watch.txt"
"$PY" - "$TMP/watch" "$TMP/ref60.json" "$TMP/res60" <<'PY' || fail "eval --watch: task numbers differ"
import glob, json, sys
watch, ref60, res60 = sys.argv[1:]
[path] = glob.glob(f"{watch}/step_00000040.json")
watched = json.load(open(path))["tasks"]["fortunes"]
ref = json.load(open(ref60))
[path] = glob.glob(f"{res60}/step_00000040.mc-set-*.json")
task = json.load(open(path))
for k in ("examples", "correct", "correct_norm", "accuracy", "accuracy_norm"):
    assert watched[k] == ref[k] == task[k], (k, watched[k], ref[k], task[k])
assert watched["examples"] == 60, watched
lines = [json.loads(l) for l in open(f"{watch}/results.jsonl")]
assert [l["step"] for l in lines] == [40] and lines[0]["tasks"]["fortunes"] == watched, lines
print("eval --watch: task fortunes as the reference and --task on 60 examples:",
      {k: watched[k] for k in ("correct", "correct_norm")})
PY

# The llama family: a tiny random Llama-3 Hugging Face folder (byte vocabulary, 4 query heads
# sharing 2 kv heads) from scripts/llama_torch_reference.py, trained 20 steps from model.init_from
# on 2 ranks with a periodic evaluation (val loss and the task) and a checkpoint at step 20.
lref=$HPCTRAIN_SOURCE_DIR/scripts/llama_torch_reference.py
"$PY" "$lref" --make-folder "$TMP/llama" --arch llama3 --kv-heads 2 --vocab 256 ||
  fail "writing the llama folder failed"
cat >"$TMP/llama.yaml" <<EOF
run: {dir: $TMP/llama_run, seed: 7, max_steps: 20}
model: {name: llama, seq_len: 64, init_from: $TMP/llama}
data: {train: $TMP/text/train.h5, val: $TMP/text/val.h5, batch_size: 8}
optim: {name: adamw, lr: 0.003, weight_decay: 0.1, grad_clip: 1.0}
schedule: {name: constant, warmup_steps: 0}
eval: {every_steps: 20, max_samples: 64, batch_size: 16, tasks: $task}
checkpoint: {every_steps: 20}
logging: {every_steps: 10, progress: plain}
EOF
expect_exit 0 "$TMP/llama_train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$TMP/llama.yaml" || finish
expect_grep "eval step 20 task fortunes: accuracy [0-9.]+, accuracy_norm [0-9.]+ \(60 examples\)" \
  "$TMP/llama_train.txt"
lckpt=$TMP/llama_run/checkpoints/step_00000020
# The reference reads the checkpoint exported as a Hugging Face folder (bitwise: e2e_llama_hf).
expect_exit 0 "$TMP/llama_export.txt" "$HPCTRAIN_BIN" export "$lckpt" --format hf \
  --out "$TMP/llama_export"
"$PY" "$HPCTRAIN_SOURCE_DIR/scripts/multiple_choice_reference.py" --llama "$TMP/llama_export" \
  --context 64 --data "$TMP/set.jsonl" >"$TMP/llama_ref.json" || fail "the llama reference failed"
for launch in "1" "2 --tp 2"; do
  np=${launch%% *}
  extra=()
  [[ $launch == *--tp* ]] && extra=(--tp 2)
  name=llama_np${np}${extra[*]:+_tp2}
  expect_exit 0 "$TMP/mc_$name.txt" mpirun_np "$np" "$HPCTRAIN_BIN" eval --checkpoint "$lckpt" \
    --task multiple-choice "$TMP/set.jsonl" --results "$TMP/res_$name" --batch-size 7 \
    "${extra[@]}" || continue
  "$PY" - "$TMP/res_$name" "$TMP/llama_ref.json" <<'PY' || fail "$name: not the reference's choices"
import glob, json, sys
[path] = glob.glob(f"{sys.argv[1]}/step_00000020.mc-set-*.json")
r = json.load(open(path))
ref = json.load(open(sys.argv[2]))
for k in ("examples", "correct", "correct_norm", "accuracy", "accuracy_norm", "chosen", "chosen_norm"):
    assert r[k] == ref[k], (k, r[k], ref[k])
print(path.split("/")[-1], "llama: the reference's chosen endings for all 200 examples, accuracy",
      f"{r['accuracy']}, accuracy_norm {r['accuracy_norm']}; grid {r['grid']}")
PY
done
# The offline evaluation of the checkpoint (val loss, the task) equals the periodic one of step 20.
expect_exit 0 "$TMP/llama_offline.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$lckpt" \
  --tp 2 --results "$TMP/llama_offline"
"$PY" - "$TMP/llama_run" "$TMP/llama_offline" <<'PY' || fail "llama: offline evaluation differs from training's"
import json, sys
run, offline = sys.argv[1:]
[ev] = [r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r.get("type") == "eval"]
r = json.load(open(f"{offline}/step_00000020.json"))
assert ev["step"] == 20 and r["samples"] == ev["samples"] == 64, (ev, r)
assert abs(r["loss"] - ev["loss"]) <= 1e-6 * abs(ev["loss"]), (r["loss"], ev["loss"])
assert r["accuracy"] == ev["accuracy"], (r["accuracy"], ev["accuracy"])
for k in ("examples", "correct", "correct_norm"):
    assert r["tasks"]["fortunes"][k] == ev["tasks"]["fortunes"][k], k
print(f"llama: offline eval at tp 2 loss {r['loss']:.6f} (training's {ev['loss']:.6f}),",
      f"accuracy {r['accuracy']}, task {r['tasks']['fortunes']['correct']}/60 as training's")
PY

# int8 and pruned evaluation of the llama at 1 rank: every linear layer (q, k, v, o, gate_up, down
# of each block, the untied head) int8, the float32 side equal to training's val loss, and a small
# loss drop that is not zero (the compressed weights are the ones evaluated).
for c in "q8 --quantize int8" "p30 --prune 0.3"; do
  read -r name opts <<<"$c"
  # shellcheck disable=SC2086  # opts: an option and its value
  expect_exit 0 "$TMP/llama_$name.txt" "$HPCTRAIN_BIN" eval --checkpoint "$lckpt" $opts \
    --results "$TMP/llama_$name"
done
"$PY" - "$TMP/llama_run" "$TMP/llama_q8" "$TMP/llama_p30" <<'PY' || fail "llama: compressed evaluation is wrong"
import glob, json, sys
run, q8, p30 = sys.argv[1:]
[ev] = [r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r.get("type") == "eval"]
for d, kind in ((q8, "int8"), (p30, "prune0.3")):
    [path] = glob.glob(f"{d}/step_00000020.{kind}.json")
    r = json.load(open(path))
    c = r["compression"]
    assert abs(c["float32"]["loss"] - ev["loss"]) <= 1e-6 * ev["loss"], (c["float32"]["loss"], ev["loss"])
    drop = c["float32"]["drop"]["loss_relative"]
    assert drop != 0 and abs(drop) < 0.05, drop
    layers = {l["layer"]: l for l in c["layers"]}
    names = [f"blocks.{i}.{n}" for i in range(4) for n in ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate_up", "mlp.down")] + ["lm_head"]
    assert sorted(layers) == sorted(names), sorted(layers)
    if kind == "int8":
        assert all(l["int8"] for l in layers.values()), layers
    else:
        assert abs(c["sparsity"] - 0.3) < 0.005 and all(l["sparsity"] > 0 for l in layers.values()), c
    print(f"llama {kind}: loss {r['loss']:.6f}, float32 {c['float32']['loss']:.6f} (training's",
          f"{ev['loss']:.6f}), relative drop {drop:.5f}, {len(layers)} linear layers")
PY

# Bad files: one message naming the line and field, exit 3.
bad() {  # NAME LINE PATTERN
  printf '%s\n' "$(head -1 "$TMP/set.jsonl")" "$2" >"$TMP/$1.jsonl"
  expect_exit 3 "$TMP/bad_$1.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" \
    --task multiple-choice "$TMP/$1.jsonl" --results "$TMP/bad_$1" &&
    expect_grep "$3" "$TMP/bad_$1.txt"
}
bad label '{"ctx": "a", "endings": ["b", "c"], "label": 2}' "label.jsonl' line 2: field label = 2 is not an index of the 2 endings"
bad noctx '{"endings": ["b", "c"], "label": 0}' "line 2: field ctx \(the context, a string\) is missing"
bad one '{"ctx": "a", "endings": ["b"], "label": 0}' "line 2: field endings must be a list of at least two"
bad json '{"ctx": "a", "endings": ' "line 2: not JSON"
mkfifo "$TMP/fifo.jsonl"
expect_exit 3 "$TMP/bad_fifo.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" \
  --task multiple-choice "$TMP/fifo.jsonl" --results "$TMP/bad_fifo"
expect_exit 2 "$TMP/bad_kind.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --task cloze "$TMP/set.jsonl"
expect_grep "--task takes a kind and a file: --task multiple-choice FILE.jsonl" "$TMP/bad_kind.txt"
finish
