#!/usr/bin/env bash
# A second platform, tested: builds hpctrain and its tests against another Debian release's
# packages (LibTorch, OpenMPI, HDF5, ...) inside a directory of that release, and runs the tests
# there. A developer command to run before stopping (not part of .ci/run, whose time it would
# double). It needs root, for debootstrap, chroot and mounts; nothing on a cluster needs it.
set -euo pipefail

usage() {
  cat <<EOF
usage: scripts/check_platform.sh PLATFORM [--slurm] [--labels REGEX] [--jobs N] [-- CTEST_ARGS...]

Builds hpctrain and its tests inside a root directory of another platform and runs its tests
there, then prints 'N passed, N failed, N skipped'. Needs root (debootstrap, chroot, mounts).

platforms:
  trixie   Debian 13: LibTorch 2.6, OpenMPI 5.0, HDF5 1.14, GoogleTest 1.15, glibc 2.41

options:
  --labels REGEX  ctest labels to run (default: ^(unit|mpi|e2e)\$)
  --slurm         also run the slurm label (one Slurm runs on a machine at a time: waits for
                  the host's /tmp/hpctrain-slurm.lock, as the Slurm tests here do)
  --jobs N        build and test jobs (default: nproc)
  --root-only     prepare the root (bootstrap, packages) and stop
  --build-only    configure and build, run no test
  -- ARGS         further ctest arguments (e.g. -R gpt)

The root directory, the build directory and a compiler cache are kept between runs in
\$HPCTRAIN_PLATFORM_CACHE (default /var/cache/hpctrain-platform)/PLATFORM/: the first run
bootstraps the root (about 80 s) and installs the packages (about 2 min), later runs only check
them. The source tree is bind-mounted read-only at /src inside the root, the build directory at
/build. The Debian mirror is the one this machine's apt uses (HPCTRAIN_DEBIAN_MIRROR overrides).
Long: the first build of hpctrain and its tests takes about an hour on 2 cores.
EOF
}

die() {
  echo "check_platform: error: $*" >&2
  exit 1
}
log() { echo "check_platform: $*" >&2; }

src=$(cd "$(dirname "$0")/.." && pwd)
platform=${1:-}
[[ $platform == -h || $platform == --help ]] && {
  usage
  exit 0
}
[[ -n $platform ]] || {
  usage >&2
  exit 2
}
shift
labels='^(unit|mpi|e2e)$'
slurm=0
build_only=0
root_only=0
jobs=$(nproc)
ctest_args=()
while (($#)); do
  case $1 in
    --labels) labels=$2 && shift ;;
    --slurm) slurm=1 ;;
    --jobs) jobs=$2 && shift ;;
    --build-only) build_only=1 ;;
    --root-only) root_only=1 ;;
    --) shift && ctest_args=("$@") && break ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && exit 2 ;;
  esac
  shift
done

case $platform in
  trixie) suite=trixie ;;
  *) die "unknown platform '$platform' (known: trixie)" ;;
esac
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mounts); run it as root on a development machine"

cache=${HPCTRAIN_PLATFORM_CACHE:-/var/cache/hpctrain-platform}/$platform
root=$cache/root
build=$cache/build
mkdir -p "$cache" "$build" "$cache/ccache"

# What the build and the tests need inside the root: the same list as scripts/setup.sh, less
# what only the host's demo uses, plus the compiler (setup.sh gets it from build-essential).
packages=(
  g++ cmake ninja-build pkg-config ccache ca-certificates procps iproute2 util-linux file
  libtorch-dev libopenblas0-pthread
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  libpcre2-dev libicu-dev
  libgtest-dev libbenchmark-dev
  python3 python3-torch python3-h5py python3-numpy python3-yaml python3-onnx
  dataset-fashion-mnist fortunes
  slurm-wlm munge universal-ctags
  zlib1g-dev
  python3-protobuf python3-crcmod protobuf-compiler chromium
  nodejs
)

# The Debian mirror this machine's apt uses (deb822 .sources files or one-line lists).
mirror() {
  [[ -n ${HPCTRAIN_DEBIAN_MIRROR:-} ]] && echo "$HPCTRAIN_DEBIAN_MIRROR" && return
  local f url
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    url=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}' "$f")
    [[ -n $url ]] && echo "${url%/}" && return
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    url=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\/.*\/debian\/?$/) {print $i; exit}}' "$f")
    [[ -n $url ]] && echo "${url%/}" && return
  done
  echo http://deb.debian.org/debian
}

# Runs a command quietly: its output goes to a log shown only when it fails.
quiet() {
  local what=$1 log_file
  shift
  log_file=$cache/$what.log
  if ! "$@" >"$log_file" 2>&1; then
    tail -n 60 "$log_file" >&2
    die "$what failed (whole log: $log_file)"
  fi
}

# Runs a shell command inside the root, in a private mount namespace: the mounts vanish with it,
# whatever way it ends.
in_root() {
  # shellcheck disable=SC2016  # expanded by the inner shell
  unshare --mount --propagation private -- /bin/bash -c '
    set -e
    root=$1 src=$2 build=$3 ccache=$4
    shift 4
    mkdir -p "$root/src" "$root/build" "$root/ccache"
    mount --rbind /dev "$root/dev"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --bind /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    mount --bind "$src" "$root/src"
    mount -o remount,bind,ro "$root/src"
    mount --bind "$build" "$root/build"
    mount --bind "$ccache" "$root/ccache"
    exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      CCACHE_DIR=/ccache DEBIAN_FRONTEND=noninteractive /bin/bash -c "$1"
  ' in_root "$root" "$src" "$build" "$cache/ccache" "$1"
}

