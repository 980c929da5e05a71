#!/usr/bin/env bash
# hpctrain plan --calibrate on a real run: train a Fashion-MNIST MLP for STEPS steps on 2 ranks,
# plan a run of twice as many steps calibrated on it, run that, and check that the predicted
# training time and total time are within 15% of the measured ones. The runs use the same ranks,
# threads (1 each, from ctest), batch and evaluation, so like is compared with like. A third run
# repeats the first to measure the machine's own noise: when the prediction misses and identical
# runs differ by more than 10% (or 100-step intervals by more than 25%), or when the machine is
# so busy that the first run takes over 45 s, the test reports itself skipped (exit 77): a busy
# shared machine is not evidence either way.
source "$(dirname "$0")/../lib.sh"
steps=${HPCTRAIN_PLAN_TEST_STEPS:-300}
tolerance=0.15

idx=/usr/share/datasets/fashion-mnist
[[ -f $idx/train-images-idx3-ubyte.gz ]] || fail "Fashion-MNIST missing: apt-get install dataset-fashion-mnist (scripts/setup.sh)"
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare fashion-mnist --out "$TMP/fm" || finish

# One config; the two runs differ only in run.dir and run.max_steps. Evaluation once, at the end,
# on a fixed 2,000 samples, so both runs evaluate the same amount.
cat >"$TMP/mlp.yaml" <<EOF
run: {dir: $TMP/run1, epochs: 10, max_steps: $steps}
model: {name: mlp, in_features: 784, hidden: [256, 128, 100], num_classes: 10}
data: {train: $TMP/fm/train.h5, val: $TMP/fm/test.h5, batch_size: 64}
optim: {name: adam, lr: 0.001}
eval: {every_steps: 0, at_end: true, batch_size: 1000, max_samples: 2000}
checkpoint: {every_steps: 0, at_end: false}
logging: {every_steps: 100, progress: plain}
EOF
expect_exit 0 "$TMP/train1.txt" mpirun_np 2 "$HPCTRAIN_BIN" --threads 1 train -c "$TMP/mlp.yaml" \
  || finish
# These runs take a few seconds on an idle 2-core machine (~20 s with the reference BLAS). When the
# first took far longer, other work owns the cores: the runs would measure that work and run 2
# would hit expect_exit's 120 s guard. Say so and skip rather than pass or fail on noise.
total='import json, sys; print(round(json.load(open(sys.argv[1]))["wall_seconds"]["total"]))'
run1_s=$($PY -c "$total" "$TMP/run1/ledger.json")
if ((run1_s > 45 && FAILURES == 0)); then
  echo "SKIPPED: $steps steps took $run1_s s (load average $(cut -d' ' -f1-3 /proc/loadavg)):" \
    "this machine is too busy to time runs"
  exit 77
fi

# The plan for the second run: its config (with --set, as train takes it), calibrated on run 1.
expect_exit 0 "$TMP/plan.json" "$HPCTRAIN_BIN" plan -c "$TMP/mlp.yaml" \
  --set run.dir="$TMP/run2" --set run.max_steps=$((2 * steps)) --calibrate "$TMP/run1" \
  --peak-flops 1e11 --json || finish
expect_exit 0 "$TMP/plan.txt" "$HPCTRAIN_BIN" plan -c "$TMP/mlp.yaml" \
  --set run.max_steps=$((2 * steps)) --calibrate "$TMP/run1" --peak-flops 1e11
expect_grep "^calibration: $TMP/run1 \(mlp, 2 ranks x 1 threads, cpu, $steps steps\)" \
  "$TMP/plan.txt"
expect_grep "its total time, calibrated .*error" "$TMP/plan.txt"

expect_exit 0 "$TMP/train2.txt" mpirun_np 2 "$HPCTRAIN_BIN" --threads 1 train -c "$TMP/mlp.yaml" \
  --set run.dir="$TMP/run2" --set run.max_steps=$((2 * steps)) || finish
