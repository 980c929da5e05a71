#!/usr/bin/env bash
# Prepares the dependency kit that scripts/gpu_check.sh builds against on a GPU machine with no
# network and no package manager (it has PyTorch with a CUDA LibTorch, nvcc, CMake and ninja).
# Run here, on Debian 12: the Debian packages of OpenMPI, parallel HDF5, yaml-cpp, CLI11,
# nlohmann-json, xxHash and GoogleTest, and every shared library they need beyond the C and C++
# runtimes, are downloaded (`apt-get download`, no root needed) and unpacked into one prefix,
# pruned of documentation and Fortran/Java bindings, at most 48 MiB. libevent comes from Debian 11
# (same soname; bookworm's calls glibc 2.36's arc4random): no file of the kit may need more than
# GLIBC_2.34 or GLIBCXX_3.4.29 (glibc 2.34 and GCC 11: Ubuntu 22.04, RHEL 9), checked here.
#   scripts/gpu_kit.sh [KIT_DIR]          default: gpu-kit (ignored by git)
#   scripts/gpu_kit.sh --verify [KIT_DIR] also runs scripts/gpu_preflight.sh on the kit
#                                         (GPU_CHECK_DEVICE=cpu), builds hpctrain in
#                                         build-kit-verify/ (outside the kit, ignored by git)
#                                         against the kit's prefix only (and this machine's
#                                         LibTorch) and checks that every MPI, HDF5, yaml-cpp,
#                                         CLI11, JSON, xxHash and GoogleTest header and library it
#                                         used came from the kit
# Everything it writes stays inside KIT_DIR (its log: KIT_DIR/gpu-kit.log), but for the verify
# build. At its end it prints the kit's size plus the working tree's travelling files (tracked and
# untracked-not-ignored) against the 64 MiB that travel, and the paths to carry.
# The kit's env.sh sets PATH, LD_LIBRARY_PATH, OPAL_PREFIX (OpenMPI relocated) and the CMake hints
# (hpctrain_kit_cmake_args) for a build against it; glibc_needed.txt records the highest GLIBC and
# GLIBCXX versions its files need (for gpu_preflight.sh on a machine without objdump).
set -euo pipefail
cd "${HPCTRAIN_SOURCE_DIR:-$(dirname "$0")/..}"
verify=0
if [[ ${1:-} == --verify ]]; then
  verify=1
  shift
fi
kit=$(realpath -m "${1:-gpu-kit}")
limit_mib=48
travel_limit_mib=64  # the kit plus the working tree's files, as they travel to the GPU machine
glibc_max=2.34       # Ubuntu 22.04, RHEL 9
glibcxx_max=3.4.29   # GCC 11, the libstdc++ of those systems
libevent_version=2.1.12-stable-1  # Debian 11 (bullseye), built for glibc 2.31
arch=x86_64-linux-gnu
primary=(libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libhdf5-openmpi-dev
  libhdf5-openmpi-103-1 libhdf5-openmpi-hl-100 libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev nlohmann-json3-dev
  libxxhash-dev libxxhash0 libgtest-dev libhwloc-dev libevent-dev libpmix-dev zlib1g-dev
  libaec-dev)
# Present on any Linux machine that runs PyTorch: never shipped.
base_libs='^(libc|libm|libdl|librt|libpthread|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libanl|libnsl|libcrypt)\.so'

log=$kit/gpu-kit.log
mkdir -p "$kit/debs" "$kit/prefix"
: >"$log"
fetch() {  # package names -> $kit/debs/*.deb, unpacked into $kit/prefix
  local p
  (cd "$kit/debs" && apt-get download "$@" >>"$log" 2>&1) || {
    cat "$log" >&2
    echo "gpu_kit: apt-get download failed (run apt-get update once as root?)" >&2
    exit 1
  }
  for p in "$@"; do
    for deb in "$kit/debs/${p}_"*.deb; do dpkg-deb -x "$deb" "$kit/prefix"; done
  done
}

