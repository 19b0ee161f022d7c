#!/usr/bin/env bash
# Several hosts on one machine: network namespaces joined by a bridge, each with its own network
# stack, address and host name; each host's uplink optionally rate-limited. Needs root and `ip`.
#
#   eval "$(scripts/fake-cluster.sh up 2 --link 1gbit)"   # sets COHORT_FAKE_CLUSTER
#   scripts/fake-cluster.sh exec 0 hostname               # node0
#   scripts/fake-cluster.sh exec 1 ./build/host-only/tools/cohortrun/cohortrun --nnodes 2 ...
#   scripts/fake-cluster.sh addr 0                        # 10.99.0.1
#   scripts/fake-cluster.sh cut 1 / mend 1                # host 1's link down / up again
#   scripts/fake-cluster.sh stop 1 [--kill]               # stop every process on host 1
#   scripts/fake-cluster.sh down                          # kill everything, remove the namespaces
#
# Commands other than `up` act on the cluster named by -c NAME, else $COHORT_FAKE_CLUSTER, else
# the only cluster there is. `down --all` removes every fake cluster (leftovers of killed runs).
#
# Layout (Note [Fake hosts] in docs/testing.md): namespace cohort-NAME-sw holds the bridge `br0`
# and one veth end `pI` per host; host I is namespace cohort-NAME-hI with the other end as `eth0`
# (address 10.99.0.(I+1)/24, no other route) and `lo` up. Nothing is created in the machine's own
# namespace, so the subnet exists only inside the cluster and no traffic can leave it (any other
# address: "Network is unreachable"). `exec` runs a command in host I's network namespace, with
# host name nodeI (a UTS namespace); the names resolve only with `up --names`, which writes
# /etc/netns/cohort-NAME-hI/hosts (bind-mounted over /etc/hosts by `ip netns exec`).
# With --link RATE (1gbit, 200mbit) each host's eth0 sends through a tbf qdisc whose bucket
# holds 4 ms of the rate (16 KiB at least) and whose queue holds 1.5 MB (a host's 1000 packets),
# so the link delays what it cannot send yet instead of dropping it.
#
# Exit status 77 (with the reason on stderr) where namespaces cannot be created here: not root,
# no `ip`, or a container without the capability.
set -euo pipefail

kSkip=77
kSubnet=10.99.0
kPrefix=cohort-fc

die() { echo "fake-cluster: $*" >&2; exit 1; }
skip() { echo "fake-cluster: cannot create fake hosts here: $*" >&2; exit $kSkip; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

# The namespaces of cluster $1: the switch first, then the hosts in order.
namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$kPrefix-$1-(sw|h[0-9]+)\$" |
    sort -t h -k 2 -n || true
}

hosts_of() {  # hosts_of NAME: the number of hosts
  namespaces "$1" | grep -c -- '-h[0-9]*$' || true
}

clusters() {
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^$kPrefix-\(.*\)-sw\$/\1/p"
}

# The cluster to act on: -c NAME, $COHORT_FAKE_CLUSTER, or the only one.
cluster=""
pick_cluster() {
  [ -n "$cluster" ] || cluster=${COHORT_FAKE_CLUSTER:-}
  if [ -z "$cluster" ]; then
    local all
    all=$(clusters)
    [ -n "$all" ] || die "no fake cluster is up (start one with: $0 up K)"
    [ "$(wc -l <<<"$all")" -eq 1 ] ||
      die "several fake clusters are up ($(tr '\n' ' ' <<<"$all")): name one with -c NAME"
    cluster=$all
  fi
  [ -e "/run/netns/$kPrefix-$cluster-sw" ] || die "no fake cluster named '$cluster' is up"
}

host_ns() {  # host_ns I: host I's namespace, checked
  local i=$1
  [[ "$i" =~ ^[0-9]+$ ]] || die "'$i' is not a host number"
  local ns=$kPrefix-$cluster-h$i
  # /run/netns, not `ip netns list`: that one queries every namespace and complains about
  # those another cluster is removing at the same time.
  [ -e "/run/netns/$ns" ] ||
    die "cluster '$cluster' has no host $i (hosts 0 to $(($(hosts_of "$cluster") - 1)))"
  echo "$ns"
}

# Kills every process in namespace $1: SIGTERM, then SIGKILL after a second (at once with
# $2 = --kill).
kill_namespace() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null || true)
  [ -n "$pids" ] || return 0
  kill "$([ "${2:-}" = --kill ] && echo -KILL || echo -TERM)" $pids 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$1" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    sleep 0.1
  done
  kill -KILL $pids 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -n "$(ip netns pids "$1" 2>/dev/null || true)" ] || return 0
    sleep 0.1
  done
}

remove_cluster() {  # remove_cluster NAME: idempotent
  local ns
  for ns in $(namespaces "$1"); do
    kill_namespace "$ns"
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
}

