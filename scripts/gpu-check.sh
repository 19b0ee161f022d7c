#!/usr/bin/env bash
# Proves cohort's GPU path on a machine with a GPU, in one call of at most 8 minutes, from a bundle
# that scripts/gpu-bundle.sh made elsewhere (the machine needs only the NVIDIA driver, the CUDA
# runtime libraries and NCCL, from the system or from Python `nvidia` packages).
#
#   scripts/gpu-check.sh --bundle DIR [--out DIR] [--budget SECONDS]
#   (the bundle carries a copy: DIR/gpu-check.sh --bundle DIR)
#
# Steps, most important first; each result is appended to OUT/gpu-report.md as it finishes, so a
# run cut short keeps what ran:
#   1. cohort-doctor; the CUDA runtime, NCCL and cuBLAS loaded against those compiled against
#      (another major version, or a release older than the one compiled against: refused,
#      nothing else runs; nvidia_libraries.py compares full versions);
#   2. the GPU tests (ctest -L gpu --no-tests=error; each test program directly without ctest);
#   3. two NCCL ranks on GPU 0 (distinct NCCL_HOSTID, sockets over lo): hello_allreduce, the
#      comm and DDP suites' rank programs (bin/*_gpu_worker), and
#      train_mlp --precision bf16 --zero1 against the host backend's checksum;
#   4. the host cost of issuing a collective (allreduce_bench --issue-cost), 2 ranks;
#   5. optim_bench (with the device copy ceiling), memory_bench (managed prefetched against
#      cudaMalloc), allreduce_bench, checkpoint_bench's save stall on the GPU, scaling_bench with
#      real compute on one GPU;
#   6. the same MLP step in PyTorch eager, where python3 has torch;
#   7. compute-sanitizer: memcheck and racecheck on the step kernels, memcheck on the sampler and
#      layer kernels, where it is installed.
# Exits 1, with the reason, when nothing can run (no bundle, no nvidia-smi, GPUs that CUDA cannot
# use, no GPU test found) or when a required step failed; 0 when every required step passed.
set -uo pipefail

bundle=""
out_dir="${OUT:-./gpu-check-out}"
budget="${COHORT_GPU_CHECK_BUDGET:-470}"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=${2:-}; shift 2 ;;
    --bundle=*) bundle=${1#*=}; shift ;;
    --out) out_dir=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "gpu-check: $*" >&2; }
die() {  # die REASON: the check cannot run; says why in the report too
  log "FAILED: $1"
  [ -n "${report:-}" ] && printf '\n**Check failed: %s**\n' "$1" >>"$report"
  exit 1
}

mkdir -p "$out_dir" && out_dir=$(cd "$out_dir" && pwd)
report="$out_dir/gpu-report.md"
printf '# cohort GPU check\n\n- Date: %s\n- Host: %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" \
  "$(hostname)" >"$report"

[ -n "$bundle" ] || die "no bundle given: run scripts/gpu-bundle.sh on a build machine and pass --bundle DIR"
[ -d "$bundle" ] || die "the bundle folder '$bundle' does not exist"
bundle=$(cd "$bundle" && pwd)
bin="$bundle/bin"
[ -x "$bin/cohort-doctor" ] || die "'$bundle' is not a cohort GPU bundle ($bin/cohort-doctor is missing): make one with scripts/gpu-bundle.sh"
commit=$(sed -n 's/^commit=//p' "$bundle/BUNDLE_INFO" 2>/dev/null)
echo "- Bundle: \`$bundle\`, cohort commit ${commit:-unknown}" >>"$report"
start_seconds=$SECONDS

# NVIDIA libraries: the CUDA toolkit's first, then Python `nvidia` packages' where they shadow no
# newer copy on the system (full versions: nvidia_libraries.py dirs); what actually loaded is
# reported by the doctor and checked against what cohort was compiled with.
libraries_tool="$bundle/nvidia_libraries.py"
[ -f "$libraries_tool" ] || libraries_tool="$(dirname "$0")/gpu/nvidia_libraries.py"
library_dirs=()
for dir in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && compgen -G "$dir/lib*.so*" >/dev/null && library_dirs+=("$(realpath "$dir")")
done
if command -v python3 >/dev/null 2>&1 && [ -f "$libraries_tool" ]; then
  system_dirs=()
  for dir in "${library_dirs[@]}"; do system_dirs+=(--system-dir "$dir"); done
  while IFS= read -r dir; do library_dirs+=("$dir"); done < <(
    python3 "$libraries_tool" dirs "${system_dirs[@]}" 2>"$out_dir/library-choice.log")
