#!/usr/bin/env bash
# The main job: does data-parallel training scale here, how close to linear, and if not, why.
# Builds what it needs, then
#   1. trains the MLP of examples/train_mlp data-parallel, one rank per GPU (4 host ranks without
#      a GPU), started by cohortrun: progress lines, then the test accuracy and the throughput;
#   2. runs benchmarks/scaling_bench on the MLP workload: weak scaling at 1, 2, 4, ... ranks, the
#      efficiency and where the lost percent goes, the model checked against every measured count,
#      and a projection to 8 and 64 GPUs from compute that belongs to the target: on GPUs, this
#      card's measured compute; without one, an A100's published TF32 peak at a stated
#      utilization (COHORT_TARGET_UTILIZATION, default 0.4), never the host's simulated compute.
# Reports and the plot are written to build/<preset>/reports/.
#
#   scripts/run.sh
#   COHORT_RANKS=8 scripts/run.sh       # choose the number of ranks
#   COHORT_TARGET_UTILIZATION=0.3 scripts/run.sh   # without a GPU: the A100 utilization assumed
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

ensure_packages
find_cuda

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || echo 0)
fi
# Without a GPU the job runs on the host backend, which the host-only build has whole: no need to
# compile CUDA for it.
if [ "$gpus" -eq 0 ] && [ -z "${COHORT_PRESET:-}" ]; then
  preset=host-only
else
  preset=$(choose_preset default)
fi
echo "cohort: building preset '$preset'"
cmake --preset "$preset" -S "$cohort_root" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target cohortrun train_mlp scaling_bench
build="$cohort_root/build/$preset"
reports="$build/reports"
mkdir -p "$reports"

ranks=${COHORT_RANKS:-$([ "$gpus" -gt 0 ] && echo "$gpus" || echo 4)}
echo "cohort: $ranks ranks ($([ "$gpus" -gt 0 ] && echo "$gpus GPUs" || echo "no GPU: host backend"))"

echo
echo "== 1. training the MLP data-parallel on $ranks ranks"
"$build/tools/cohortrun/cohortrun" --nproc-per-node "$ranks" \
  "$build/examples/train_mlp/train_mlp" --json "$reports/train_mlp.json"

echo
echo "== 2. weak scaling of the MLP workload, 1 to $ranks ranks"
if [ "$gpus" -gt 0 ]; then
  # Every GPU found, one thread each; real compute, projected from this card's own.
  bench_args=(--target this)
else
  # Host ranks as threads: their compute is a sleep that belongs to no GPU, so the projection
  # starts from an A100's published TF32 peak at a stated utilization, and says so.
  bench_args=(--ranks "$ranks" --precision tf32 --target a100
              --target-utilization "${COHORT_TARGET_UTILIZATION:-0.4}")
fi
"$build/benchmarks/scaling_bench" "${bench_args[@]}" --workload mlp \
  --json "$reports/scaling_mlp.json" --plot "$reports/scaling_mlp.png"
echo
echo "cohort: reports in $reports (train_mlp.json, scaling_mlp.json, scaling_mlp.png)"