# Run 1 again: how much two identical runs differ here is the noise floor of this machine.
expect_exit 0 "$TMP/train3.txt" mpirun_np 2 "$HPCTRAIN_BIN" --threads 1 train -c "$TMP/mlp.yaml" \
  --set run.dir="$TMP/run3" || finish

$PY - "$TMP/plan.json" "$TMP/run1" "$TMP/run2" "$TMP/run3" "$steps" "$tolerance" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
run_dirs = sys.argv[2:5]
run1, run2, run3 = (json.load(open(f"{d}/ledger.json")) for d in run_dirs)
steps, tolerance = int(sys.argv[5]), float(sys.argv[6])
w, t, cal = plan["workload"], plan["time"], plan["calibration"]
# The plan counts the second run's work exactly as the trainer did.
assert w["steps"] == 2 * steps == run2["steps"], (w, run2["steps"])
assert w["train_samples"] == run2["samples_trained"], (w, run2["samples_trained"])
assert plan["flops"]["train"] == run2["flops"]["train_total"], (plan["flops"], run2["flops"])
assert w["eval_passes"] == 1 and w["eval_samples_per_pass"] == run2["samples_evaluated"] == 2000, w
# ... and the calibrating run from its recorded config and ledger.
check = cal["check"]
assert check["train_flops"]["error"] == 0, check
assert abs(check["calibrated_total_wall_s"]["error"]) < 0.01, check
assert plan["devices"]["rate_source"] == "calibrated" and plan["devices"]["count"] == 2, plan
measured_util = run1["throughput"]["train_flops_per_s_per_rank"] / 1e11
assert abs(plan["devices"]["utilization"] - measured_util) < 1e-9, (plan["devices"], measured_util)

# The machine's own noise: identical runs 1 and 3, and the spread of the mean step times of the
# 100-step intervals (metrics.jsonl) within all three runs.
def interval_spread(run_dir):
    times = [r["step_time"] for r in map(json.loads, open(f"{run_dir}/metrics.jsonl"))
             if r.get("type") == "train" and "step_time" in r]
    return (max(times) / min(times) - 1) if len(times) > 1 else 0.0
spread = max(interval_spread(d) for d in run_dirs)

loop = lambda run: run["wall_seconds"]["train_loop"]
train_err = t["train_wall_s"] / loop(run2) - 1
total_err = t["total_wall_s"] / run2["wall_seconds"]["total"] - 1
noise = loop(run3) / loop(run1) - 1
print(f"run 1: {steps} steps, training {loop(run1):.2f} s, "
      f"total {run1['wall_seconds']['total']:.2f} s")
print(f"run 1 again: training {loop(run3):.2f} s ({100 * noise:+.1f}%); slowest 100-step "
      f"interval {100 * spread:.0f}% slower than the fastest")
print(f"run 2: {2 * steps} steps, training predicted {t['train_wall_s']:.2f} s, measured "
      f"{loop(run2):.2f} s, error {100 * train_err:+.1f}%")
print(f"run 2: total predicted {t['total_wall_s']:.2f} s, measured "
      f"{run2['wall_seconds']['total']:.2f} s, error {100 * total_err:+.1f}%")
if abs(train_err) <= tolerance and abs(total_err) <= tolerance:
    sys.exit(0)
if abs(noise) > 0.10 or spread > 0.25:
    # Throughput that moves this much within and between identical runs cannot test a 15%
    # prediction: report it, neither pass nor fail.
    print(f"SKIPPED: this machine is too busy to test a {100 * tolerance:.0f}% prediction "
          f"(identical runs differed by {100 * noise:+.1f}%, intervals by up to "
          f"{100 * spread:.0f}%); rerun on a quiet machine")
    sys.exit(77)
print(f"FAIL: prediction off by more than {100 * tolerance:.0f}% on a machine whose identical "
      f"runs agree within {100 * abs(noise):.1f}% (intervals within {100 * spread:.0f}%)")
sys.exit(1)
PY
case $? in
  0) ;;
  77) ((FAILURES == 0)) && exit 77 ;;
  *) fail "calibrated plan vs the second run" ;;
esac
finish
