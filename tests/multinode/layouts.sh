#!/usr/bin/env bash
# cohortrun on each fake host forms one world whose node-local and cross-node communicators match
# where the ranks really run: 2 x 2, 4 x 1, 2 x 3. No host name resolves and GLOO_SOCKET_IFNAME is
# unset: each rank binds the address of its route to the store host.
source "$1/tests/support/multinode.sh" "$1" "$2"
unset GLOO_SOCKET_IFNAME
export COHORT_TIMEOUT=20s
cluster_up 4

# expected_line RANK NODES NPROC: the layout line node_worker must print for that rank.
expected_line() {
  local r=$1 nodes=$2 nproc=$3 node local members="" cross="" i
  node=$((r / nproc))
  local=$((r % nproc))
  for ((i = 0; i < nproc; i++)); do members+="${members:+,}$((node * nproc + i))"; done
  for ((i = 0; i < nodes; i++)); do cross+="${cross:+,}$((i * nproc + local))"; done
  local world=$((nodes * nproc))
  echo "layout $r host=node$node node=$node/$nodes local=$local/$nproc local=$members" \
    "cross=$cross sum=$((world * (world - 1) / 2))"
}

port=29510
for layout in 2x2 4x1 2x3; do
  nodes=${layout%x*}
  nproc=${layout#*x}
  port=$((port + 1))
  for ((n = 0; n < nodes; n++)); do
    master_port=$port start_node $n "$nodes" "$nproc" --no-prefix "$node_worker" layout
  done
  statuses=""
  for ((n = 0; n < nodes; n++)); do
    wait_node $n
    statuses+=" $?"
  done
  cat "$work"/node*.log | sort >"$work/got"
  for ((r = 0; r < nodes * nproc; r++)); do expected_line $r "$nodes" "$nproc"; done |
    sort >"$work/expected"
  diff -u "$work/expected" "$work/got" >"$work/diff"
  check "$layout: every rank's node, local and cross communicators (exit:$statuses)" \
    "$([ "$(tr -d ' 0' <<<"$statuses")" = "" ] && [ ! -s "$work/diff" ]; echo $?)" \
    "$(cat "$work/diff")"
  rm -f "$work"/node*.log
done
finish