cmd_up() {
  local count="" rate="" names=0
  while [ $# -gt 0 ]; do
    case $1 in
      --link) [ $# -ge 2 ] || die "--link needs a rate (e.g. 1gbit)"; rate=$2; shift 2 ;;
      --names) names=1; shift ;;
      -c) [ $# -ge 2 ] || die "-c needs a name"; cluster=$2; shift 2 ;;
      [0-9]*) count=$1; shift ;;
      *) die "up: unknown argument '$1' (up K [--link RATE] [--names] [-c NAME])" ;;
    esac
  done
  [[ "$count" =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] && [ "$count" -le 200 ] ||
    die "up needs the number of hosts, 1 to 200 (got '${count}')"
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root (running as uid $(id -u))"
  command -v ip >/dev/null 2>&1 || skip "no 'ip' command (install iproute2)"
  command -v unshare >/dev/null 2>&1 || skip "no 'unshare' command (install util-linux)"
  if [ -n "$rate" ]; then
    command -v tc >/dev/null 2>&1 || skip "no 'tc' command for --link (install iproute2)"
  fi
  # The token bucket holds 4 ms of the rate (16 KiB at least): a larger one lets every burst
  # after a pause pass at full speed, which no real link of that rate does.
  local burst=""
  if [ -n "$rate" ]; then
    [[ "$rate" =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] ||
      die "--link '$rate': give a whole number with bit, kbit, mbit or gbit (e.g. 1gbit, 200mbit)"
    local bits=${BASH_REMATCH[1]}
    case ${BASH_REMATCH[2]} in
      kbit) bits=$((bits * 1000)) ;; mbit) bits=$((bits * 1000000)) ;;
      gbit) bits=$((bits * 1000000000)) ;;
    esac
    burst=$((bits / 8 / 250))
    [ "$burst" -ge 16384 ] || burst=16384
  fi
  [ -n "$cluster" ] || cluster=$(printf '%s%04x' "$$" "$RANDOM")
  [[ "$cluster" =~ ^[a-z0-9]{1,20}$ ]] || die "cluster name '$cluster': use 1 to 20 of a-z, 0-9"
  [ -z "$(namespaces "$cluster")" ] || die "a fake cluster named '$cluster' is already up"

  local sw=$kPrefix-$cluster-sw
  # Whatever fails below removes what was made so far.
  trap 'status=$?; [ $status -eq 0 ] || remove_cluster "$cluster"; exit $status' EXIT
  trap 'exit 130' INT TERM
  local error
  if ! error=$(ip netns add "$sw" 2>&1); then
    skip "'ip netns add' failed: $error"
  fi
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  local i ns hosts_file=""
  if [ $names = 1 ]; then
    hosts_file=$(printf '127.0.0.1 localhost\n'; for ((i = 0; i < count; i++)); do
      printf '%s.%d node%d\n' "$kSubnet" $((i + 1)) "$i"; done)
  fi
  for ((i = 0; i < count; i++)); do
    ns=$kPrefix-$cluster-h$i
    ip netns add "$ns"
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$kSubnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ -n "$rate" ]; then
      tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" limit 1514000 ||
        die "tc could not shape host $i's link to '$rate' (tc rates look like 1gbit or 200mbit)"
    fi
    if [ -n "$hosts_file" ]; then
      mkdir -p "/etc/netns/$ns"
      echo "$hosts_file" >"/etc/netns/$ns/hosts"
    fi
  done
  trap - EXIT INT TERM
  echo "export COHORT_FAKE_CLUSTER=$cluster"
  echo "fake-cluster: '$cluster' is up: $count hosts node0..node$((count - 1)) at" \
    "$kSubnet.1..$kSubnet.$count${rate:+, each uplink at $rate}" >&2
}

cmd_exec() {
  [ $# -ge 2 ] || die "exec needs a host number and a command"
  local ns
  ns=$(host_ns "$1")
  local name=node$1
  shift
  # A UTS namespace of its own, so the host name is this host's only for the command's tree.
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" "$@"
}

main() {
  [ $# -ge 1 ] || usage
  local command=$1
  shift
  while [ "${1:-}" = -c ]; do
    [ $# -ge 2 ] || die "-c needs a name"
    cluster=$2
    shift 2
  done
  case $command in
    up) cmd_up "$@" ;;
    down)
      if [ "${1:-}" = --all ]; then
        local name
        for name in $(clusters); do remove_cluster "$name"; done
      else
        # Idempotent: a named cluster that is gone already is not an error.
        [ -n "$cluster" ] || cluster=${COHORT_FAKE_CLUSTER:-}
        [ -n "$cluster" ] || [ -z "$(clusters)" ] || pick_cluster
        [ -z "$cluster" ] || remove_cluster "$cluster"
      fi
      ;;
    exec) pick_cluster; cmd_exec "$@" ;;
    addr) pick_cluster; host_ns "${1:-}" >/dev/null; echo "$kSubnet.$((${1} + 1))" ;;
    hosts) pick_cluster; hosts_of "$cluster" ;;
    cut) pick_cluster; ip -n "$(host_ns "${1:-}")" link set eth0 down ;;
    mend) pick_cluster; ip -n "$(host_ns "${1:-}")" link set eth0 up ;;
    stop) pick_cluster; kill_namespace "$(host_ns "${1:-}")" "${2:-}" ;;
    list) clusters ;;
    -h | --help | help) usage 0 ;;
    *) die "unknown command '$command' (up, down, exec, addr, hosts, cut, mend, stop, list)" ;;
  esac
}

main "$@"
