#!/usr/bin/env bash
# Runs cohort's GPU checks from an existing build folder and writes a short markdown report.
#
#   scripts/gpu-check.sh                          # build folder build/ci
#   scripts/gpu-check.sh --build-dir DIR          # a build made elsewhere (for sm_90), not rebuilt
#   scripts/gpu-check.sh --lib-dir DIR            # shared libraries carried with it (Gloo, ...)
#   OUT=/tmp/gpu scripts/gpu-check.sh             # report in $OUT/gpu-report.md
#
# Steps, each under `timeout`, all within COHORT_GPU_CHECK_BUDGET seconds (default 280):
#   1. cohort-doctor (text and --json into the report folder);
#   2. every `gpu`-labelled ctest test;
#   3. the GPU micro-benchmarks present in the build (benchmarks/memory_bench, optim_bench,
#      allreduce_bench), with short settings; allreduce_bench under
#      `cohortrun --nproc-per-node <GPUs>`;
#   4. two ranks of allreduce_bench on GPU 0, under each lead for multi-rank NCCL on one GPU:
#      distinct NCCL_HOSTID per rank with NCCL_SOCKET_IFNAME=lo, and NCCL_MULTI_RANK_GPU_ENABLE=1
#      (NCCL 2.30+). Both set COHORT_ALLOW_SHARED_GPU=1, the hook by which a program lets ranks
#      share a GPU. The report says which worked; these runs never fail the script.
#
# Libraries: CUDA, NCCL, cuBLAS and cuDNN are looked for in Python environments' `nvidia`
# packages (site-packages/nvidia/*/lib) and CUDA toolkit folders (/usr/local/cuda*/lib64); the
# build's own lib/ folder or --lib-dir comes first. What is found goes on LD_LIBRARY_PATH.
# A build configured at another path gets that path linked to it (where nothing is there) for the
# absolute paths in its ctest files; the links are removed at the end.
#
# Benchmark arguments: Google Benchmark programs get a short --benchmark_min_time; others get
# --quick when their --help offers it. Override with MEMORY_BENCH_ARGS, OPTIM_BENCH_ARGS,
# ALLREDUCE_BENCH_ARGS.
#
# Without a GPU (no nvidia-smi, or cohort-doctor finds none) it says so, runs the doctor anyway
# and exits 0. With GPUs it exits 1 when a step of 1-3 failed or did not fit in the budget,
# else 0. Everything a step printed is kept in the report folder beside gpu-report.md.
set -uo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo_root/build/ci"
lib_dir=""
out_dir="${OUT:-./gpu-check-out}"
budget="${COHORT_GPU_CHECK_BUDGET:-280}"

usage() {
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --lib-dir) lib_dir=$2; shift 2 ;;
    --lib-dir=*) lib_dir=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

log() { echo "gpu-check: $*"; }

mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
report="$out_dir/gpu-report.md"
if [ ! -d "$build_dir" ]; then
  log "build folder '$build_dir' does not exist (build with: cmake --preset ci && cmake --build --preset ci)"
  missing_build=1
else
  build_dir=$(cd "$build_dir" && pwd)
  missing_build=0
fi
start_seconds=$SECONDS

# ---- Shared libraries -----------------------------------------------------------------------

library_dirs=()
add_library_dir() {
  local dir=$1 existing
  [ -d "$dir" ] || return 0
  compgen -G "$dir/*.so*" >/dev/null || return 0
  dir=$(realpath "$dir")
  for existing in "${library_dirs[@]}"; do
    [ "$existing" = "$dir" ] && return 0
  done
  library_dirs+=("$dir")
}

find_library_dirs() {
  if [ -n "$lib_dir" ]; then
    add_library_dir "$lib_dir"
  fi
  add_library_dir "$build_dir/lib"
  local dir
  if command -v python3 >/dev/null 2>&1; then
    # The nvidia-* wheels (nvidia-cuda-runtime, nvidia-nccl, nvidia-cublas, nvidia-cudnn...)
    # share the namespace package `nvidia`, one lib/ folder per wheel.
    while IFS= read -r dir; do
      add_library_dir "$dir"
    done < <(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
paths = list(sys.path)
try:
    paths += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
roots += [os.path.join(p, "nvidia") for p in paths]
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "*", "lib"))):
        print(lib)