fi
# Libraries the bundle carries packed (lib/NAME.xz, see gpu-bundle.sh), unpacked next to the
# report; the bundle's lib/ follows them, for their own dependencies.
if compgen -G "$bundle/lib/*.xz" >/dev/null; then
  mkdir -p "$out_dir/lib"
  for packed in "$bundle"/lib/*.xz; do
    unpacked=${packed##*/}
    unpacked="$out_dir/lib/${unpacked%.xz}"
    [ -s "$unpacked" ] && continue
    if command -v xz >/dev/null 2>&1; then
      xz -dc "$packed" >"$unpacked.part"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$packed" "$unpacked.part"
    fi || die "cannot unpack $packed (neither xz nor python3's lzma worked)"
    mv "$unpacked.part" "$unpacked"
  done
  library_dirs=("$out_dir/lib" "$bundle/lib" "${library_dirs[@]}")
fi
if [ ${#library_dirs[@]} -gt 0 ]; then
  LD_LIBRARY_PATH="$(IFS=:; echo "${library_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
fi

# ---- results, appended as they come ---------------------------------------------------------
required_failed=0
context=""  # "card, driver, CUDA, NCCL, cohort commit": every number names it
section() { printf '\n## %s\n\n' "$1" >>"$report"; }
result() {  # result NAME PASS|FAIL|SKIP|TIMEOUT NOTE
  printf -- '- **%s** %s%s\n' "$2" "$1" "${3:+: $3}" >>"$report"
  log "$1: $2${3:+ ($3)}"
}
quote() {  # quote FILE [LINES]: the file's tail as a code block
  printf '```\n' >>"$report"
  tail -n "${2:-20}" "$1" >>"$report"
  printf '```\n' >>"$report"
}
# step NAME LIMIT REQUIRED LOG COMMAND...: runs COMMAND under timeout, records the result.
step() {
  local name=$1 limit=$2 required=$3 log_file=$4
  shift 4
  local remaining=$((budget - (SECONDS - start_seconds)))
  if [ "$remaining" -lt 10 ]; then
    result "$name" SKIP "the ${budget}s budget is spent"
    [ "$required" = required ] && required_failed=1
    return 1
  fi
  [ "$limit" -gt "$remaining" ] && limit=$remaining
  local began=$SECONDS status
  timeout --kill-after=5 "$limit" "$@" >"$log_file" 2>&1
  status=$?
  local took=$((SECONDS - began))
  if [ $status -eq 0 ]; then
    result "$name" PASS "${took}s"
    return 0
  fi
  if [ $status -eq 124 ] || [ $status -eq 137 ]; then
    result "$name" TIMEOUT "killed after ${limit}s"
  else
    result "$name" FAIL "exit $status after ${took}s"
  fi
  quote "$log_file" 25
  [ "$required" = required ] && required_failed=1
  return 1
}

# ---- 1. the machine, the doctor and the versions ---------------------------------------------
section "1. Machine and versions"
command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi is not installed: no NVIDIA driver on this machine"
gpu_table=$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1) ||
  die "nvidia-smi failed: $gpu_table"
[ -n "$gpu_table" ] || die "nvidia-smi lists no GPU"
card=$(head -n 1 <<<"$gpu_table" | cut -d, -f2 | sed 's/^ *//')
driver=$(head -n 1 <<<"$gpu_table" | cut -d, -f4 | sed 's/^ *//')
echo "- nvidia-smi: $(wc -l <<<"$gpu_table") GPU(s): $(tr '\n' ';' <<<"$gpu_table")" >>"$report"
step "cohort-doctor" 60 optional "$out_dir/doctor.txt" "$bin/cohort-doctor"
"$bin/cohort-doctor" --json >"$out_dir/doctor.json" 2>"$out_dir/doctor-json.log"
json() {  # json KEY...: a value of doctor.json, empty when missing
  python3 - "$out_dir/doctor.json" "$@" <<'PY' 2>/dev/null
import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2:]:
    value = value.get(key) if isinstance(value, dict) else None
print("" if value is None else value)
PY
}
[ -s "$out_dir/doctor.json" ] || die "cohort-doctor --json wrote nothing: $(tail -n 3 "$out_dir/doctor-json.log")"
gpus=$(json gpu_count)
if [ "${gpus:-0}" = "0" ]; then
  die "nvidia-smi sees GPUs but CUDA cannot use them: $(json gpu_unavailable_reason) (a driver older than the CUDA runtime needs, or CUDA_VISIBLE_DEVICES)"
fi
mismatch=""
echo "- Libraries (loaded / compiled against):" >>"$report"
for library in "cuda runtime" nccl cublas cudnn; do
  loaded=$(json versions "$library" loaded)
  compiled=$(json versions "$library" compiled)
  echo "  - $library: ${loaded:-none} / ${compiled:-none}" >>"$report"
  if [ -n "$loaded" ] && [ -n "$compiled" ]; then
    # Full versions (major.minor; NCCL's major.minor.patch) where python3 can compare them.
    if [ -f "$libraries_tool" ] && command -v python3 >/dev/null 2>&1; then
      why=$(python3 "$libraries_tool" fits "$library" "$loaded" "$compiled") || mismatch+="$why; "
    elif [ "${loaded%%.*}" != "${compiled%%.*}" ]; then
      mismatch+="$library $loaded loaded but compiled against $compiled; "
    fi
  fi
done
[ -z "$mismatch" ] || die "refusing to run with another major version or an older release: ${mismatch}put the matching library first on LD_LIBRARY_PATH (now: ${LD_LIBRARY_PATH:-empty})"
context="$card, driver $driver, CUDA $(json versions "cuda runtime" loaded), NCCL $(json versions nccl loaded), cohort ${commit:-unknown}"
echo "- Every number below: $context" >>"$report"
# The doctor's GPU health comes through NVML and sysfs (links, PCIe width and generation, ECC,
# remapped rows, clocks, persistence, MIG, RDMA ports): on a real driver NVML must see every GPU
# nvidia-smi lists, and the doctor's collectives must be right on NCCL.
nvml_seen=$(python3 - "$out_dir/doctor.json" <<'PY' 2>/dev/null
import json, sys
health = json.load(open(sys.argv[1])).get("gpu_health") or {}
if health.get("nvml_loaded"):
    gpus = health.get("gpus", [])
    print("%d GPU(s), driver %s; PCIe %s; link matrix %s" % (
        len(gpus), health.get("driver_version"),
        ", ".join("GPU%d Gen%s x%s of Gen%s x%s" % (g["index"], g["pcie"]["generation"],
                  g["pcie"]["width"], g["pcie"]["max_generation"], g["pcie"]["max_width"])
                  for g in gpus if g.get("pcie")),
        health.get("link_matrix")))
PY
)
if [ -n "$nvml_seen" ] && [ "${nvml_seen%% *}" = "$(wc -l <<<"$gpu_table")" ]; then
  result "cohort-doctor GPU health through NVML" PASS "$nvml_seen"
else
  result "cohort-doctor GPU health through NVML" FAIL "NVML saw: ${nvml_seen:-nothing} (nvidia-smi: $(wc -l <<<"$gpu_table") GPU(s))"
fi
step "cohort-doctor --collective (NCCL, every collective checked)" 60 optional \
  "$out_dir/doctor-collective.log" "$bin/cohort-doctor" --collective --bytes 64M

# ---- 2. the GPU tests -------------------------------------------------------------------------
section "2. GPU tests"
if command -v ctest >/dev/null 2>&1; then
  step "ctest -L gpu" 240 required "$out_dir/ctest-gpu.log" \
    ctest --test-dir "$bundle" -L gpu --no-tests=error --output-on-failure
  grep -E "tests passed|No tests were found" "$out_dir/ctest-gpu.log" | tail -n 1 >>"$report"
  # One line per test program (the CNN layers' GPU-vs-host test among them), as ctest ended it.
  grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$out_dir/ctest-gpu.log" |
    sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /  - /; s/ \.{2,}/:/' >>"$report"
else
  ran_any=0
  for test in $(sed -n 's/^gpu_tests=//p' "$bundle/BUNDLE_INFO"); do
    step "$test" 120 required "$out_dir/$test.log" "$bin/$test" --gtest_brief=1 && ran_any=1
    grep -q "SKIPPED" "$out_dir/$test.log" && result "$test" FAIL "skipped tests on a GPU machine" && required_failed=1
  done
  [ "$ran_any" = 1 ] || die "no GPU test ran (the bundle lists: $(sed -n 's/^gpu_tests=//p' "$bundle/BUNDLE_INFO"))"
fi
grep -h "SKIPPED\|Skipped" "$out_dir"/ctest-gpu.log 2>/dev/null | head -n 5 >>"$report"

# ---- 3. two NCCL ranks on one GPU --------------------------------------------------------------
section "3. Two NCCL ranks on GPU 0 ($context)"
# Each rank claims a host of its own, so NCCL does not refuse two ranks on one GPU of one host;
# they talk through sockets over loopback.
# shellcheck disable=SC2016  # expanded by each rank's shell
two_ranks=(env CUDA_VISIBLE_DEVICES=0 COHORT_ALLOW_SHARED_GPU=1 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
  "$bin/cohortrun" --nproc-per-node 2
  bash -c 'NCCL_HOSTID="cohort-gpu-check-${COHORT_LOCAL_RANK:-${LOCAL_RANK:-0}}" exec "$@"' rank)
step "hello_allreduce, 2 ranks" 60 required "$out_dir/hello-2.log" "${two_ranks[@]}" "$bin/hello_allreduce"
# The rank programs of the comm and DDP GPU suites (ctest above starts them through the tests'
# process helper; here cohortrun starts them, as a user would).
for worker in "$bin"/*_gpu_worker; do
  [ -x "$worker" ] || continue
  step "$(basename "$worker"), 2 ranks" 90 required "$out_dir/$(basename "$worker")-2.log" "${two_ranks[@]}" "$worker"
done
mlp_args=(--precision bf16 --zero1 --steps 20 --global-batch 256 --seed 7)
step "train_mlp ${mlp_args[*]}, host backend, 2 ranks" 90 required "$out_dir/mlp-host.log" \
  "$bin/train_mlp" --host --ranks 2 "${mlp_args[@]}" --json "$out_dir/mlp-host.json"
step "train_mlp ${mlp_args[*]}, NCCL, 2 ranks" 90 required "$out_dir/mlp-nccl.log" \
  "${two_ranks[@]}" "$bin/train_mlp" "${mlp_args[@]}" --json "$out_dir/mlp-nccl.json"
checksum() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["param_checksum"])' "$1" 2>/dev/null; }
host_sum=$(checksum "$out_dir/mlp-host.json")
gpu_sum=$(checksum "$out_dir/mlp-nccl.json")
if [ -n "$host_sum" ] && [ -n "$gpu_sum" ] &&
   python3 -c 'import sys; h, g = map(float, sys.argv[1:]); sys.exit(0 if abs(h - g) <= 1e-2 * max(1.0, abs(h)) else 1)' "$host_sum" "$gpu_sum"; then
  result "train_mlp checksum, NCCL against host" PASS "$gpu_sum against $host_sum (bf16: within 1e-2 relative)"
else
  result "train_mlp checksum, NCCL against host" FAIL "NCCL ${gpu_sum:-none} against host ${host_sum:-none}"
  required_failed=1
fi

# ---- 4. host cost per collective ----------------------------------------------------------------
section "4. Host cost of issuing a collective ($context)"
if step "allreduce_bench --issue-cost, 2 ranks" 60 required "$out_dir/issue-cost.log" \
     "${two_ranks[@]}" "$bin/allreduce_bench" --issue-cost 2000 -b 8 -e 8 -n 5 -w 2; then
  grep "host cost" "$out_dir/issue-cost.log" >>"$report"
fi

# ---- 5. benchmarks ------------------------------------------------------------------------------
section "5. Benchmarks ($context)"
# A bare number of seconds: Google Benchmark 1.7 (Debian 12, linked in here) refuses the "0.05s"
# form that 1.8 prefers.
gbench=(--benchmark_min_time=0.05 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true)
if step "optim_bench" 60 optional "$out_dir/optim_bench.log" "$bin/optim_bench" --benchmark_filter='Cuda|Copy' "${gbench[@]}"; then
  quote "$out_dir/optim_bench.log" 20
fi
if step "memory_bench" 60 optional "$out_dir/memory_bench.log" "$bin/memory_bench" --benchmark_filter='Managed|DeviceMalloc|Ceiling|Stream' "${gbench[@]}"; then
  quote "$out_dir/memory_bench.log" 20
fi
if step "allreduce_bench, 2 ranks, every collective" 60 optional "$out_dir/allreduce_bench.log" "${two_ranks[@]}" "$bin/allreduce_bench" --collective all -b 1K -e 64M -f 8 -n 10 -w 3 --json "$out_dir/allreduce_bench.json"; then
  quote "$out_dir/allreduce_bench.log" 20
fi
# The checkpoint stall where it matters: the copy is a DMA into pinned memory, the step's compute
# GEMMs on the GPU (docs/checkpoint.md, "Performance").
if step "checkpoint_bench, 1 GPU, 100 ms of GEMMs per step" 90 optional "$out_dir/checkpoint_bench.log" \
     "$bin/checkpoint_bench" --gpu --ranks 1 --elements 4000000 --repeats 3 --steps 8 --compute-ms 100 \
     --dir "$out_dir/checkpoint-bench-files"; then
  quote "$out_dir/checkpoint_bench.log" 16
fi
# No --ranks: that option asks for host ranks as threads; without it scaling_bench takes every
# GPU, here the one.
if step "scaling_bench mlp, real compute, 1 GPU" 90 optional "$out_dir/scaling_bench.log" \
     "$bin/scaling_bench" --workload mlp --compute real --steps 20 --warmup 5 \
     --json "$out_dir/scaling_mlp.json"; then
  quote "$out_dir/scaling_bench.log" 15
fi
if step "scaling_bench resnet50, real cuDNN convolutions, 1 GPU" 90 optional "$out_dir/scaling_bench_resnet50.log" \
     "$bin/scaling_bench" --workload resnet50 --compute real --steps 10 --warmup 3 \
     --json "$out_dir/scaling_resnet50.json"; then
  quote "$out_dir/scaling_bench_resnet50.log" 12
fi
# --precision on real compute: GPT-2's GEMMs in BF16 on tensor cores, bf16 gradients with fp32
# master weights, the throughput in tokens/s.
if step "scaling_bench gpt2-124m bf16, 1 GPU" 90 optional "$out_dir/scaling_bench_gpt2_bf16.log" \
     "$bin/scaling_bench" --workload gpt2-124m --compute real --precision bf16 --steps 10 \
     --warmup 3 --json "$out_dir/scaling_gpt2_bf16.json"; then
  quote "$out_dir/scaling_bench_gpt2_bf16.log" 12
fi

# ---- 6. the same MLP step in PyTorch ----------------------------------------------------------
section "6. PyTorch eager, the same MLP step ($context)"
if command -v python3 >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null &&
   [ -f "$bundle/torch_mlp_step.py" ]; then
  step "PyTorch eager MLP step" 90 optional "$out_dir/torch.log" python3 "$bundle/torch_mlp_step.py" &&
    quote "$out_dir/torch.log" 10
  grep "samples/s" "$out_dir/scaling_bench.log" 2>/dev/null | tail -n 2 >>"$report"
else
  result "PyTorch eager MLP step" SKIP "python3 has no CUDA-enabled torch here (or the bundle lacks torch_mlp_step.py)"
fi

# ---- 7. compute-sanitizer -----------------------------------------------------------------------
section "7. compute-sanitizer on the step, sampler and layer kernels"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
if [ -n "$sanitizer" ] && [ -x "$bin/test_optim_gpu" ]; then
  # The optimizer kernels under both tools, leaving out the test that makes a cudaMemcpy fail on
  # purpose (memcheck reports its API errors: 3 of them on 2026-12-04); memcheck alone on the
  # sampler's Thrust permutation and gather and on the layers' kernels.
  sanitized=(
    "memcheck test_optim_gpu --gtest_filter=CudaKernel*:-*ALaunchIsNotBlamedForAnEarlierUnrelatedError"
    "racecheck test_optim_gpu --gtest_filter=CudaKernel*:-*ALaunchIsNotBlamedForAnEarlierUnrelatedError"
    "memcheck test_sampler_gpu"
    "memcheck test_cnn_layers_gpu"
  )
  for entry in "${sanitized[@]}"; do
    read -r tool program filter <<<"$entry"
    [ -x "$bin/$program" ] || continue
    step "compute-sanitizer --tool $tool $program" 90 optional "$out_dir/sanitizer-$tool-$program.log" \
      "$sanitizer" --tool "$tool" --error-exitcode 3 "$bin/$program" ${filter:+"$filter"}
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out_dir/sanitizer-$tool-$program.log" >>"$report"
  done
else
  result "compute-sanitizer" SKIP "not installed here"
fi

section "Summary"
echo "- Total: $((SECONDS - start_seconds))s of a ${budget}s budget; logs in \`$out_dir\`" >>"$report"
if [ "$required_failed" = 1 ]; then
  echo "- **A required step failed.**" >>"$report"
  log "a required step failed; report: $report"
  exit 1
fi
echo "- Every required step passed." >>"$report"
log "report: $report"
