#!/usr/bin/env bash
# scripts/fake-cluster.sh itself: hosts with their own names, addresses and loopback, a shaped
# uplink, no way out of the cluster, clean removal (twice is fine), unique names, and a skip with
# the reason where namespaces cannot be made.
source "$1/tests/support/multinode.sh" "$1" "$2"

cluster_up 3 --link 100mbit --names
first=$COHORT_FAKE_CLUSTER
fc() { "$fake_cluster" "$@"; }

for i in 0 1 2; do
  name=$(fc exec $i hostname)
  check "host $i is named node$i" "$([ "$name" = "node$i" ]; echo $?)" "hostname said '$name'"
  addr=$(fc exec $i ip -4 -o addr show dev eth0 | awk '{print $4}')
  check "host $i has 10.99.0.$((i + 1))/24" "$([ "$addr" = "10.99.0.$((i + 1))/24" ]; echo $?)" \
    "eth0 has '$addr'"
  qdisc=$(fc exec $i tc qdisc show dev eth0)
  check "host $i's uplink is shaped" "$(grep -q 'tbf.*rate 100Mbit' <<<"$qdisc"; echo $?)" "$qdisc"
  lo=$(fc exec $i ip -o link show lo)
  check "host $i has loopback up" "$(grep -q 'UP' <<<"$lo"; echo $?)" "$lo"
done
check "the machine's own hostname is untouched" "$([ "$(hostname)" != node0 ]; echo $?)" "$(hostname)"
check "names resolve with --names" \
  "$(fc exec 1 getent hosts node2 | grep -q '^10\.99\.0\.3 '; echo $?)" "getent hosts node2 failed"
# Host 0 listens; host 2 connects over the bridge (bash /dev/tcp needs no extra tools).
fc exec 0 timeout 10 python3 -c '
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 29400)); s.listen(1); c, _ = s.accept(); c.sendall(b"hello from node0\n")' &
listener=$!
reply=""
for _ in $(seq 50); do
  reply=$(fc exec 2 timeout 2 bash -c 'exec 3<>/dev/tcp/10.99.0.1/29400 && head -n 1 <&3' 2>/dev/null) && break
  sleep 0.1
done
wait $listener
check "host 2 reaches host 0 through the bridge" "$([ "$reply" = "hello from node0" ]; echo $?)" \
  "read '$reply'"
out=$(fc exec 1 timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/80' 2>&1)
check "nothing leaves the cluster" "$(grep -q 'unreachable' <<<"$out"; echo $?)" "connect said: $out"
check "the machine has no route into the test subnet" \
  "$(! ip route get 10.99.0.1 2>/dev/null | grep -q 'dev cohort'; echo $?)" "$(ip route get 10.99.0.1 2>&1)"

# A second cluster beside the first: its own unique name, its own namespaces.
second=$(fc up 1 2>/dev/null | sed -n 's/^export COHORT_FAKE_CLUSTER=//p')
check "a second cluster gets another name" "$([ -n "$second" ] && [ "$second" != "$first" ]; echo $?)" \
  "names '$first' and '$second'"
COHORT_FAKE_CLUSTER="" fc exec 0 hostname >/dev/null 2>"$work/many.err"
check "with two up, an unnamed command asks which" \
  "$(grep -q 'several fake clusters' "$work/many.err"; echo $?)" "$(cat "$work/many.err")"
fc down -c "$second"
fc down -c "$second"
check "down twice is fine" "$?" "the second down failed"
check "down removes every namespace" \
  "$(! ip netns list | grep -q "cohort-fc-$second-"; echo $?)" "$(ip netns list)"

# A process left running on a host is stopped by down.
fc exec 1 sleep 600 &
sleeper=$!
for _ in $(seq 50); do [ -n "$(ip netns pids "cohort-fc-$first-h1")" ] && break; sleep 0.1; done
fc down
wait $sleeper 2>/dev/null
check "down stops the processes on the hosts and removes /etc/netns entries" \
  "$(! ip netns list | grep -q "cohort-fc-$first-" && ! ls /etc/netns 2>/dev/null | grep -q "cohort-fc-$first-"; echo $?)" \
  "$(ip netns list; ls /etc/netns 2>/dev/null)"

# Where namespaces cannot be made: skipped with the reason.
if command -v setpriv >/dev/null 2>&1; then
  out=$(setpriv --reuid 65534 --regid 65534 --clear-groups "$fake_cluster" up 1 2>&1)
  status=$?
  check "not root: exit 77 with the reason" \
    "$([ $status -eq 77 ] && grep -q 'need root' <<<"$out"; echo $?)" "exit $status: $out"
fi
out=$(fc up 0 2>&1)
check "bad host count: an error naming it" "$(grep -q 'number of hosts' <<<"$out"; echo $?)" "$out"
finish
