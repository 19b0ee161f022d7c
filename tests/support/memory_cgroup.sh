#!/usr/bin/env bash
# Runs a command inside a memory cgroup of its own, as a container's or a Slurm job's limit holds
# a program: cgroup v1 (/sys/fs/cgroup/memory) or v2 (/sys/fs/cgroup with the memory controller).
#
#   memory_cgroup.sh LIMIT_BYTES COMMAND [ARGS...]
#
# The cgroup is named cohort-memtest-<pid>-<random> (no two runs collide) and removed on every
# exit path, after whatever is left in it is killed. Exits with the command's status, or 77
# (ctest: skipped) with the reason when no cgroup can be made here (not root, no memory
# controller). Writes "memory_cgroup: oom_kills N, peak BYTES" on standard error at the end.
set -u
limit=$1
shift
if [ "$(id -u)" -ne 0 ]; then
  echo "memory_cgroup.sh: needs root to make a memory cgroup" >&2
  exit 77
fi
name=cohort-memtest-$$-$RANDOM$RANDOM
if [ -w /sys/fs/cgroup/memory ] && [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  version=1
  cg=/sys/fs/cgroup/memory/$name
elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
  version=2
  cg=/sys/fs/cgroup/$name
else
  echo "memory_cgroup.sh: no writable memory cgroup hierarchy (neither v1 memory nor v2 with" \
    "the memory controller delegated)" >&2
  exit 77
fi
if ! mkdir "$cg" 2>/dev/null; then
  echo "memory_cgroup.sh: cannot create $cg" >&2
  exit 77
fi
cleanup() {
  [ -d "$cg" ] || return 0
  local pids
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(cat "$cg/cgroup.procs" 2>/dev/null)
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null
    sleep 0.2
  done
  rmdir "$cg" 2>/dev/null || { sleep 1; rmdir "$cg" 2>/dev/null; } ||
    echo "memory_cgroup.sh: could not remove $cg" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [ "$version" -eq 1 ]; then
  echo "$limit" >"$cg/memory.limit_in_bytes" || exit 1
  echo 0 >"$cg/memory.swappiness" 2>/dev/null  # no swapping around the limit
else
  echo "$limit" >"$cg/memory.max" || exit 1
  echo 0 >"$cg/memory.swap.max" 2>/dev/null
fi
# The command's shell joins the cgroup before it execs the command, so everything the command
# starts is inside.
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' memory_cgroup "$cg" "$@"
status=$?
if [ "$version" -eq 1 ]; then
  kills=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control")
  peak=$(cat "$cg/memory.max_usage_in_bytes")
else
  kills=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.events")
  peak=$(cat "$cg/memory.peak" 2>/dev/null || echo unknown)
fi
echo "memory_cgroup: oom_kills ${kills:-0}, peak $peak" >&2
exit $status
