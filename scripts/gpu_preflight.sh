#!/usr/bin/env bash
# The preflight of the GPU check, run by scripts/gpu_check.sh on the GPU machine and by
# `scripts/gpu_kit.sh --verify` on the machine that made the kit: can this machine run the kit?
#   scripts/gpu_preflight.sh KIT_DIR OUT_JSON   writes ONE JSON object (one line) to OUT_JSON:
#     {"phase":"preflight","ok":...,"glibc":"2.36","gpu":...,"driver":...,"nvcc":...,
#      "kit_glibc_needed":"2.34",...,"problems":[...],"reason":"..."}; exit 0 when ok, else 1
#   scripts/gpu_preflight.sh --needed DIR       prints the highest GLIBC_ and GLIBCXX_ versions
#                                               the ELF files under DIR need, and which file:
#                                               "GLIBC 2.34 FILE" and "GLIBCXX 3.4.29 FILE"
# Records: the machine's glibc (getconf GNU_LIBC_VERSION); the GPU's name and driver (nvidia-smi)
# and nvcc's version, null when absent, which is a problem unless GPU_CHECK_DEVICE is set to
# something other than cuda; ldd of the kit's MPI (libmpi, libopen-pal, libpmix), HDF5 (parallel,
# and its high-level library), yaml-cpp and mpirun with the kit's LD_LIBRARY_PATH: every "not
# found" line, and every library the kit ships that resolved outside the kit, is a problem; the
# highest glibc the kit's files need (objdump -T, or the kit's record of it where this machine
# has no objdump) against this machine's; h5pcc's directories (the kit must be relocatable); and
# whether the kit's `mpirun -np 1 true` works (mpirun_np1: "ok" or why not; a note, not a problem).
# Needs bash, coreutils, ldd, python3 (standard library only); takes a second or two.
set -uo pipefail

# The highest GLIBC_x and GLIBCXX_x versions of the undefined (*UND*) dynamic symbols of every
# ELF file under $1 (objdump -T; files it does not recognise are skipped), with the first file
# that needs each. Prints two lines, "GLIBC <version|none> <file|->" and the same for GLIBCXX.
needed_versions() {
  find "$1" -type f -print0 | xargs -0 -r objdump -T 2>/dev/null | awk '
    function newer(a, b,   x, y, n, i) {  # a > b, both dotted numbers
      n = split(a, x, "."); split(b, y, ".")
      for (i = 1; i <= n || i in y; i++) {
        if ((x[i] + 0) != (y[i] + 0)) return (x[i] + 0) > (y[i] + 0)
      }
      return 0
    }
    / file format / { file = $1; sub(/:$/, "", file); next }
    /\*UND\*/ {
      if (match($0, /GLIBC(XX)?_[0-9][0-9.]*/)) {
        tag = substr($0, RSTART, RLENGTH); split(tag, p, "_"); lib = p[1]; v = p[2]
        if (!(lib in best) || newer(v, best[lib])) { best[lib] = v; who[lib] = file }
      }
    }
    END {
      print "GLIBC", ("GLIBC" in best) ? best["GLIBC"] : "none", ("GLIBC" in who) ? who["GLIBC"] : "-"
      print "GLIBCXX", ("GLIBCXX" in best) ? best["GLIBCXX"] : "none", ("GLIBCXX" in who) ? who["GLIBCXX"] : "-"
    }'
}

if [[ ${1:-} == --needed ]]; then
  [[ -e ${2:-} ]] || { echo "usage: $0 --needed DIR" >&2; exit 2; }
  command -v objdump >/dev/null 2>&1 || { echo "gpu_preflight: no objdump on PATH" >&2; exit 2; }
  needed_versions "$2"
  exit 0
