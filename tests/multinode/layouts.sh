#!/usr/bin/env bash
# cohortrun on each fake host forms one world whose node-local and cross-node communicators match
# where the ranks really run: 2 x 2, 4 x 1, 2 x 3, and nodes of unequal size (2 + 1, 1 + 3). No host name resolves and GLOO_SOCKET_IFNAME is
# unset: each rank binds the address of its route to the store host.
source "$1/tests/support/multinode.sh" "$1" "$2"
unset GLOO_SOCKET_IFNAME
export COHORT_TIMEOUT=20s
cluster_up 4

# expected_lines SIZE...: the layout lines node_worker must print, for nodes of these sizes.
expected_lines() {
  local sizes=("$@") nodes=$# world=0 firsts=() n l i members cross
  for n in "${sizes[@]}"; do firsts+=("$world"); world=$((world + n)); done
  for ((n = 0; n < nodes; n++)); do
    members=""
    for ((i = 0; i < sizes[n]; i++)); do members+="${members:+,}$((firsts[n] + i))"; done
    for ((l = 0; l < sizes[n]; l++)); do
      cross=""
      for ((i = 0; i < nodes; i++)); do
        [ "${sizes[i]}" -gt $l ] && cross+="${cross:+,}$((firsts[i] + l))"
      done
      echo "layout $((firsts[n] + l)) host=node$n node=$n/$nodes local=$l/${sizes[n]}" \
        "local=$members cross=$cross sum=$((world * (world - 1) / 2))"
    done
  done
}

port=29510
# Ranks per node, node by node: 2 x 2, 4 x 1, 2 x 3, and nodes of unequal size.
for layout in 2,2 1,1,1,1 3,3 2,1 1,3; do
  IFS=, read -r -a sizes <<<"$layout"
  nodes=${#sizes[@]}
  port=$((port + 1))
  for ((n = 0; n < nodes; n++)); do
    master_port=$port start_node $n "$nodes" "${sizes[n]}" --no-prefix "$node_worker" layout
  done
  statuses=""
  for ((n = 0; n < nodes; n++)); do
    wait_node $n
    statuses+=" $?"
  done
  cat "$work"/node*.log | sort >"$work/got"
  expected_lines "${sizes[@]}" | sort >"$work/expected"
  diff -u "$work/expected" "$work/got" >"$work/diff"
  check "ranks per node $layout: every rank's node, local and cross communicators (exit:$statuses)" \
    "$([ "$(tr -d ' 0' <<<"$statuses")" = "" ] && [ ! -s "$work/diff" ]; echo $?)" \
    "$(cat "$work/diff")"
  rm -f "$work"/node*.log
done
finish
