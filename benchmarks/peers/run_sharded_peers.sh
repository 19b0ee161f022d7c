#!/usr/bin/env bash
# cohort's sharded modes against plain data parallel and PyTorch's peers, side by side in one run:
# train_mlp on 4 host ranks with --zero 0 (plain data parallel), --zero 2 and --zero 3, PyTorch
# DDP and PyTorch FSDP2 (torch_ddp_mlp.py --wrap fsdp2: fully_shard on every Linear), all
# on the same model, batch and optimizer (AdamW), one BLAS thread per rank. Every round runs each
# program once, in an order that rotates from round to round, so load on the machine hits all
# alike; the summary (summarize_sharded.py) gives medians over rounds, the ratios the issue asks
# for, each mode's bytes per parameter from train_mlp's memory report, and the load average
# before each program.
#
#   benchmarks/peers/run_sharded_peers.sh [--build build/host-only] [--rounds 3] [--out DIR]
#       [--ranks 4] [--mlp "--hidden 2048 --layers 6"] [--steps 20] [--warmup 3]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/common.sh
source "$here/../../scripts/lib/common.sh"

build="$cohort_root/build/host-only"
rounds=3
ranks=4
mlp="--hidden 2048 --layers 6"
steps=20
warmup=3
out=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --mlp) mlp=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "run_sharded_peers.sh: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
out=${out:-$build/peers/sharded-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
cohortrun="$build/tools/cohortrun/cohortrun"
train="$build/examples/train_mlp/train_mlp"
for program in "$cohortrun" "$train"; do
  [ -x "$program" ] || { echo "run_sharded_peers.sh: $program is not built (cmake --build $build)" >&2; exit 1; }
done
python=""
if python=$(ensure_torch_venv); then
  echo "PyTorch peers: $python"
else
  python=""
  echo "PyTorch peers: skipped (torch could not be installed; see above)"
fi
{
  echo "mlp $mlp"
  echo "ranks $ranks"
  echo "steps $steps"
  echo "warmup $warmup"
  echo "commit $(git -C "$cohort_root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "date $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) hardware threads"
} >"$out/settings.txt"

read -r -a mlp_args <<<"$mlp"
record_load() { echo "$1 $2 $(cut -d' ' -f1 /proc/loadavg)" >>"$out/load.txt"; }
run_cohort() {  # round, stage
  record_load "$1" "zero$2"
  # The test split, scored after the timed steps, is kept small: it only costs wall time.
  "$cohortrun" --nproc-per-node "$ranks" "$train" "${mlp_args[@]}" --zero "$2" \
    --steps "$((steps + warmup))" --warmup-steps "$warmup" --log-every 0 --test-samples 256 \
    --json "$out/zero$2-$1.json" >"$out/zero$2-$1.log" 2>&1
}
run_torch() {  # round, wrap, name
  [ -n "$python" ] || return 0
  record_load "$1" "$3"
  "$python" "$here/torch_ddp_mlp.py" --wrap "$2" --ranks "$ranks" "${mlp_args[@]}" \
    --steps "$steps" --warmup "$warmup" >"$out/$3-$1.json" 2>"$out/$3-$1.log"
}
programs=(zero0 zero2 zero3 torch-ddp torch-fsdp2)
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds"
  for k in 0 1 2 3 4; do
    program=${programs[$(((round - 1 + k) % ${#programs[@]}))]}
    case $program in
      zero*) run_cohort "$round" "${program#zero}" ;;
      torch-ddp) run_torch "$round" ddp torch-ddp ;;
      torch-fsdp2) run_torch "$round" fsdp2 torch-fsdp2 ;;
    esac
  done
done
python3 "$here/summarize_sharded.py" "$out" | tee "$out/summary.md"