# (and what older versions of this script left in the kit: the verify build travelled with it)
rm -rf "$kit/prefix" "$kit/debs" "$kit/apt" "$kit/build" "$kit/build.configure.log" "$kit/build.log" \
  "$kit/build.run.log"
mkdir -p "$kit/debs" "$kit/prefix"
fetch "${primary[@]}"
# One node, shared memory and TCP: OpenMPI's components for InfiniBand, UCX, libfabric and PSM
# (and the libraries only they need) stay out; OpenMPI skips a component it does not find.
drop_components() {
  find "$kit/prefix" \( -name 'mca_*ofi*' -o -name 'mca_*ucx*' -o -name 'mca_btl_openib*' \
    -o -name 'mca_btl_uct*' -o -name 'mca_*psm*' -o -name 'mca_*verbs*' -o -name 'mca_*portals*' \
    -o -name 'libmca_common_ofi*' -o -name 'libmca_common_ucx*' -o -name 'libmca_common_verbs*' \
    -o -name 'mca_btl_usnic*' -o -name 'mca_*fca*' -o -name 'mca_*hcoll*' \) -delete
  # HDF5's C++ bindings: hpctrain uses the C API (h5pcc links the C high-level library too).
  find "$kit/prefix" \( -name 'libhdf5_openmpi_cpp*' -o -name 'libhdf5_openmpi_hl_cpp*' \) -delete
}
drop_components
# The closure of shared libraries: what the kit's ELF files need, resolved on this machine, owned
# by a Debian package, not in the kit yet. Repeat until nothing is missing.
declare -A have=()
for p in "${primary[@]}"; do have[$p]=1; done
for _ in 1 2 3 4 5 6; do
  missing=()
  while IFS= read -r lib; do
    name=$(basename "$lib")
    [[ $name =~ $base_libs ]] && continue
    [[ -n $(find "$kit/prefix" -name "$name" -print -quit) ]] && continue
    real=$(realpath "$lib")
    owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real/#\/usr\/lib/\/lib}" 2>/dev/null || true)
    owner=${owner%%:*}
    [[ -z $owner || -n ${have[$owner]:-} ]] && continue
    have[$owner]=1
    missing+=("$owner")
  done < <(find "$kit/prefix" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec ldd {} + 2>/dev/null |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
  ((${#missing[@]} == 0)) && break
  fetch "${missing[@]}"
done

# libevent: OpenMPI's libopen-pal and libpmix link libevent_core and libevent_pthreads, and
# bookworm's build of them calls arc4random (GLIBC_2.36). Debian 11's build of the same soname
# and upstream version (2.1.12) needs glibc 2.31: it replaces bookworm's files. Downloaded with
# apt's signature checks through an apt configuration of its own inside the kit (the system's is
# not touched), removed afterwards.
libevent=(libevent-core-2.1-7 libevent-pthreads-2.1-7)
apt_dir=$kit/apt
rm -rf "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
echo "deb http://deb.debian.org/debian bullseye main" >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Debug::NoLocking=1
  -o Dir::State::status=/dev/null)
((EUID == 0)) && apt_opts+=(-o APT::Sandbox::User=root)
{
  apt-get "${apt_opts[@]}" update -qq &&
    (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download "${libevent[@]/%/=$libevent_version}")
} >>"$log" 2>&1 || {
  tail -20 "$log" >&2
  echo "gpu_kit: could not download bullseye's ${libevent[*]} $libevent_version" >&2
  exit 1
}
for p in "${libevent[@]}"; do
  old=$(find "$kit/debs" -name "${p}_*.deb" -print -quit)
  if [[ -z $old ]]; then
    echo "gpu_kit: $p is not in the kit: OpenMPI no longer needs it? (revisit the libevent swap)" >&2
    exit 1
  fi
  # Bookworm's files out (not its directories), bullseye's in.
  while IFS= read -r f; do
    [[ -d $kit/prefix/$f ]] || rm -f "$kit/prefix/$f"
  done < <(dpkg-deb --fsys-tarfile "$old" | tar -t)
  dpkg-deb -x "$apt_dir/debs/${p}_${libevent_version}_amd64.deb" "$kit/prefix"
  echo "gpu_kit: $p: $(basename "$old" _amd64.deb | cut -d_ -f2) (bookworm) replaced by $libevent_version (bullseye)"
done
rm -rf "$apt_dir"

# Prune what a build and a single-node run never use.
pre=$kit/prefix
rm -rf "$pre/usr/share/doc" "$pre/usr/share/man" "$pre/usr/share/lintian" "$pre/usr/share/info" \
  "$pre/usr/share/javascript" "$pre/usr/src" "$pre/etc/ld.so.conf.d"
find "$pre" \( -name '*fortran*' -o -name '*.mod' -o -name '*java*' -o -name '*.jar' \
  -o -name 'liboshmem*' -o -name 'libmpi_usempi*' -o -name 'libmpi_mpifh*' \) -prune \
  -exec rm -rf {} + 2>/dev/null || true
# Static archives only where no shared library exists (GoogleTest is static in Debian).
find "$pre" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
rm -rf "$kit/debs"
# Links left dangling by the pruning or by packages not in the kit (libevent-dev's libevent.so,
# libevent_extra.so, libevent_openssl.so; HDF5's C++ ones): a link to nothing only misleads.
find "$pre" -xtype l -delete
for f in libevent_core.so libevent_pthreads.so; do
  if [[ ! -e $pre/usr/lib/$arch/$f ]]; then
    echo "gpu_kit: $pre/usr/lib/$arch/$f does not resolve" >&2
    exit 1
  fi
done
# The library directories: every top-level lib folder that holds shared libraries (Debian puts
# zlib, com_err, keyutils and libnl in /lib, the rest in /usr/lib), and OpenMPI's and HDF5's own.
lib_path=''
for d in lib/$arch usr/lib/$arch lib lib64 usr/lib usr/lib64 usr/lib/$arch/openmpi/lib \
  usr/lib/$arch/hdf5/openmpi; do
  [[ -n $(find "$pre/$d" -maxdepth 1 -name '*.so*' -print -quit 2>/dev/null) ]] &&
    lib_path+=${lib_path:+:}\$kit_root/$d
done
echo "gpu_kit: library path: ${lib_path//\$kit_root/prefix}"

# Debian's CMake configs and wrappers name /usr: point them at the kit.
cat >"$kit/env.sh" <<EOF
# Source this to build or run against the kit (written by scripts/gpu_kit.sh).
kit_root=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)/prefix
kit_prefix=\$kit_root/usr
kit_lib_path=$lib_path
export OPAL_PREFIX=\$kit_prefix
export PATH=\$kit_prefix/bin:\$PATH
export LD_LIBRARY_PATH=\$kit_lib_path\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export OMPI_MCA_mca_base_component_show_load_errors=0
hpctrain_kit_cmake_args=(
  -DCMAKE_PREFIX_PATH=\$kit_prefix
  -DMPI_C_COMPILER=\$kit_prefix/bin/mpicc.openmpi
  -DMPI_CXX_COMPILER=\$kit_prefix/bin/mpicxx.openmpi
  -DMPIEXEC_EXECUTABLE=\$kit_prefix/bin/mpirun.openmpi
  -DHDF5_C_COMPILER_EXECUTABLE=\$kit_prefix/bin/h5pcc.openmpi
  -DHDF5_C_LIBRARY_hdf5=\$kit_prefix/lib/$arch/hdf5/openmpi/libhdf5.so
  -DXXHASH_INCLUDE_DIR=\$kit_prefix/include
  -DXXHASH_LIBRARY=\$kit_prefix/lib/$arch/libxxhash.so
  -DZLIB_INCLUDE_DIR=\$kit_prefix/include
  -DZLIB_LIBRARY=\$kit_prefix/lib/$arch/libz.so
  -DGTest_DIR=\$kit_prefix/lib/$arch/cmake/GTest
  -Dyaml-cpp_DIR=\$kit_prefix/lib/$arch/cmake/yaml-cpp
  -DCLI11_DIR=\$kit_prefix/share/cmake/CLI11
  -Dnlohmann_json_DIR=\$kit_prefix/share/cmake/nlohmann_json
  -DCMAKE_BUILD_RPATH=\$kit_lib_path
)
EOF
# Relative symlinks only: absolute ones (Debian's /usr/lib/... alternatives) would leave the kit.
while IFS= read -r link; do
  target=$(readlink "$link")
  if [[ $target == /* ]]; then
    if [[ -e $pre$target ]]; then
      ln -sfr "$pre$target" "$link"
    else
      rm -f "$link"
    fi
  fi
done < <(find "$pre" -type l)
# The wrapper compilers and h5pcc print /usr paths; the kit's copies print the kit's.
for f in "$pre"/usr/share/openmpi/*-wrapper-data.txt; do
  [[ -f $f ]] && sed -i "s|^includedir=.*|includedir=\${prefix}/include/$arch/openmpi|" "$f"
done
# The kit keeps HDF5's shared library only (h5pcc links it, not the static one); h5pcc also
# names libcrypto and libcurl (HDF5's read-only S3 driver) for static links: libhdf5.so
# records them itself, and a machine without their development links could not link them.
# Its prefix is where it lies (the kit travels to another path).
if [[ -f $pre/usr/bin/h5pcc.openmpi ]]; then
  # shellcheck disable=SC2016  # $(...) is for h5pcc to expand
  sed -i -e 's|^prefix="/usr"$|prefix="$(cd "$(dirname "$(readlink -f "$0")")/.." \&\& pwd)"|' \
    -e 's|^H5BLD_LIBS=.*|H5BLD_LIBS="-lsz -lz -ldl -lm "|' \
    -e 's|^STATIC_AVAILABLE="yes"|STATIC_AVAILABLE="no"|' "$pre/usr/bin/h5pcc.openmpi"
  if grep -q '/usr' "$pre/usr/bin/h5pcc.openmpi" ||
    [[ $(PATH=$pre/usr/bin:$PATH h5pcc.openmpi -show) != *"-I$pre/usr/include/hdf5/openmpi "* ]]; then
    echo "gpu_kit: h5pcc.openmpi still names /usr, or not the kit" >&2
    exit 1
  fi
fi
size_mib=$(($(du -sk "$kit/prefix" | cut -f1) / 1024))
echo "gpu_kit: $kit/prefix: $(find "$kit/prefix" -type f | wc -l) files, $size_mib MiB (limit $limit_mib)"
if ((size_mib > limit_mib)); then
  echo "gpu_kit: the kit is larger than $limit_mib MiB" >&2
  exit 1
fi
# The oldest glibc and libstdc++ the kit runs on: the highest versions its ELF files need.
./scripts/gpu_preflight.sh --needed "$pre" | sed "s| $kit/| |" >"$kit/glibc_needed.txt"
read -r _ glibc_need glibc_by <"$kit/glibc_needed.txt"
read -r _ glibcxx_need glibcxx_by < <(sed -n 2p "$kit/glibc_needed.txt")
echo "gpu_kit: the kit needs GLIBC_$glibc_need ($glibc_by) and GLIBCXX_$glibcxx_need ($glibcxx_by)" \
  "at most (limits GLIBC_$glibc_max, GLIBCXX_$glibcxx_max)"
newer() { [[ $1 != "$2" && $(printf '%s\n' "$1" "$2" | sort -V | tail -1) == "$1" ]]; }  # $1 > $2
if [[ $glibc_need == none ]] || newer "$glibc_need" "$glibc_max" ||
  { [[ $glibcxx_need != none ]] && newer "$glibcxx_need" "$glibcxx_max"; }; then
  echo "gpu_kit: the kit needs a newer glibc or libstdc++ than GLIBC_$glibc_max / GLIBCXX_$glibcxx_max:" \
    "GLIBC_$glibc_need ($glibc_by), GLIBCXX_$glibcxx_need ($glibcxx_by)" >&2
  exit 1
fi

# Data for the GPU check (no dataset packages there): the first 12,800 Fashion-MNIST training
# images (200 steps of 64) and 2,000 test images, and the fortunes corpus as byte tokens, as
# hpctrain's own files rewritten with gzip-compressed chunks (HDF5 reads them transparently).
bin=${BUILD_DIR:-build}/bin/hpctrain
if [[ ! -x $bin ]]; then
  HPCTRAIN_BUILD_TARGET=hpctrain ./scripts/build.sh >>"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
fi
raw=$kit/raw
rm -rf "$raw" "$kit/data"
mkdir -p "$raw" "$kit/data/fashion-mnist" "$kit/data/text"
"$bin" -q prepare fashion-mnist --out "$raw/fashion-mnist" >>"$log" 2>&1
"$bin" -q prepare text --in /usr/share/games/fortunes/*.u8 --out "$raw/text" >>"$log" 2>&1
/usr/bin/python3 - "$raw" "$kit/data" <<'PY'
import sys
import h5py
raw, out = sys.argv[1], sys.argv[2]
def copy(src, dst, rows):
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for k, v in f.attrs.items():
            g.attrs[k] = v
        g.attrs["source"] = f.attrs["source"] + (f" (first {rows} samples)" if rows else "")
        for name, d in f.items():
            n = min(rows, d.shape[0]) if rows else d.shape[0]
            chunks = (min(n, d.chunks[0]),) + d.chunks[1:]
            e = g.create_dataset(name, data=d[:n], chunks=chunks, compression="gzip",
                                 compression_opts=6)
            for k, v in d.attrs.items():
                e.attrs[k] = v
copy(f"{raw}/fashion-mnist/train.h5", f"{out}/fashion-mnist/train.h5", 12800)
copy(f"{raw}/fashion-mnist/test.h5", f"{out}/fashion-mnist/test.h5", 2000)
copy(f"{raw}/text/train.h5", f"{out}/text/train.h5", 0)
copy(f"{raw}/text/val.h5", f"{out}/text/val.h5", 0)
# For a python without h5py on the GPU machine: the first 256 test images (gpu_check.sh's
# onnxruntime phase) and the token streams (scripts/gpt_torch_reference.py), as numpy files.
import numpy as np
with h5py.File(f"{out}/fashion-mnist/test.h5", "r") as f:
    np.save(f"{out}/fashion-mnist/test-inputs-256.npy", f["inputs"][:256])
for split in ("train", "val"):
    with h5py.File(f"{out}/text/{split}.h5", "r") as f:
        np.savez_compressed(f"{out}/text/{split}.tokens.npz", tokens=f["tokens"][:])
PY
rm -rf "$raw"
echo "gpu_kit: $kit/data: $(($(du -sk "$kit/data" | cut -f1) / 1024)) MiB (Fashion-MNIST subset, fortunes)"

# What travels to the GPU machine: the working tree's files (tracked, and untracked but not
# ignored) and the kit folder (ignored by git: named in the run's carry list).
travel() {
  local tree_b kit_b rel total_b
  tree_b=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null |
    awk '{s += $1} END {print s + 0}')
  kit_b=$(du -sb "$kit" | cut -f1)
  rel=$(realpath -m --relative-to=. "$kit")
  if [[ $rel == ../* || $rel == .. ]]; then
    echo "gpu_kit: $kit is outside the working tree $(pwd): it cannot travel with it" >&2
    return 1
  fi
  if ! git check-ignore -q "$rel/"; then
    kit_b=0  # not ignored: its files are among the working tree's already
  fi
  total_b=$((tree_b + kit_b))
  echo "gpu_kit: travelling: kit $(awk -v b="$kit_b" 'BEGIN {printf "%.1f", b / 1048576}') MiB +" \
    "working tree $(awk -v b="$tree_b" 'BEGIN {printf "%.1f", b / 1048576}') MiB =" \
    "$(awk -v b="$total_b" 'BEGIN {printf "%.1f", b / 1048576}') MiB (limit $travel_limit_mib MiB)"
  if ((total_b > travel_limit_mib * 1048576)); then
    echo "gpu_kit: more than $travel_limit_mib MiB would travel" >&2
    return 1
  fi
  if ((kit_b > 0)); then echo "carry: [\"$rel\"]"; else echo "carry: []"; fi
}

if ((!verify)); then
  travel || exit 1
  exit 0
fi

# The preflight the GPU check runs, here (no GPU needed).
build=${HPCTRAIN_KIT_BUILD_DIR:-build-kit-verify}  # outside the kit: it must not travel
build=$(realpath -m "$build")
if [[ $build == "$kit" || $build == "$kit"/* ]]; then
  echo "gpu_kit --verify: the build folder $build is inside the kit, which travels" >&2
  exit 1
fi
rm -rf "$build"
mkdir -p "$build"
if ! GPU_CHECK_DEVICE=cpu PYTHON=${PYTHON:-/usr/bin/python3} ./scripts/gpu_preflight.sh "$kit" "$build/preflight.json"; then
  echo "gpu_kit --verify: the preflight failed: $(cat "$build/preflight.json" 2>/dev/null)" >&2
  exit 1
fi
echo "gpu_kit --verify: preflight: $(cat "$build/preflight.json")"

# Build hpctrain against the kit only, then check where every dependency came from.
# shellcheck disable=SC1091
source "$kit/env.sh"
torch_dir=${Torch_DIR:-$(dirname "$(find /usr/lib /usr/share -name TorchConfig.cmake -print -quit)")}
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# shellcheck disable=SC2154  # hpctrain_kit_cmake_args: from env.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHPCTRAIN_WERROR=ON "${launcher[@]}" \
  -DTorch_DIR="$torch_dir" "${hpctrain_kit_cmake_args[@]}" >"$build/kit-verify.configure.log" 2>&1 || {
  cat "$build/kit-verify.configure.log" >&2
  exit 1
}
cmake --build "$build" -j "${HPCTRAIN_BUILD_JOBS:-$(nproc)}" --target "${HPCTRAIN_KIT_TARGETS:-hpctrain}" \
  >"$build/kit-verify.build.log" 2>&1 || {
  tail -50 "$build/kit-verify.build.log" >&2
  exit 1
}
problems=0
# Headers: ninja's dependency records of every object.
if (cd "$build" && ninja -t deps 2>/dev/null | awk '/^ / {print $1}' | xargs -r realpath -m) |
  grep -E '^/usr/include/(openmpi|x86_64-linux-gnu/openmpi|hdf5|yaml-cpp|CLI|nlohmann|xxhash|gtest|gmock|zlib|mpi)' |
  sort -u | head -5 | grep .; then
  echo "gpu_kit --verify: the headers above came from this machine, not the kit" >&2
  problems=1
fi
# Libraries: what the dynamic linker resolves for the executable, with the kit's environment.
while read -r name arrow path _; do
  [[ $arrow == "=>" ]] || continue
  case $name in
  libmpi* | libopen-* | libhdf5_openmpi* | libhdf5.so* | libyaml-cpp* | libxxhash* | libpmix* | libhwloc* | libevent* | libaec* | libsz*)
    if [[ $path != "$kit"/* ]]; then
      echo "gpu_kit --verify: $name resolved to $path, outside the kit" >&2
      problems=1
    fi
    ;;
  esac
done < <(ldd "$build/bin/hpctrain")
# A one-rank run with the kit's MPI.
if ! "$build/bin/hpctrain" --version >"$build/kit-verify.run.log" 2>&1; then
  cat "$build/kit-verify.run.log" >&2
  problems=1
fi
if ((problems)); then exit 1; fi
echo "gpu_kit --verify: hpctrain built against the kit only: headers and libraries checked ($build)"
echo "gpu_kit --verify: the kit needs glibc $glibc_need at most ($glibc_by; limit $glibc_max)"
travel || exit 1