PY
)
  fi
  for dir in /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib \
             /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib \
             /usr/local/cuda/targets/x86_64-linux/lib; do
    add_library_dir "$dir"
  done
}

find_library_dirs
if [ ${#library_dirs[@]} -gt 0 ]; then
  joined=$(IFS=:; echo "${library_dirs[*]}")
  export LD_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
log "library folders put on LD_LIBRARY_PATH (${#library_dirs[@]}):"
for dir in "${library_dirs[@]}"; do
  log "  $dir"
done

# ---- A build folder configured elsewhere ----------------------------------------------------
# ctest files name absolute paths. When the build was configured at another path, link that path
# here (only where nothing exists), and remove the links at the end.

created_links=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local link
  for link in "${created_links[@]}"; do
    [ -L "$link" ] && rm -f "$link"
  done
}
trap cleanup EXIT

link_if_missing() {  # link_if_missing WHAT WANTED ACTUAL
  local what=$1 wanted=$2 actual=$3
  [ -n "$wanted" ] || return 0
  [ "$(realpath -m "$wanted")" = "$(realpath "$actual")" ] && return 0
  if [ -e "$wanted" ]; then
    log "note: the $what was at $wanted when configured, which exists here (not $actual); ctest uses it"
    return 0
  fi
  if mkdir -p "$(dirname "$wanted")" 2>/dev/null && ln -s "$actual" "$wanted" 2>/dev/null; then
    created_links+=("$wanted")
    log "the $what was at $wanted when configured: linked it to $actual for ctest"
  else
    log "warning: the $what was at $wanted when configured and cannot be linked here; ctest may not find its tests"
  fi
}

cache_value() {
  sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" 2>/dev/null | head -n 1
}

if [ "$missing_build" = 0 ] && [ -f "$build_dir/CMakeCache.txt" ]; then
  link_if_missing "build folder" "$(cache_value CMAKE_CACHEFILE_DIR)" "$build_dir"
  link_if_missing "source folder" "$(cache_value CMAKE_HOME_DIRECTORY)" "$repo_root"
fi

# ---- Steps ------------------------------------------------------------------------------------

step_names=()
step_results=()
step_seconds=()
step_notes=()
step_logs=()
required_failed=0
shared_names=()   # the multi-rank-on-one-GPU settings tried, their results and first errors
shared_results=()
shared_notes=()

record() {
  step_names+=("$1"); step_results+=("$2"); step_seconds+=("$3"); step_notes+=("$4"); step_logs+=("$5")
}

# run_step NAME LIMIT LOG REQUIRED COMMAND...: runs COMMAND under timeout, output in LOG.
# Sets last_status (0 pass, else the exit status; 124 timeout; -1 skipped).
run_step() {
  local name=$1 limit=$2 log_file=$3 required=$4
  shift 4
  local remaining=$((budget - (SECONDS - start_seconds)))
  if [ "$remaining" -lt 15 ]; then
    record "$name" "SKIP" 0 "time budget of ${budget}s spent" ""
    [ "$required" = "required" ] && required_failed=1
    last_status=-1
    return 0
  fi
  [ "$limit" -gt "$remaining" ] && limit=$remaining
  log "running $name (at most ${limit}s)"
  local began=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$log_file" 2>&1
  last_status=$?
  local took=$((SECONDS - began))
  local result
  case $last_status in
    0) result="PASS" ;;
    124|137) result="TIMEOUT"; last_status=124 ;;
    *) result="FAIL" ;;
  esac
  if [ "$result" != "PASS" ] && [ "$required" = "required" ]; then
    required_failed=1
  fi
  local note="exit $last_status"
  [ "$result" = "TIMEOUT" ] && note="killed after ${limit}s"
  [ "$result" = "PASS" ] && note=""
  record "$name" "$result" "$took" "$note" "$log_file"
  log "  $name: $result (${took}s)"
}

