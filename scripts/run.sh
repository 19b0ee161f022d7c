#!/usr/bin/env bash
# The main job: does data-parallel training scale here, how close to linear, and if not, why.
# Builds what it needs, then
#   1. trains the MLP of examples/train_mlp data-parallel, one rank per GPU (4 host ranks without
#      a GPU), started by cohortrun: progress lines, then the test accuracy and the throughput;
#   2. runs benchmarks/scaling_bench on the MLP workload: weak scaling at 1, 2, 4, ... ranks, the
#      efficiency and where the lost percent goes, and a projection to 8 and 64 GPUs.
# Reports and the plot are written to build/<preset>/reports/.
#
#   scripts/run.sh
#   COHORT_RANKS=8 scripts/run.sh       # choose the number of ranks
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
bench_ranks=(--ranks "$ranks")         # host ranks as threads; their compute is simulated
if [ "$gpus" -gt 0 ]; then
  bench_ranks=()                       # every GPU found, one thread each; real compute
fi
"$build/benchmarks/scaling_bench" "${bench_ranks[@]}" --workload mlp \
  --json "$reports/scaling_mlp.json" --plot "$reports/scaling_mlp.png"
echo
echo "cohort: reports in $reports (train_mlp.json, scaling_mlp.json, scaling_mlp.png)"
