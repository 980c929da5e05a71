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
  libgtest-dev libbenchmark-dev
  python3-torch python3-h5py python3-numpy python3-yaml python3-onnx
  dataset-fashion-mnist fortunes
  slurm-wlm munge iproute2
  zlib1g-dev
  python3-protobuf python3-crcmod protobuf-compiler chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
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
echo "setup: done"