# Appends to the last step's note.
note_last() {
  local index=$((${#step_notes[@]} - 1))
  step_notes[index]="${step_notes[index]:+${step_notes[index]}; }$1"
}

json_get() {  # json_get FILE PYTHON-SUBSCRIPT, e.g. '["gpu_count"]'
  python3 -c 'import json, sys
value = json.load(open(sys.argv[1]))
for key in json.loads(sys.argv[2]):
    value = value[key] if value is not None else None
print("" if value is None else value)' "$1" "$2" 2>/dev/null
}

# The arguments for benchmark NAME (program PATH): the override variable, else short settings.
bench_args() {
  local name=$1 path=$2 override_name help
  override_name="$(echo "$name" | tr '[:lower:]' '[:upper:]')_ARGS"
  if [ -n "${!override_name+set}" ]; then
    echo "${!override_name}"
    return
  fi
  help=$(timeout 20 "$path" --help 2>&1)
  if grep -q "benchmark_min_time" <<<"$help"; then
    if [ "$name" = "memory_bench" ]; then
      echo "--benchmark_filter=Stream --benchmark_min_time=0.05 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true"
    else
      echo "--benchmark_min_time=0.05 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true"
    fi
  elif grep -q -- "--quick" <<<"$help"; then
    echo "--quick"
  fi
}

bench_lines() {  # the lines of a benchmark log worth quoting
  grep -E "(median|/s|GB|bytes|busbw|algbw|items)" "$1" | grep -v -E "^\s*$" | tail -n 25
}

# ---- 1. The doctor ----------------------------------------------------------------------------

doctor="$build_dir/tools/cohort-doctor/cohort-doctor"
doctor_json="$out_dir/doctor.json"
doctor_gpus=""
if [ -x "$doctor" ]; then
  if ldd "$doctor" 2>/dev/null | grep -q "not found"; then
    log "cohort-doctor misses libraries: $(ldd "$doctor" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
  fi
  run_step "cohort-doctor" 60 "$out_dir/doctor.txt" required "$doctor"
  # The JSON file gets stdout alone; stderr goes to the step's log.
  # shellcheck disable=SC2016  # expanded by the inner shell
  run_step "cohort-doctor --json" 60 "$out_dir/doctor-json.log" required \
    bash -c '"$0" --json >"$1"' "$doctor" "$doctor_json"
  doctor_gpus=$(json_get "$doctor_json" '["gpu_count"]')
  [ -f "$out_dir/doctor.txt" ] && cat "$out_dir/doctor.txt"
else
  record "cohort-doctor" "SKIP" 0 "not built: $doctor is missing" ""
fi

# ---- Is there a GPU? --------------------------------------------------------------------------

gpu_table=""
no_gpu_reason=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  no_gpu_reason="nvidia-smi is not installed"
  if [ "$doctor_gpus" = "0" ]; then
    no_gpu_reason+="; cohort-doctor: $(json_get "$doctor_json" '["gpu_unavailable_reason"]')"
  fi
elif [ "$doctor_gpus" = "0" ]; then
  no_gpu_reason="cohort-doctor finds no GPU: $(json_get "$doctor_json" '["gpu_unavailable_reason"]')"
else
  gpu_table=$(nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id \
                --format=csv,noheader 2>/dev/null)
  [ -n "$gpu_table" ] || no_gpu_reason="nvidia-smi lists no GPU"
fi
gpu_count=${doctor_gpus:-$(printf '%s\n' "$gpu_table" | grep -c .)}

# ---- 2. GPU tests -----------------------------------------------------------------------------

if [ -z "$no_gpu_reason" ]; then
  if [ "$missing_build" = 0 ]; then
    run_step "ctest -L gpu" 150 "$out_dir/ctest-gpu.log" required \
      ctest --test-dir "$build_dir" -L gpu --output-on-failure
    summary=$(grep -E "tests passed|No tests were found" "$out_dir/ctest-gpu.log" 2>/dev/null | tail -n 1)
    skipped=$(grep -c -- "\*\*\*Skipped\| Skipped " "$out_dir/ctest-gpu.log" 2>/dev/null)
    note_last "${summary:-no summary}${skipped:+, $skipped skipped}"
  else
    record "ctest -L gpu" "SKIP" 0 "no build folder" ""
  fi

  # ---- 3. Benchmarks --------------------------------------------------------------------------

  cohortrun="$build_dir/tools/cohortrun/cohortrun"

  for bench in memory_bench optim_bench allreduce_bench; do
    path="$build_dir/benchmarks/$bench"
    if [ ! -x "$path" ]; then
      record "$bench" "SKIP" 0 "not in this build" ""
      continue
    fi
    read -r -a args <<<"$(bench_args "$bench" "$path")"
    if [ "$bench" = "allreduce_bench" ]; then
      if [ ! -x "$cohortrun" ]; then
        record "$bench" "SKIP" 0 "cohortrun is not in this build" ""
        continue
      fi
      run_step "$bench (cohortrun, $gpu_count GPU ranks)" 120 "$out_dir/$bench.log" required \
        "$cohortrun" --nproc-per-node "$gpu_count" "$path" "${args[@]}"
    else
      run_step "$bench" 90 "$out_dir/$bench.log" required "$path" "${args[@]}"
    fi
    note_last "args: ${args[*]:-none}"
  done

  # ---- 4. Several ranks on one GPU ------------------------------------------------------------

  allreduce="$build_dir/benchmarks/allreduce_bench"
  nccl_loaded=$(json_get "$doctor_json" '["versions", "nccl", "loaded"]')
  if [ -x "$allreduce" ] && [ -x "$cohortrun" ]; then
    read -r -a args <<<"$(bench_args allreduce_bench "$allreduce")"
    try_shared() {  # try_shared LABEL LOG ENV... : two ranks of allreduce_bench on GPU 0
      local label=$1 log_file=$2
      shift 2
      run_step "2 ranks on GPU 0: $label" 60 "$log_file" optional \
        env CUDA_VISIBLE_DEVICES=0 COHORT_ALLOW_SHARED_GPU=1 "$@" \
        "$cohortrun" --nproc-per-node 2 "${per_rank_wrapper[@]}" "$allreduce" "${args[@]}"
      local index=$((${#step_results[@]} - 1))
      shared_names+=("$label")
      shared_results+=("${step_results[index]}")
      shared_notes+=("$(grep -m 1 -o -E "Duplicate GPU[^\"]*|Multiple Ranks[^\"]*|[^ ]*Error[^\"]{0,120}" "$log_file" 2>/dev/null | head -n 1)")
    }
    per_rank_wrapper=()
    try_shared "no setting (expected to fail)" "$out_dir/shared-none.log"
    # Each rank claims its own host, so NCCL does not see two ranks on one GPU of one host; they
    # then talk through sockets over loopback.
    # shellcheck disable=SC2016  # expanded by each rank's shell
    per_rank_wrapper=(bash -c 'NCCL_HOSTID="cohort-gpu-check-rank${COHORT_LOCAL_RANK:-0}" exec "$@"' per-rank)
    try_shared "NCCL_HOSTID per rank, NCCL_SOCKET_IFNAME=lo" "$out_dir/shared-hostid.log" \
      NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
    per_rank_wrapper=()
    if [ -n "$nccl_loaded" ] && [ "$(printf '%s\n2.30.0\n' "$nccl_loaded" | sort -V | head -n 1)" = "2.30.0" ]; then
      try_shared "NCCL_MULTI_RANK_GPU_ENABLE=1" "$out_dir/shared-multirank.log" \
        NCCL_MULTI_RANK_GPU_ENABLE=1
    else
      shared_names+=("NCCL_MULTI_RANK_GPU_ENABLE=1")
      shared_results+=("SKIP")
      shared_notes+=("needs NCCL 2.30 or newer; loaded: ${nccl_loaded:-unknown}")
    fi
  fi
fi

# ---- Report -----------------------------------------------------------------------------------

total_seconds=$((SECONDS - start_seconds))
{
  echo "# cohort GPU check"
  echo
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- Host: $(hostname)"
  if [ -n "$no_gpu_reason" ]; then
    echo "- GPUs: **none** ($no_gpu_reason). Only the doctor ran."
  else
    echo "- GPUs ($gpu_count):"
    while IFS= read -r row; do
      [ -n "$row" ] && echo "  - $row"
    done <<<"$gpu_table"
    echo "  (index, name, memory, driver, PCI bus)"
  fi
  if [ -s "$doctor_json" ]; then
    version() { local value; value=$(json_get "$doctor_json" "$1"); echo "${value:-none}"; }
    echo "- From cohort-doctor: CUDA runtime $(version '["versions", "cuda_runtime"]'), driver for CUDA $(version '["versions", "cuda_driver"]'), NCCL $(version '["versions", "nccl", "loaded"]'), cuBLAS $(version '["versions", "cublas", "loaded"]'), cuDNN $(version '["versions", "cudnn", "loaded"]')"
  fi
  architectures=$(cache_value CMAKE_CUDA_ARCHITECTURES)
  build_type=$(cache_value CMAKE_BUILD_TYPE)
  echo "- Build folder: \`$build_dir\` (build type ${build_type:-unknown}, CUDA architectures ${architectures:-unknown})"
  echo "- Library folders: ${library_dirs[*]:-none found}"
  echo "- Total time: ${total_seconds}s (budget ${budget}s)"
  echo
  echo "## Steps"
  echo
  echo "| step | result | seconds | notes |"
  echo "|---|---|---|---|"
  for i in "${!step_names[@]}"; do
    echo "| ${step_names[i]} | ${step_results[i]} | ${step_seconds[i]} | ${step_notes[i]//|/\\|} |"
  done
  if [ "${#shared_names[@]}" -gt 0 ]; then
    echo
    echo "## Several NCCL ranks on one GPU"
    echo
    echo "Two ranks of allreduce_bench on GPU 0 with COHORT_ALLOW_SHARED_GPU=1 (the hook a program"
    echo "honours to let ranks share a GPU)."
    echo
    echo "| setting | result | first error |"
    echo "|---|---|---|"
    worked=()
    for i in "${!shared_names[@]}"; do
      echo "| ${shared_names[i]} | ${shared_results[i]} | ${shared_notes[i]//|/\\|} |"
      [ "${shared_results[i]}" = "PASS" ] && worked+=("${shared_names[i]}")
    done
    echo
    if [ ${#worked[@]} -gt 0 ]; then
      echo "Worked: ${worked[*]}."
    else
      echo "None worked."
    fi
  fi
  numbers_header=0
  for i in "${!step_names[@]}"; do
    log_file=${step_logs[i]}
    case "${step_names[i]}" in
      memory_bench*|optim_bench*|allreduce_bench*) ;;
      *) continue ;;
    esac
    [ -s "$log_file" ] || continue
    if [ $numbers_header = 0 ]; then
      echo
      echo "## Numbers"
      numbers_header=1
    fi
    echo
    echo "### ${step_names[i]}"
    echo
    echo '```'
    bench_lines "$log_file" 2>/dev/null || tail -n 25 "$log_file"
    echo '```'
  done
  failures_header=0
  for i in "${!step_names[@]}"; do
    case "${step_results[i]}" in FAIL|TIMEOUT) ;; *) continue ;; esac
    [ -s "${step_logs[i]}" ] || continue
    if [ $failures_header = 0 ]; then
      echo
      echo "## Failures (last 40 lines of each)"
      failures_header=1
    fi
    echo
    echo "### ${step_names[i]}"
    echo
    echo '```'
    tail -n 40 "${step_logs[i]}"
    echo '```'
  done
  if [ -s "$doctor_json" ]; then
    echo
    echo "## cohort-doctor warnings and errors"
    echo
    python3 - "$doctor_json" <<'PY' 2>/dev/null || echo "(see doctor.txt)"
import json, sys
findings = [f for f in json.load(open(sys.argv[1]))["findings"] if f["severity"] in ("warn", "error")]
for f in findings:
    advice = f" What to do: {f['advice']}" if f["advice"] else ""
    print(f"- **{f['severity']}** {f['topic']}: {f['message']}.{advice}")
if not findings:
    print("none")
PY
  fi
} >"$report"

log "report: $report"
if [ -n "$no_gpu_reason" ]; then
  log "no GPU here ($no_gpu_reason); ran the doctor only"
  exit 0
fi
exit "$required_failed"
