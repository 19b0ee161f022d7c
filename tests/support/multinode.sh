# Sourced by the multi-node tests (tests/multinode/*.sh): a fake cluster (scripts/fake-cluster.sh)
# that is removed on every exit path, and cohortrun started on each of its hosts.
#   source tests/support/multinode.sh SOURCE_DIR BUILD_DIR
#   cluster_up 2 [--link 1gbit]          # exits 77 (ctest: skipped) with the reason where it cannot
#   start_node 0 2 2 ARGS...              # host 0: cohortrun --nnodes 2 --nproc-per-node 2 ... ARGS
#   wait_node 0                           # its status; its output is in $work/node0.log
# shellcheck shell=bash
set -uo pipefail

source_dir=$1
build_dir=$2
fake_cluster="$source_dir/scripts/fake-cluster.sh"
cohortrun="$build_dir/tools/cohortrun/cohortrun"
node_worker="$build_dir/tests/multinode/node_worker"
work=$(mktemp -d)
failures=0
declare -A node_pid node_ended

cleanup() {
  [ -z "${COHORT_FAKE_CLUSTER:-}" ] || "$fake_cluster" down -c "$COHORT_FAKE_CLUSTER" || true
  [ -n "${COHORT_KEEP_WORK:-}" ] || rm -rf "$work"
}
trap 'status=$?; cleanup; exit $status' EXIT
trap 'exit 130' INT TERM HUP

cluster_up() {
  local output status
  output=$("$fake_cluster" up "$@" 2>"$work/up.err")
  status=$?
  if [ $status -eq 77 ]; then
    cat "$work/up.err"
    echo "skipped: no fake hosts here"
    exit 77
  fi
  [ $status -eq 0 ] || { cat "$work/up.err"; echo "FAIL fake-cluster up $*"; exit 1; }
  eval "$output"
}

now() { date +%s.%N; }
# seconds FROM [TO]: the seconds from FROM to TO (default now), both `now` values, one decimal.
seconds() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN { printf "%.1f", b - a }'; }

# start_node HOST NNODES NPROC [cohortrun options --] PROGRAM ARGS...: cohortrun on fake host
# HOST, its store at $master_addr (default host 0), in the background; output in
# $work/nodeHOST.log.
start_node() {
  local host=$1 nnodes=$2 nproc=$3
  shift 3
  {
    "$fake_cluster" exec "$host" "$cohortrun" --nnodes "$nnodes" --node-rank "$host" \
      --nproc-per-node "$nproc" --master-addr "${master_addr:-10.99.0.1}" \
      --master-port "${master_port:-29500}" "$@" >"$work/node$host.log" 2>&1
    echo $? >"$work/node$host.status"
    now >"$work/node$host.ended"
  } &
  node_pid[$host]=$!
}

# wait_node HOST: waits for its cohortrun and returns its status; node_ended[HOST] is when it
# ended.
wait_node() {
  wait "${node_pid[$1]}"
  node_ended[$1]=$(cat "$work/node$1.ended")
  return "$(cat "$work/node$1.status")"
}

check() {  # check NAME CONDITION-STATUS DETAIL: counts a failure
  if [ "$2" -eq 0 ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: $3"
    failures=$((failures + 1))
  fi
}

finish() {
  if [ $failures -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all checks passed"
  exit 0
}
