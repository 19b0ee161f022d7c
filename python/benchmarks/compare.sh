#!/usr/bin/env bash
# The torch backend "cohort" against "gloo", side by side on this machine (docs/performance.md):
# each round runs every program once, interleaved, so load hits them alike; medians over rounds.
#
#   python/benchmarks/compare.sh BUILD_DIR [ROUNDS]     # BUILD_DIR: a host-only build with
#                                                       # tests/python's python-site installed
# Per round: dist.all_reduce 1 KiB..64 MiB through each backend (allreduce.py), 1 KiB through
# cohort's c10d backend called directly, cohort's C++ allreduce_bench on the same 4 ranks
# (torchrun's workers, shared memory), and DDP (and its compute alone, no all-reduce) on
# train_mlp's MLP at 77k and 16.9M parameters (ddp_mlp.py). Writes every record to BUILD_DIR/python-compare/*.json and
# prints the summary (summarize.py). The load average is sampled before each program.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
rounds=${2:-3}
python="$root/build/torch-venv/bin/python"
out="$build/python-compare"
mkdir -p "$out"
rm -f "$out"/*.json
export PYTHONPATH="$build/python-site" OMP_NUM_THREADS=1
torchrun=("$python" -m torch.distributed.run --nproc-per-node 4)
load() { echo "{\"program\": \"$1\", \"round\": $2, \"load\": $(cut -d' ' -f1 /proc/loadavg)}" >>"$out/load.json"; }

for round in $(seq 1 "$rounds"); do
  echo "round $round of $rounds ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
  for backend in cohort gloo; do
    load "allreduce-$backend" "$round"
    "${torchrun[@]}" "$here/allreduce.py" --backend "$backend" --sizes 1K:64M \
      2>/dev/null | sed "s/^{/{\"round\": $round, /" >>"$out/allreduce.json"
  done
  # The same 1 KiB through cohort's c10d backend called directly: the backend's own time per
  # call, without torch.distributed's Python layer.
  load allreduce-cohort-backend "$round"
  "${torchrun[@]}" "$here/allreduce.py" --backend cohort --via backend --sizes 1K:1K \
    2>/dev/null | sed "s/^{/{\"round\": $round, /" >>"$out/allreduce.json"
  # The C++ benchmark on the same kind of ranks (torchrun's workers), read from its JSON record,
  # warmed up as long as allreduce.py warms up (0.5 s at least).
  load allreduce_bench "$round"
  "${torchrun[@]}" --no-python "$build/benchmarks/allreduce_bench" -b 1K -e 1K -n 500 -w 10000 \
    --transport shm --json "$out/allreduce-bench-$round.json" >/dev/null 2>&1
  "$python" -c 'import json, sys
record = json.load(open(sys.argv[1]))["records"][0]
print(json.dumps({"round": int(sys.argv[2]), "backend": "cohort C++", "bytes": record["bytes"],
                  "us": record["in_place"]["time_s"] * 1e6}))' \
    "$out/allreduce-bench-$round.json" "$round" >>"$out/allreduce.json"
  for model in "256 3 200 10" "2048 6 12 2"; do
    read -r hidden layers steps warmup <<<"$model"
    # The last run has no all-reduce at all: the step time no transport can go below.
    for backend in cohort gloo "gloo --compute-only"; do
      load "ddp-$hidden-${backend// /}" "$round"
      # shellcheck disable=SC2086  # "gloo --compute-only" is two words
      "${torchrun[@]}" "$here/ddp_mlp.py" --backend $backend --hidden "$hidden" \
        --layers "$layers" --steps "$steps" --warmup "$warmup" 2>/dev/null |
        sed "s/^{/{\"round\": $round, /" >>"$out/ddp.json"
    done
  done
done
"$python" "$here/summarize.py" "$out"
