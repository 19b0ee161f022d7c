#!/usr/bin/env bash
# cohort against its peers on this host, side by side in one run: allreduce_bench on 4 ranks over
# shared memory and over Gloo, against Open MPI's MPI_Allreduce (built here) and the memcpy
# ceiling; train_mlp on 4 ranks against PyTorch DDP (gloo), from a virtual environment under the
# build folder when torch can be installed. Every round runs each program once, interleaved, so
# load on the machine hits all alike; the summary gives the median over rounds and the load
# average before each program. Both trainers time --steps steps after --warmup untimed ones.
# --mlp-only leaves out the all-reduce programs (the large models take minutes a round).
#
#   benchmarks/peers/run_host_peers.sh [--build build/host-only] [--rounds 3] [--out DIR]
#       [--ranks 4] [--sizes 1K:64M] [--mlp "--hidden 256 --layers 3"] [--steps 300]
#       [--warmup 10] [--iters 20] [--mlp-only]
# --iters: timed all-reduces per size for cohort and for Open MPI alike (each rank's median is
# taken); with more ranks than cores the rounds scatter, and more iterations steady them.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/common.sh
source "$here/../../scripts/lib/common.sh"

build="$cohort_root/build/host-only"
rounds=3
ranks=4
sizes="1K:64M"
mlp="--hidden 256 --layers 3"
steps=300
warmup=10
mlp_only=0
iters=20
out=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --mlp) mlp=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --mlp-only) mlp_only=1; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "run_host_peers.sh: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
out=${out:-$build/peers/results-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
echo "iters $iters" >"$out/settings.txt"  # for summarize_peers.py
cohortrun="$build/tools/cohortrun/cohortrun"
bench="$build/benchmarks/allreduce_bench"
train="$build/examples/train_mlp/train_mlp"
for program in "$cohortrun" "$bench" "$train"; do
  [ -x "$program" ] || { echo "run_host_peers.sh: $program is not built (cmake --build $build)" >&2; exit 1; }
done
min=${sizes%%:*}
max=${sizes##*:}

# The Open MPI peer, built against the installed Open MPI.
ensure_packages openmpi-bin libopenmpi-dev
mpi_peer="$build/peers/mpi_allreduce"
mkdir -p "$build/peers"
mpicc -O2 -o "$mpi_peer" "$here/mpi_allreduce.c"
to_bytes() { python3 -c "import sys; s=sys.argv[1]; u={'K':1<<10,'M':1<<20,'G':1<<30}.get(s[-1].upper(),1); print(int(float(s.rstrip('KMGkmg')) * u))" "$1"; }
mpirun_args=(--oversubscribe -np "$ranks")
[ "$(id -u)" -eq 0 ] && mpirun_args=(--allow-run-as-root "${mpirun_args[@]}")

python=""
if python=$(ensure_torch_venv); then
  echo "PyTorch peer: $python"
else
  python=""
  echo "PyTorch peer: skipped (torch could not be installed; see above)"
fi

read -r -a mlp_args <<<"$mlp"
# The load average (1 min) before each program: "round program load".
record_load() { echo "$1 $2 $(cut -d' ' -f1 /proc/loadavg)" >>"$out/load.txt"; }
run_cohort_mlp() {
  record_load "$1" train_mlp
  "$cohortrun" --nproc-per-node "$ranks" "$train" "${mlp_args[@]}" --steps "$((steps + warmup))" \
    --warmup-steps "$warmup" --log-every 0 \
    --json "$out/train_mlp-$1.json" >"$out/train_mlp-$1.log" 2>&1
}
run_torch_mlp() {
  [ -n "$python" ] || return 0
  record_load "$1" torch
  "$python" "$here/torch_ddp_mlp.py" --ranks "$ranks" "${mlp_args[@]}" --steps "$steps" \
    --warmup "$warmup" >"$out/torch-$1.json" 2>"$out/torch-$1.log"
}
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds"
  if [ "$mlp_only" -eq 0 ]; then
    for transport in shm gloo; do
      record_load "$round" "allreduce-$transport"
      "$cohortrun" --nproc-per-node "$ranks" "$bench" --transport "$transport" -b "$min" -e "$max" \
        -f 4 -n "$iters" -w 5 --json "$out/allreduce-$transport-$round.json" >"$out/allreduce-$transport-$round.log" 2>&1
    done
    record_load "$round" mpi
    mpirun "${mpirun_args[@]}" "$mpi_peer" "$(to_bytes "$min")" "$(to_bytes "$max")" 4 "$iters" 5 \
      >"$out/mpi-$round.txt" 2>"$out/mpi-$round.log"
  fi
  # The trainers take turns going first, so that neither always meets the other's leftovers.
  if [ $((round % 2)) -eq 1 ]; then
    run_cohort_mlp "$round"; run_torch_mlp "$round"
  else
    run_torch_mlp "$round"; run_cohort_mlp "$round"
  fi
done
python3 "$here/summarize_peers.py" "$out" | tee "$out/summary.md"
