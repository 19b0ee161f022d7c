#!/usr/bin/env bash
# Packs everything a GPU machine needs to check cohort into one self-contained folder, built here
# without a GPU: every GPU test, benchmark and example, cohortrun and cohort-doctor, the scripts
# that run them (gpu-check.sh), and every shared library they load except those a GPU machine
# brings itself (the NVIDIA driver, the CUDA runtime libraries, NCCL, cuBLAS, cuDNN, glibc,
# libstdc++, libgcc). Programs find the bundled libraries through their $ORIGIN rpath.
#
#   scripts/gpu-bundle.sh                       # builds the ci preset, writes build/ci/gpu-bundle
#   scripts/gpu-bundle.sh --out DIR             # somewhere else
#   scripts/gpu-bundle.sh --build-dir DIR --no-build   # from a finished build, compiling nothing
#   scripts/gpu-bundle.sh --check DIR           # only the ldd check of an existing bundle
#
# Layout: bin/ (programs, stripped), lib/ (libraries; those over 8 MiB as NAME.xz, which
# gpu-check.sh unpacks), gpu-check.sh, gpu/ (scripts/gpu: the judge, the PyTorch peer, the hooks;
# and fake-cluster.sh), CTestTestfile.cmake (the GPU tests, label gpu, for
# `ctest --test-dir DIR -L gpu`), BUNDLE_INFO (commit, toolkit, build).
# Fails when a program is missing, when a library resolves outside the bundle and off the list
# above, or when the bundle is over COHORT_BUNDLE_LIMIT_MIB (default 56).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

build_dir="$cohort_root/build/ci"
out_dir=""
build=1
check_only=""
limit_mib="${COHORT_BUNDLE_LIMIT_MIB:-56}"
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --out) out_dir=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --check) check_only=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# Libraries a GPU machine provides (cohort_provided_libraries in scripts/lib/common.sh). Anything
# else must resolve inside the bundle.
provided_pattern=$cohort_provided_libraries