fi
if (($# != 2)); then
  echo "usage: $0 KIT_DIR OUT_JSON | $0 --needed DIR" >&2
  exit 2
fi
kit=$(realpath -m "$1")
out=$2
dev=${GPU_CHECK_DEVICE:-cuda}
problems=()
problem() { problems+=("$*"); }

glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
[[ -n $glibc ]] || problem "getconf GNU_LIBC_VERSION gave no glibc version"

# The GPU and its driver, nvcc: null when absent, a problem only when the check is for CUDA.
# Both at once, each under `timeout 20`: a hung driver costs 20 s, not 40.
gpu='' driver='' nvcc=''
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvcc_bin=$(command -v nvcc 2>/dev/null || true)
for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [[ -z $nvcc_bin && -n $c && -x $c/bin/nvcc ]] && nvcc_bin=$c/bin/nvcc
done
{
  timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$tmp/smi" 2>/dev/null
  echo $? >"$tmp/smi.rc"
} &
if [[ -n $nvcc_bin ]]; then
  {
    timeout 20 "$nvcc_bin" --version >"$tmp/nvcc" 2>/dev/null
    echo $? >"$tmp/nvcc.rc"
  } &
fi
wait
rc=$(cat "$tmp/smi.rc")
line=$(head -1 "$tmp/smi")
if ((rc == 0)) && [[ $line == *,* ]]; then
  gpu=${line%,*} driver=${line##*,}
  gpu=${gpu%"${gpu##*[![:space:]]}"} driver=${driver#"${driver%%[![:space:]]*}"}
elif [[ $dev == cuda ]]; then
  case $rc in
  124) problem "nvidia-smi timed out (20 s)" ;;
  127) problem "no nvidia-smi on PATH" ;;
  *) problem "nvidia-smi named no GPU (exit $rc): $line" ;;
  esac
fi
if [[ -n $nvcc_bin ]]; then
  rc=$(cat "$tmp/nvcc.rc")
  ((rc == 0)) && nvcc=$(tail -1 "$tmp/nvcc")
  [[ -z $nvcc && $dev == cuda ]] && problem "nvcc --version failed (exit $rc): $nvcc_bin"
elif [[ $dev == cuda ]]; then
  problem "no nvcc on PATH, in \$CUDA_HOME or in /usr/local/cuda"
fi

# The highest glibc the kit's files need: objdump here, else what gpu_kit.sh recorded.
needed='' needed_by='' needed_cxx='' source='' mpirun_np1=''
if [[ ! -f $kit/env.sh || ! -d $kit/prefix ]]; then
  problem "no kit at $kit (env.sh and prefix/ missing): run scripts/gpu_kit.sh and carry its folder"
else
  if command -v objdump >/dev/null 2>&1; then
    versions=$(needed_versions "$kit/prefix") source=objdump
  else
    versions=$(cat "$kit/glibc_needed.txt" 2>/dev/null) source=glibc_needed.txt
  fi
  read -r _ needed needed_by < <(grep '^GLIBC ' <<<"$versions")
  read -r _ needed_cxx _ < <(grep '^GLIBCXX ' <<<"$versions")
  needed_by=${needed_by#"$kit"/}
  if [[ -z $needed || $needed == none ]]; then
    problem "could not tell which glibc the kit needs (no objdump, no $kit/glibc_needed.txt)"
    needed=''
  elif [[ -n $glibc && $(printf '%s\n' "$glibc" "$needed" | sort -V | head -1) != "$needed" ]]; then
    problem "this machine's glibc $glibc is older than the $needed the kit needs ($needed_by)"
  fi

  # ldd with the kit's environment, for those calls only.
  declare -A shipped=() first=()
  while IFS=' ' read -r kind f; do
    name=${f##*/}
    shipped[$name]=1
    [[ $kind == f && $name == lib[mopshy]*.so.[0-9]* ]] || continue
    for pat in 'libmpi.so.[0-9]*' 'libopen-pal.so.[0-9]*' 'libpmix.so.[0-9]*' \
      'libhdf5_openmpi.so.[0-9]*' 'libhdf5_openmpi_hl.so.[0-9]*' 'libyaml-cpp.so.[0-9]*'; do
      # shellcheck disable=SC2053  # a glob pattern on purpose
      [[ $name == $pat && -z ${first[$pat]:-} ]] && first[$pat]=$f
    done
  done < <(find "$kit/prefix" -name '*.so*' \( -type f -o -type l \) -printf '%y %p\n')
  files=()
  for pat in 'libmpi.so.[0-9]*' 'libopen-pal.so.[0-9]*' 'libpmix.so.[0-9]*' \
    'libhdf5_openmpi.so.[0-9]*' 'libhdf5_openmpi_hl.so.[0-9]*' 'libyaml-cpp.so.[0-9]*'; do
    if [[ -n ${first[$pat]:-} ]]; then files+=("${first[$pat]}"); else problem "${pat%%.so*}.so: not in the kit"; fi
  done
  f=$kit/prefix/usr/bin/mpirun.openmpi
  if [[ -e $f ]]; then files+=("$(realpath "$f")"); else problem "mpirun.openmpi: not in the kit"; fi
  ldd_out=$(
    set +u
    # shellcheck disable=SC1091
    source "$kit/env.sh" || exit 1
    for f in "${files[@]}"; do
      echo "@@ $f"
      ldd "$f" 2>&1
    done
  )
  current='' current_path=''
  while IFS= read -r l; do
    if [[ $l == "@@ "* ]]; then current_path=${l#@@ } current=${current_path##*/}; continue; fi
    l=${l#"${l%%[![:space:]]*}"}
    l=${l#"$current_path: "}
    if [[ $l == *"not found"* ]]; then
      problem "$current: $l"
    elif [[ $l =~ ^([^[:space:]]+)\ =\>\ (/[^[:space:]]+) ]]; then
      name=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]}
      # env.sh is sourced as $kit/env.sh ($kit has no symbolic links): its paths start with $kit.
      if [[ -n ${shipped[$name]:-} && $path != "$kit"/* ]]; then
        problem "$current: $name resolved to $path, outside the kit (LD_LIBRARY_PATH of $kit/env.sh)"
      fi
    fi
  done <<<"$ldd_out"

  # Whether the kit's mpirun starts one process here: recorded, not a problem (hpctrain's one-rank
  # runs are singletons, MPI_Init without a launcher; only multi-rank runs need mpirun).
  mpirun=$kit/prefix/usr/bin/mpirun.openmpi
  if [[ -e $mpirun ]]; then
    np1_out=$(
      set +u
      # shellcheck disable=SC1091
      source "$kit/env.sh" >/dev/null 2>&1 || exit 99
      flags=()
      [[ $(id -u) -eq 0 ]] && flags=(--allow-run-as-root)
      timeout 20 "$mpirun" "${flags[@]}" -np 1 true 2>&1
    )
    rc=$?
    mpirun_np1=ok
    ((rc == 0)) || mpirun_np1="failed (exit $rc): $(head -c 300 <<<"$np1_out" | tr '\n' ' ')"
  fi

  # h5pcc (FindHDF5 asks it for HDF5's directories) must name the kit where the kit is now.
  h5pcc=$kit/prefix/usr/bin/h5pcc.openmpi
  if [[ -x $h5pcc ]]; then
    for d in $("$h5pcc" -show 2>/dev/null | tr ' ' '\n' | sed -n 's/^-[IL]//p'); do
      [[ -d $d ]] || problem "h5pcc.openmpi -show names $d, which does not exist"
    done
  fi
fi

ok=true
((${#problems[@]} == 0)) || ok=false
reason=''
if [[ $ok == false ]]; then
  reason="${#problems[@]} problem(s); first: ${problems[0]}"
fi
py=${PYTHON:-$(command -v python3 2>/dev/null)}
if [[ -z $py ]]; then
  echo "gpu_preflight: no python3 to write $out" >&2
  exit 1
fi
mkdir -p "$(dirname "$(realpath -m "$out")")"
"$py" -c '
import json, sys
a = sys.argv[1:]
out, ok, glibc, gpu, driver, nvcc, nvcc_path, needed, needed_by, needed_cxx, source, dev, reason, np1 = a[:14]
null = lambda s: s if s else None
doc = {"phase": "preflight", "ok": ok == "true", "glibc": null(glibc), "gpu": null(gpu),
       "driver": null(driver), "nvcc": null(nvcc), "nvcc_path": null(nvcc_path), "kit_glibc_needed": null(needed),
       "kit_glibc_needed_by": null(needed_by), "kit_glibcxx_needed": null(needed_cxx), "kit_glibc_from": null(source),
       "device": dev, "mpirun_np1": null(np1), "problems": a[14:], "reason": reason}
with open(out, "w") as f:
    f.write(json.dumps(doc) + "\n")
' "$out" "$ok" "$glibc" "$gpu" "$driver" "$nvcc" "${nvcc:+$nvcc_bin}" "$needed" "$needed_by" "$needed_cxx" "$source" "$dev" \
  "$reason" "$mpirun_np1" "${problems[@]}" || {
  echo "gpu_preflight: could not write $out" >&2
  exit 1
}
if [[ $ok == true ]]; then
  echo "gpu_preflight: ok: glibc ${glibc:-?} (the kit needs ${needed:-?}), GPU ${gpu:-none}, driver ${driver:-none}, nvcc ${nvcc:-none}"
  exit 0
fi
echo "gpu_preflight: NOT ok ($out):" >&2
printf '  %s\n' "${problems[@]}" >&2
exit 1
