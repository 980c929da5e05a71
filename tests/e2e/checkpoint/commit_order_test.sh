#!/usr/bin/env bash
# The commit protocol's order (docs/CHECKPOINTS.md), checked on the system calls a real training
# run makes (the test hook HPCTRAIN_TEST_IO_TRACE logs each fsync and rename after it succeeded):
# for every committed checkpoint, every file its manifest lists and the manifest itself are
# fsynced in the temporary directory, then that directory, before it is renamed to step_<N>;
# the checkpoints directory is fsynced after that rename and before `latest` is replaced, the new
# `latest` is fsynced before its rename, and the checkpoints directory again after it. Removing
# any of these fsyncs, or publishing `latest` before the rename, fails this test.
# Then a deterministic crash between the rename and `latest` (HPCTRAIN_TEST_CHECKPOINT_CRASH=
# after-rename): `latest` still names the previous checkpoint, the new one is complete, and a
# resume takes `latest`'s.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set eval.at_end=false
  --set run.max_steps=30 --set checkpoint.every_steps=10 --set checkpoint.keep=5
  --set data.batch_size=16)

HPCTRAIN_TEST_IO_TRACE=$TMP/trace.txt expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" \
  train "${common[@]}" --set "run.dir=$TMP/run"
$PY - "$TMP/trace.txt" "$TMP/run/checkpoints" <<'PY' || fail "commit order (trace in $TMP/trace.txt)"
import json, os, re, sys
trace = [line.split() for line in open(sys.argv[1])]
root = os.path.realpath(sys.argv[2])
def norm(p):  # paths as the trace wrote them (relative to the run's checkpoints), made absolute
    return os.path.normpath(os.path.realpath(p))
ops = [(op, *[norm(p) for p in paths]) for op, *paths in trace]
def index(entry, start=0, what=""):
    for i in range(start, len(ops)):
        if ops[i] == entry:
            return i
    raise SystemExit(f"missing in the trace: {' '.join(entry)} ({what})")
steps = sorted(d for d in os.listdir(root) if re.fullmatch(r"step_\d{8}", d))
assert steps == ["step_00000010", "step_00000020", "step_00000030"], steps
for step in steps:
    final = os.path.join(root, step)
    renames = [i for i, o in enumerate(ops) if o[0] == "rename" and o[2] == final]
    assert len(renames) == 1, f"{step}: {len(renames)} renames into place"
    rename = renames[0]
    tmp = ops[rename][1]
    assert ".tmp-" in os.path.basename(tmp), tmp
    manifest = json.load(open(os.path.join(final, "manifest.json")))
    synced_manifest = index(("fsync", os.path.join(tmp, "manifest.json")), 0, f"{step} manifest")
    for name in manifest["files"]:
        i = index(("fsync", os.path.join(tmp, name)), 0, f"{step} {name}")
        assert i < synced_manifest, f"{step}: {name} fsynced after the manifest"
    synced_tmp = index(("fsync", tmp), synced_manifest, f"{step} temporary directory")
    assert synced_tmp < rename, f"{step}: directory fsynced after its rename"
    synced_root = index(("fsync", root), rename, f"{step} checkpoints directory after the rename")
    latest = next((i for i in range(rename, len(ops)) if ops[i][0] == "rename"
                   and ops[i][2] == os.path.join(root, "latest")), None)
    assert latest is not None, f"{step}: latest not replaced after the rename"
    assert synced_root < latest, f"{step}: checkpoints directory not fsynced before latest"
    assert index(("fsync", ops[latest][1]), synced_root, f"{step} new latest file") < latest
    index(("fsync", root), latest, f"{step} checkpoints directory after latest")
# Each checkpoint's rename is followed by the `latest` that names it, before the next save.
order = "".join("S" if o[2] in [os.path.join(root, s) for s in steps] else "L"
                for o in ops if o[0] == "rename" and (o[2] == os.path.join(root, "latest")
                                                      or o[2] in [os.path.join(root, s) for s in steps]))
assert order == "SL" * len(steps), f"renames into place (S) and of latest (L) in the order {order}"
print(f"commit order ok for {len(steps)} checkpoints ({len(ops)} traced operations)")
PY
[[ $(cat "$TMP/run/checkpoints/latest") == step_00000030 ]] || fail "latest should name step 30"

# Killed between the rename and `latest` at the second save (step 20).
HPCTRAIN_TEST_CHECKPOINT_CRASH=after-rename:2 timeout 120 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set checkpoint.background=false --set "run.dir=$TMP/crash" >"$TMP/crash.txt" 2>&1
got=$?
[[ $got == 137 ]] || fail "the crash hook should have killed the run (exit $got)"
[[ $(cat "$TMP/crash/checkpoints/latest") == step_00000010 ]] ||
  fail "after a crash between rename and latest, latest names $(cat "$TMP/crash/checkpoints/latest"), not step_00000010"
expect_exit 0 "$TMP/verify20.txt" "$HPCTRAIN_BIN" inspect checkpoint "$TMP/crash/checkpoints/step_00000020"
expect_exit 0 "$TMP/resume.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/crash"
expect_grep "resumed from .*step_00000010 at step 10" "$TMP/resume.txt"
finish
