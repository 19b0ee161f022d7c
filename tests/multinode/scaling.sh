#!/usr/bin/env bash
# scaling_bench on 2 fake hosts x 2 ranks, with each host's uplink shaped to 10 Mbit/s, then
# 20 Mbit/s, then unshaped: its model, fed by its own link probe, predicts the measured 4-rank
# step within 10% over the shaped links (20% unshaped, where this machine's host noise is most of
# the step; Note [Checking the model]), the JSON says so, and the shaped link shows up as
# exposed communication, not as overhead, most of it the cross-node part of each all-reduce.
source "$1/tests/support/multinode.sh" "$1" "$2"
unset GLOO_SOCKET_IFNAME
export COHORT_TIMEOUT=60s
bench=("$build_dir/benchmarks/scaling_bench" --hidden 256 --layers 4 --bucket-mb 0.25
       --first-bucket-mb 0.25 --target-step-ms 100 --steps 10 --budget-s 20)

port=29550
for link in 10mbit 20mbit unshaped; do
  if [ $link = unshaped ]; then cluster_up 2; else cluster_up 2 --link $link; fi
  port=$((port + 1))
  master_port=$port start_node 0 2 2 --no-prefix "${bench[@]}" --json "$work/$link.json"
  master_port=$port start_node 1 2 2 --no-prefix "${bench[@]}"
  wait_node 0
  s0=$?
  wait_node 1
  s1=$?
  grep -E '^  +[0-9]+ |link probe|cross-node part|model check' "$work/node0.log"
  check "$link: scaling_bench ran on 2 x 2" "$((s0 + s1))" "$(tail -n 5 "$work"/node*.log)"
  python3 - "$work/$link.json" "$link" >"$work/verdict" 2>&1 <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
check = report["model_check"]
assert check["ranks"] == 4, check
assert check["measured_step_ms"] == report["rows"][-1]["step_ms"], check
error = (check["predicted_step_ms"] - check["measured_step_ms"]) / check["measured_step_ms"]
assert abs(error - check["error"]) < 1e-9, check
# The shaped link dominates the step, so the model must hold to 10%; unshaped, the step is
# mostly this shared 2-core machine's host noise, which the model does not claim to predict:
# 20% there.
bound = 0.20 if sys.argv[2] == "unshaped" else 0.10
assert abs(error) <= bound, "the model is %.1f%% off the measured step (bound %.0f%%)" % (
    100 * error, 100 * bound)
assert report["projection"]["model_error_here"] == check["error"], report["projection"]
if sys.argv[2] != "unshaped":
    four = report["rows"][-1]
    assert four["lost_exposed_comm"] > 0.3 and four["lost_exposed_comm"] > 2 * abs(four["lost_overhead"]), four
    # ... and it is the cross-node link: the largest all-reduce's cross-node part alone takes
    # most of its time.
    probe = check["probe"]
    largest = probe["bytes"].index(max(probe["bytes"]))
    share = probe["cross_node_ms"][largest] / probe["ms"][largest]
    assert share > 0.6, "the cross-node part is only %.0f%% of the all-reduce" % (100 * share)
print("model error %+.1f%%" % (100 * error))
PY
  verdict=$?
  check "$link: $(tail -n 1 "$work/verdict")" "$verdict" "$(cat "$work/verdict")"
  "$fake_cluster" down
  unset COHORT_FAKE_CLUSTER
done
finish
