#!/usr/bin/env bash
# train_mlp on 2 fake hosts x 2 ranks ends where it ends on 1 host x 4 ranks. Over Gloo on both
# (the same ring, so the same order of additions) every final parameter is bit-identical; with
# the automatic transports (shared memory on one host, hierarchical across two) the order of
# additions differs, so the checksums agree to rounding.
source "$1/tests/support/multinode.sh" "$1" "$2"
unset GLOO_SOCKET_IFNAME
export COHORT_TIMEOUT=30s
cluster_up 2
train=("$build_dir/examples/train_mlp/train_mlp" --steps 30 --bucket-mb 1 --log-every 0)

checksum() { grep -o 'param checksum [-0-9.]*' "$1" | head -n 1 | awk '{print $3}'; }

for transport in gloo auto; do
  export COHORT_HOST_TRANSPORT=$transport
  # One host, four ranks (on fake host 0, alone).
  "$fake_cluster" exec 0 "$cohortrun" --nproc-per-node 4 "${train[@]}" \
    --params-out "$work/one.$transport" >"$work/one.log" 2>&1
  check "$transport: 1 x 4 trains" "$?" "$(tail -n 5 "$work/one.log")"
  master_port=29520 start_node 0 2 2 "${train[@]}" --params-out "$work/two.$transport"
  master_port=29520 start_node 1 2 2 "${train[@]}"
  wait_node 0
  s0=$?
  wait_node 1
  s1=$?
  check "$transport: 2 x 2 trains" "$((s0 + s1))" "$(tail -n 5 "$work"/node*.log)"
  one=$(checksum "$work/one.log")
  two=$(checksum "$work/node0.log")
  echo "     $transport: checksum 1 x 4 $one, 2 x 2 $two"
  if [ $transport = gloo ]; then
    check "gloo: every parameter bit-identical" \
      "$(cmp -s "$work/one.gloo" "$work/two.gloo"; echo $?)" "parameter files differ"
  else
    check "auto: checksums agree to 1e-4" \
      "$(awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; exit !(a != "" && (d < 0 ? -d : d) <= 1e-4) }'; echo $?)" \
      "1 x 4: $one, 2 x 2: $two"
  fi
done
finish