# ---- The root: bootstrapped once, packages checked every run ------------------------------------

if [[ ! -f $root/.hpctrain-bootstrapped ]]; then
  command -v debootstrap >/dev/null 2>&1 ||
    quiet apt-install-debootstrap env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends debootstrap
  url=$(mirror)
  log "bootstrapping Debian $suite from $url into $root (about 80 s)"
  rm -rf "$root"
  quiet debootstrap debootstrap --variant=minbase "$suite" "$root" "$url"
  security=${url%/debian}/debian-security
  cat >"$root/etc/apt/sources.list" <<EOF
deb $url $suite main
deb $url $suite-updates main
deb $security $suite-security main
EOF
  touch "$root/.hpctrain-bootstrapped"
fi

want=$(printf '%s\n' "${packages[@]}" | sort | sha256sum | cut -c1-16)
if [[ $(cat "$root/.hpctrain-packages" 2>/dev/null) != "$want" ]]; then
  log "installing ${#packages[@]} packages into the $suite root (about 2-4 min)"
  quiet apt-install in_root "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${packages[*]}"
  echo "$want" >"$root/.hpctrain-packages"
fi
# shellcheck disable=SC2016  # expanded inside the root
in_root 'printf "check_platform: %s: LibTorch %s, %s, HDF5 %s, %s\n" "$(. /etc/os-release; echo "$PRETTY_NAME")" \
  "$(dpkg-query -W -f="\${Version}" libtorch-dev)" "$(mpirun --version | head -n 1)" \
  "$(dpkg-query -W -f="\${Version}" libhdf5-openmpi-dev)" "$(ldd --version | head -n 1)"' >&2
# The npm test references (tokenizers, ONNX Runtime) go into the build directory from this
# machine's npm (scripts/setup.sh --npm-only): the root's node runs them.
if ! BUILD_DIR=$build "$src/scripts/setup.sh" --npm-only >"$cache/npm.log" 2>&1; then
  cat "$cache/npm.log" >&2
  die "the npm test references could not be installed into $build/npm (log above)"
fi
((root_only)) && exit 0

# ---- Build and test inside --------------------------------------------------------------------

log "building hpctrain and its tests in $build (log: $cache/build.log)"
# As scripts/build.sh configures (Ninja, ccache, Release, warnings as errors), then every target
# with -k 0: one run shows every file that does not compile here, not the first.
build_cmd="cmake -S /src -B /build -G Ninja -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCMAKE_BUILD_TYPE=Release -DHPCTRAIN_WERROR=ON >/build/configure.log 2>&1 ||
  { cat /build/configure.log; exit 1; }
  cmake --build /build -j $jobs -- -k 0"
if ! in_root "$build_cmd" >"$cache/build.log" 2>&1; then
  grep -m 40 'error:' "$cache/build.log" >&2 || tail -n 40 "$cache/build.log" >&2
  die "the build failed on $platform (whole log: $cache/build.log)"
fi
((build_only)) && {
  log "built; no test run (--build-only)"
  exit 0
}

run_ctest() {  # run_ctest LABEL_REGEX LOG [VAR=VALUE...]: the variables set for ctest
  local label_regex=$1 out=$2
  shift 2
  local args
  args=$(printf '%q ' "${ctest_args[@]}")
  # As scripts/test.sh: the timing tests after the others, two at a time.
  in_root "cd /build && env $* ctest -j $jobs -L '$label_regex' -LE '^timing\$' --output-on-failure --timeout 900 $args" \
    >"$out" 2>&1 || true
  in_root "cd /build && env $* ctest -j 4 -L '$label_regex' -L '^timing\$' --output-on-failure --timeout 900 $args" \
    >>"$out" 2>&1 || true
}

log "running the tests with labels $labels (log: $cache/test.log)"
# One machine's ranks talk through shared memory: OpenMPI 5's TCP transport, opened beside it,
# finds no interface pairing inside the root and prints a line per peer into the tests' outputs.
# (The slurm tests' nodes are network namespaces: they keep TCP.)
run_ctest "$labels" "$cache/test.log" OMPI_MCA_btl=self,sm
logs=("$cache/test.log")
if ((slurm)); then
  log "running the slurm tests (waiting for /tmp/hpctrain-slurm.lock; log: $cache/test-slurm.log)"
  exec 9>/tmp/hpctrain-slurm.lock
  flock 9
  run_ctest slurm "$cache/test-slurm.log"
  flock -u 9
  logs+=("$cache/test-slurm.log")
fi

# ctest prints one line per test: "  N/M Test  #K: name ....   Passed  1.23 sec" (or ***Failed,
# ***Timeout, ***Exception, ***Skipped / Not Run).
# (A fixture that both passes need, such as the Fashion-MNIST data, runs in each: counted once.)
passed=$(cat "${logs[@]}" | grep -E 'Test +#[0-9]+: .* +Passed +[0-9.]+ sec' |
  sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' | sort -u | grep -c . || true)
# A test that skips says why (exit 77: e2e_plan_calibrate wants an idle machine, the GPU tests a
# GPU): counted apart, not as a failure.
skipped=$(cat "${logs[@]}" | grep -cE 'Test +#[0-9]+: .*\*\*\*Skipped' || true)
failed_lines=$(cat "${logs[@]}" | grep -E 'Test +#[0-9]+: ' |
  grep -vE ' +Passed +[0-9.]+ sec|\*\*\*Skipped' || true)
failed=$(grep -c . <<<"$failed_lines" || true)
[[ -n $failed_lines ]] && echo "$failed_lines" >&2
((passed + failed > 0)) || {
  tail -n 40 "${logs[@]}" >&2
  die "no test ran (logs: ${logs[*]})"
}
echo "$platform: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
