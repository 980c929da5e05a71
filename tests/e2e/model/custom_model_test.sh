#!/usr/bin/env bash
# A C++ model from outside the tree: hpctrain installs (cmake --install) into a prefix, the
# example in examples/custom_model builds against that installed package (find_package(hpctrain))
# as its own CMake project, and the installed hpctrain trains it on 2 ranks for a few steps with
# --plugin, and again with model.plugin, evaluating the checkpoint offline (the stored config
# names the plugin). A missing plugin and a library without models are exit 2.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
prefix=$TMP/prefix
expect_exit 0 "$TMP/install.log" cmake --install "$HPCTRAIN_BUILD_DIR" --prefix "$prefix" || finish
for f in bin/hpctrain include/hpctrain/model/model.hpp include/hpctrain/build_config.hpp \
  lib/libhpctrain_model.a lib/cmake/hpctrain/hpctrainConfig.cmake; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
example=$HPCTRAIN_SOURCE_DIR/examples/custom_model
expect_exit 0 "$TMP/configure.log" cmake -S "$example" -B "$TMP/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$prefix" || finish
timeout 600 nice -n 5 cmake --build "$TMP/build" >"$TMP/build.log" 2>&1 || {
  fail "the example does not build"
  tail -30 "$TMP/build.log" >&2
  finish
}
plugin=$TMP/build/libresnet_model.so
common=(train -c "$example/resnet.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set run.max_steps=6 --set logging.every_steps=2
  --set eval.every_steps=0 --set eval.max_samples=500)
expect_exit 0 "$TMP/train.log" mpirun_np 2 "$prefix/bin/hpctrain" --plugin "$plugin" "${common[@]}" \
  --set "run.dir=$TMP/run1"
expect_grep "training resnet \([0-9]+ parameters\) on dp=2 x tp=1" "$TMP/train.log"
expect_grep "eval at step 6: loss" "$TMP/train.log"
expect_exit 0 "$TMP/inspect.log" "$prefix/bin/hpctrain" inspect checkpoint "$TMP/run1"
expect_grep "model/blocks.1.conv2.weight +float32 +\(8, 8, 3, 3\)" "$TMP/inspect.log"
expect_grep "model/head.weight +float32 +\(10, 1568\)" "$TMP/inspect.log"

# model.plugin: the run's stored config loads the plugin again for offline evaluation.
expect_exit 0 "$TMP/train2.log" mpirun_np 2 "$prefix/bin/hpctrain" "${common[@]}" \
  --set "model.plugin=$plugin" --set "run.dir=$TMP/run2"
expect_exit 0 "$TMP/eval.log" mpirun_np 2 "$prefix/bin/hpctrain" eval --checkpoint "$TMP/run2" \
  --results "$TMP/eval"
expect_grep "accuracy" "$TMP/eval.log"

expect_exit 2 "$TMP/missing.log" "$prefix/bin/hpctrain" --plugin "$TMP/nope.so" "${common[@]}" \
  --set "run.dir=$TMP/run3"
expect_grep "\-\-plugin = $TMP/nope.so: no such file" "$TMP/missing.log"
expect_exit 2 "$TMP/unknown.log" "$prefix/bin/hpctrain" "${common[@]}" --set "run.dir=$TMP/run4"
expect_grep "model.name = .?resnet.?: unknown model; known models: .*load its plugin with --plugin" "$TMP/unknown.log"
finish
