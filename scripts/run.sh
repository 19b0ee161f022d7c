#!/usr/bin/env bash
# The main job: builds what it needs, then starts one rank per GPU (4 host ranks without a GPU)
# with cohortrun. The ranks meet through the TCP store that cohortrun hosts, print the world each
# sees, and all-reduce a vector as a first check of the communicators.
#
#   scripts/run.sh
#   COHORT_RANKS=8 scripts/run.sh       # choose the number of ranks
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

ensure_packages
find_cuda
preset=$(choose_preset default)
echo "cohort: building preset '$preset'"
cmake --preset "$preset" -S "$cohort_root" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target cohortrun hello_world hello_allreduce
build="$cohort_root/build/$preset"

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || echo 0)
fi
ranks=${COHORT_RANKS:-$([ "$gpus" -gt 0 ] && echo "$gpus" || echo 4)}
echo "cohort: $ranks ranks ($([ "$gpus" -gt 0 ] && echo "$gpus GPUs" || echo "no GPU: host backend"))"

"$build/tools/cohortrun/cohortrun" --nproc-per-node "$ranks" "$build/examples/hello_world/hello_world"
"$build/tools/cohortrun/cohortrun" --nproc-per-node "$ranks" \
  "$build/examples/hello_allreduce/hello_allreduce"
