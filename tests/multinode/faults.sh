#!/usr/bin/env bash
# Cross-node faults on 2 fake hosts x 2 ranks, each case timed from the fault: every cohortrun,
# on both sides, must end with an error within COHORT_TIMEOUT + 5 s that names what went away
# (the store's node within COHORT_TIMEOUT + 3 s when a link is cut).
#   cut 1     node 1's link goes down mid-training (the store stays with node 0)
#   cut 0     node 0's link goes down: the store's host vanishes without a word
#   kill 0    every process on node 0 is killed (SIGKILL): the store dies, its sockets close
#   wrong     node 1 is started with a --master-addr where no store runs
source "$1/tests/support/multinode.sh" "$1" "$2"
timeout_s=6
export COHORT_TIMEOUT=${timeout_s}s
bound=$((timeout_s + 5))
cluster_up 2

# The store's node diagnoses no longer than the deadline when the other node is cut off: its
# watchdog asked for progress ahead of the deadline (Note [Asking ahead of a deadline]), and the
# collectives failed after the first quote it (Note [Failing expired collectives in order]).
# What remains is the wait for the worker blocked in Gloo, which ends at Gloo's own timeout, the
# deadline + 2 s (Note [Host worker teardown]): each rank ends about 8 s after the cut.
store_bound=$((timeout_s + 3))

# within NAME FROM NODE [BOUND]: node NODE's cohortrun ended with an error within BOUND (default
# $bound) seconds after FROM.
within() {
  local name=$1 from=$2 node=$3 limit=${4:-$bound} status took
  wait_node "$node"
  status=$?
  took=$(seconds "$from" "${node_ended[$node]}")
  check "$name: node $node ends with an error after ${took} s (bound $limit s)" \
    "$([ $status -ne 0 ] && awk -v t="$took" -v b="$limit" 'BEGIN { exit !(t <= b) }'; echo $?)" \
    "exit $status after $took s: $(grep -v '^\[rank [0-9]*\]   #' "$work/node$node.log" | tail -n 4)"
}

# names NAME NODE REGEX: node NODE's output says REGEX.
names() {
  check "$1: node $2 says /$3/" "$(grep -Eq "$3" "$work/node$2.log"; echo $?)" \
    "$(grep -E 'node_worker:|cohortrun:' "$work/node$2.log" | head -n 3 | cut -c1-400)"
}

# start_training PORT: 2 x 2 ranks doing all-reduces, 50 ms apart; returns once steps run.
start_training() {
  for n in 0 1; do
    master_port=$1 start_node $n 2 2 "$node_worker" steps 100000 50
  done
  for _ in $(seq 200); do
    grep -q 'step 5$' "$work/node1.log" 2>/dev/null && grep -q 'step 5$' "$work/node0.log" &&
      return 0
    sleep 0.1
  done
  echo "the ranks did not start training"
  tail -n 5 "$work"/node*.log
  exit 1
}

# Node 1's link is cut: node 0 names node 1's ranks; node 1 names the store's node.
start_training 29531
fault=$(now)
"$fake_cluster" cut 1
within "cut 1" "$fault" 0 "$store_bound"
within "cut 1" "$fault" 1
names "cut 1" 0 'node 1 \(ranks 2, 3\) does not answer'
names "cut 1" 1 'node 0 \(ranks 0, 1\), where the store runs'
"$fake_cluster" mend 1

# Node 0's link is cut: the same, seen from the other side.
start_training 29532
fault=$(now)
"$fake_cluster" cut 0
within "cut 0" "$fault" 0 "$store_bound"
within "cut 0" "$fault" 1
names "cut 0" 0 'node 1 \(ranks 2, 3\) does not answer'
names "cut 0" 1 'node 0 \(ranks 0, 1\), where the store runs'
"$fake_cluster" mend 0

# Node 0 dies (every process killed): node 1 ends with an error, no hang.
start_training 29533
fault=$(now)
"$fake_cluster" stop 0 --kill
within "kill 0" "$fault" 1
wait_node 0
names "kill 0" 1 'node 0 \(ranks 0, 1\), where the store runs'

# A wrong --master-addr on node 1: both nodes end before the deadline passes by much, node 1
# saying where it looked, node 0 which node never came.
started=$(now)
master_port=29534 start_node 0 2 2 "$node_worker" layout
master_addr=10.99.0.77 master_port=29534 start_node 1 2 2 "$node_worker" layout
within "wrong address" "$started" 0
within "wrong address" "$started" 1
names "wrong address" 1 '10\.99\.0\.77:29534'
names "wrong address" 0 'node 1 of 2 never reported'
finish