# check_bundle DIR: ldd over every ELF in the bundle; prints and counts what resolves outside.
# Packed libraries (lib/*.xz) are checked unpacked, in a copy of the bundle.
check_bundle() {
  local dir status=0 copy packed
  dir=$(cd "$1" && pwd)
  if ! compgen -G "$dir/lib/*.xz" >/dev/null; then
    check_unpacked "$dir" "$dir"
    return $?
  fi
  copy=$(mktemp -d)
  cp -a "$dir/." "$copy/"
  for packed in "$copy"/lib/*.xz; do
    xz -d "$packed"
  done
  check_unpacked "$copy" "$dir (its packed libraries unpacked)" || status=$?
  rm -rf "$copy"
  return $status
}
check_unpacked() {  # check_unpacked DIR NAME
  local dir bad=0 file line name path
  dir=$(cd "$1" && pwd)
  while IFS= read -r -d '' file; do
    [ "$(od -An -c -N4 "$file" | tr -d ' ')" = '177ELF' ] || continue
    while IFS= read -r line; do
      name=$(awk '{print $1}' <<<"$line")
      [ -n "$name" ] || continue
      [[ "$line" == *"=>"* ]] || continue  # the vdso and the loader itself
      path=$(sed -n 's/.*=> \([^ ]*\).*/\1/p' <<<"$line")
      if [[ "$(basename "$name")" =~ $provided_pattern ]]; then
        continue
      fi
      if [ "$path" = "not" ] || [ -z "$path" ]; then
        echo "gpu-bundle: ${file#"$dir"/} needs $name, which is neither in the bundle nor provided by a GPU machine" >&2
        bad=$((bad + 1))
      elif [[ "$(realpath "$path")" != "$dir"/* ]]; then
        echo "gpu-bundle: ${file#"$dir"/} loads $name from $path, outside the bundle" >&2
        bad=$((bad + 1))
      fi
    done < <(LD_LIBRARY_PATH= ldd "$file" 2>/dev/null || true)
  done < <(find "$dir/bin" "$dir/lib" -type f -print0)
  if [ "$bad" -gt 0 ]; then
    echo "gpu-bundle: $bad libraries resolve outside $2" >&2
    return 1
  fi
  echo "gpu-bundle: every library of $2 resolves inside it or is one a GPU machine provides"
}

if [ -n "$check_only" ]; then
  check_bundle "$check_only"
  exit $?
fi

if [ "$build" = 1 ]; then
  ensure_packages
  find_cuda
  command -v nvcc >/dev/null || { echo "gpu-bundle: nvcc not found: the bundle needs the CUDA toolkit" >&2; exit 1; }
  cmake --preset ci -S "$cohort_root" >/dev/null
  cmake --build "$build_dir" -j "$(nproc)"
fi
command -v patchelf >/dev/null || { echo "gpu-bundle: patchelf is missing (apt-get install patchelf)" >&2; exit 1; }
[ -f "$build_dir/CMakeCache.txt" ] || { echo "gpu-bundle: $build_dir is not a build folder (run without --no-build, or cmake --preset ci)" >&2; exit 1; }
grep -q '^COHORT_WITH_CUDA:BOOL=ON' "$build_dir/CMakeCache.txt" ||
  { echo "gpu-bundle: $build_dir was built without CUDA: a GPU bundle needs the ci preset" >&2; exit 1; }

out_dir=${out_dir:-$build_dir/gpu-bundle}
rm -rf "$out_dir"
mkdir -p "$out_dir/bin" "$out_dir/lib"
out_dir=$(cd "$out_dir" && pwd)

# ---- programs -------------------------------------------------------------------------------
programs=(
  tools/cohortrun/cohortrun
  tools/cohort-doctor/cohort-doctor
  examples/hello_allreduce/hello_allreduce
  examples/hello_world/hello_world
  examples/train_mlp/train_mlp
)
while IFS= read -r program; do
  programs+=("${program#"$build_dir"/}")
done < <(find "$build_dir/benchmarks" "$build_dir/examples" -maxdepth 2 -type f -executable \
           -not -name '*.so*' -not -name 'store_bench' -not -path '*/CMakeFiles/*' | sort)
# (store_bench measures the TCP store alone: no GPU path, so it stays out.)
gpu_tests=()
while IFS= read -r program; do
  gpu_tests+=("$(basename "$program")")
  programs+=("${program#"$build_dir"/}")
done < <(find "$build_dir/tests" -type f -executable -name 'test_*_gpu' -not -path '*/CMakeFiles/*' | sort)
# Rank programs that the GPU tests start as processes (tests/**/*_gpu_worker): a test finds them
# beside itself in bin/.
while IFS= read -r program; do
  programs+=("${program#"$build_dir"/}")
done < <(find "$build_dir/tests" -type f -executable -name '*_gpu_worker' -not -path '*/CMakeFiles/*' | sort)
[ ${#gpu_tests[@]} -gt 0 ] || { echo "gpu-bundle: no GPU test (tests/**/test_*_gpu) in $build_dir" >&2; exit 1; }

declare -A seen=()
for program in "${programs[@]}"; do
  [ -n "${seen[$program]:-}" ] && continue
  seen[$program]=1
  if [ ! -x "$build_dir/$program" ]; then
    echo "gpu-bundle: $build_dir/$program is missing: build it first" >&2
    exit 1
  fi
  cp "$build_dir/$program" "$out_dir/bin/"
done

# ---- libraries: everything ldd resolves that a GPU machine does not provide ------------------
copy_libraries() {  # copy_libraries FILE: copies its non-provided libraries into lib/
  local line name path
  while IFS= read -r line; do
    [[ "$line" == *"=>"* ]] || continue
    name=$(awk '{print $1}' <<<"$line")
    path=$(sed -n 's/.*=> \([^ ]*\).*/\1/p' <<<"$line")
    [[ "$name" =~ $provided_pattern ]] && continue
    if [ "$path" = "not" ] || [ -z "$path" ]; then
      echo "gpu-bundle: $1 needs $name, which is not found here" >&2
      return 1
    fi
    [ -e "$out_dir/lib/$name" ] || cp -L "$path" "$out_dir/lib/$name"
  done < <(ldd "$1")
}
for file in "$out_dir"/bin/*; do
  copy_libraries "$file"
done
for file in "$out_dir"/lib/*; do  # their own dependencies (ldd lists them transitively already)
  copy_libraries "$file"
done

# ---- strip, and point the rpaths at lib/ ------------------------------------------------------
chmod u+w "$out_dir"/bin/* "$out_dir"/lib/* 2>/dev/null || true
strip --strip-unneeded "$out_dir"/bin/* "$out_dir"/lib/* 2>/dev/null || true
for file in "$out_dir"/bin/*; do
  # DT_RPATH, not RUNPATH: it also serves the bundled libraries' own dependencies.
  patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$file"
done
for file in "$out_dir"/lib/*; do
  patchelf --set-rpath '$ORIGIN' "$file"
done

# ---- pack the largest libraries -----------------------------------------------------------------
# OpenBLAS alone (every CPU's kernels) is 37 MiB, two thirds of the bundle; xz makes it 4 MiB. A
# library over 8 MiB travels as lib/NAME.xz; gpu-check.sh unpacks it next to its report and puts
# that folder on LD_LIBRARY_PATH (the programs' rpath does not hold it).
packed=()
for file in "$out_dir"/lib/*; do
  [ "$(stat -c %s "$file")" -gt $((8 << 20)) ] || continue
  command -v xz >/dev/null || { echo "gpu-bundle: xz is missing (apt-get install xz-utils)" >&2; exit 1; }
  xz -T1 -3 "$file"
  packed+=("$(basename "$file")")
done

# ---- the check script, the GPU tests for ctest, and what this bundle is -----------------------
cp "$cohort_root/scripts/gpu-check.sh" "$out_dir/"
# gpu/: the judge, its list of allowed skips, the PyTorch peer, the hooks, the choice of NVIDIA
# libraries (nvidia_libraries.py), and the fake hosts.
cp -r "$cohort_root/scripts/gpu" "$out_dir/gpu"
rm -rf "$out_dir/gpu/__pycache__"
cp "$cohort_root/scripts/fake-cluster.sh" "$out_dir/gpu/"
{
  echo "# The GPU tests of this bundle: ctest --test-dir <bundle> -L gpu --no-tests=error"
  for test in "${gpu_tests[@]}"; do
    echo "add_test([=[$test]=] \"\${CMAKE_CURRENT_LIST_DIR}/bin/$test\")"
    echo "set_tests_properties([=[$test]=] PROPERTIES LABELS gpu TIMEOUT 300)"
  done
} >"$out_dir/CTestTestfile.cmake"
commit=$(git -C "$cohort_root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$cohort_root" status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
nvcc_version=$("$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
nccl_header=$(sed -n 's/^NCCL_INCLUDE_DIR:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
nccl_compiled=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v=v (v?".":"") $3} END{print v}' "${nccl_header:-/usr/include}/nccl.h" 2>/dev/null)
cat >"$out_dir/BUNDLE_INFO" <<EOF
commit=$commit$dirty
built=$(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)
cuda_toolkit=${nvcc_version:-unknown}
nccl_compiled=${nccl_compiled:-unknown}
cuda_architectures=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
gpu_tests=${gpu_tests[*]}
packed_libraries=${packed[*]}
EOF

size_mib=$(( $(du -sk "$out_dir" | cut -f1) / 1024 ))
echo "gpu-bundle: $out_dir: $(ls "$out_dir/bin" | wc -l) programs, $(ls "$out_dir/lib" | wc -l) libraries, ${size_mib} MiB"
if [ "$size_mib" -gt "$limit_mib" ]; then
  echo "gpu-bundle: the bundle is ${size_mib} MiB, over the ${limit_mib} MiB limit" >&2
  du -sk "$out_dir"/bin/* "$out_dir"/lib/* | sort -n | tail -n 8 >&2
  exit 1
fi
check_bundle "$out_dir"
