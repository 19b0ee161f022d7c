#!/usr/bin/env bash
# Runs hello_allreduce and a short train_mlp under a real launcher, 4 ranks on this host, and
# checks that every rank saw its rank, local rank and node as the launcher placed it.
#
#   launchers.sh LAUNCHER BUILD_DIR
#
# LAUNCHER: cohortrun, mpirun, torchrun or slurm. torchrun comes from PyPI, in the virtual
# environment build/torch-venv that the test makes (scripts/lib/common.sh: ensure_torch_venv); the
# ranks meet through torchrun's own store, and a failing rank's error reaches torchrun's summary.
# For slurm the test configures and starts a one-node
# cluster of its own (munged, slurmctld, slurmd in a fresh folder) and stops it on every exit path.
# Exit 77 (ctest: skipped) with the reason when the launcher is not there or cannot start.
set -euo pipefail

launcher=${1:?usage: launchers.sh cohortrun|mpirun|torchrun|slurm BUILD_DIR}
build=${2:?usage: launchers.sh cohortrun|mpirun|torchrun|slurm BUILD_DIR}
hello=$build/examples/hello_allreduce/hello_allreduce
train=$build/examples/train_mlp/train_mlp
ranks=4

# The host backend, whatever GPUs this machine has: 4 ranks on 1 to 3 GPUs would take NCCL by the
# automatic choice and be refused (one rank per GPU). Every launcher passes the variable on.
export CUDA_VISIBLE_DEVICES=

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }
[[ -x $hello && -x $train ]] || fail "hello_allreduce or train_mlp is not built under $build"

work=$(mktemp -d /tmp/cohort-launch-XXXXXX)
chmod 755 "$work"  # munged runs as the munge user
daemons=()
cleanup() {
  local status=$?
  if [[ $launcher == slurm && -n ${SLURM_CONF:-} ]]; then
    scancel --user="$(id -un)" >/dev/null 2>&1 || true
  fi
  local pid
  for pid in "${daemons[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${daemons[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A port for the rendezvous store that nothing else here uses (ctest runs tests in parallel).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_slurm() {
  [[ $(id -u) == 0 ]] || skip "starting slurmctld, slurmd and munged needs root"
  local tool
  for tool in slurmctld slurmd munged srun sinfo; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/test.sh installs it)"
  done
  # munge: reuse a running munged, else start our own with the machine's key.
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    [[ -f /etc/munge/munge.key ]] || skip "/etc/munge/munge.key is missing (mungekey --create)"
    local socket_dir=$work/munge
    install -d -o munge -g munge -m 755 "$socket_dir"
    runuser -u munge -- /usr/sbin/munged --socket="$socket_dir/munge.socket" \
      --pid-file="$socket_dir/munged.pid" --log-file="$socket_dir/munged.log" \
      --seed-file="$socket_dir/munged.seed" || skip "munged did not start"
    daemons+=("$(cat "$socket_dir/munged.pid")")
    export MUNGE_SOCKET=$socket_dir/munge.socket
    munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null ||
      skip "munged does not answer"
    munge_option="AuthInfo=socket=$MUNGE_SOCKET"
  fi
  local host ctld_port
  host=$(hostname -s)
  ctld_port=$(free_port)
  mkdir -p "$work/state" "$work/spool"
  cat >"$work/slurm.conf" <<EOF
ClusterName=cohortci
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
${munge_option:-}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$ranks
PartitionName=cohortci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$work/slurm.conf
  slurmctld -D -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 &
  daemons+=($!)
  slurmd -D -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 &
  daemons+=($!)
  for _ in $(seq 100); do
    [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && return 0
    sleep 0.1
  done
  cat "$work"/slurmctld.log "$work"/slurmd.log 2>/dev/null | tail -20
  skip "the one-node Slurm cluster did not become idle in 10 s (logs above)"
}

run() {
  local port
  port=$(free_port)
  case $launcher in
    cohortrun)
      timeout 300 "$build/tools/cohortrun/cohortrun" --nproc-per-node "$ranks" "$@" ;;
    mpirun)
      timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$ranks" -x MASTER_PORT="$port" \
        "$@" ;;
    torchrun)
      timeout 300 "$torch_python" -m torch.distributed.run --no-python --nproc-per-node "$ranks" \
        --master-addr 127.0.0.1 --master-port "$port" "$@" ;;
    slurm)
      MASTER_PORT=$port timeout 300 srun -N1 -n"$ranks" --immediate=30 "$@" ;;
  esac
}

case $launcher in
  cohortrun) [[ -x $build/tools/cohortrun/cohortrun ]] || fail "cohortrun is not built" ;;
  mpirun) command -v mpirun >/dev/null || skip "mpirun is not installed (apt-get install openmpi-bin)" ;;
  torchrun)
    # shellcheck source=../../scripts/lib/common.sh
    source "$(dirname "$0")/../../scripts/lib/common.sh"
    torch_python=$(ensure_torch_venv) ||
      skip "PyTorch could not be installed from PyPI (pip install torch failed: no network?)"
    # torchrun leaves a folder per run in TMPDIR: keep them in ours.
    export TMPDIR=$work ;;
  slurm) start_slurm ;;
  *) fail "unknown launcher '$launcher'; use cohortrun, mpirun, torchrun or slurm" ;;
esac

# Every rank prints World::describe(): "rank R of 4 (local R of 4, node 0 of 1) on ...".
output=$(run "$hello" 2>&1) || { echo "$output"; fail "hello_allreduce under $launcher failed"; }
echo "$output"
for rank in $(seq 0 $((ranks - 1))); do
  grep -q "rank $rank of $ranks (local $rank of $ranks, node 0 of 1) on .* gave 6 everywhere (" \
    <<<"$output" || fail "rank $rank's line (local rank $rank, node 0 of 1, sum 6) is missing"
done

output=$(run "$train" --steps 20 --host 2>&1) || { echo "$output"; fail "train_mlp under $launcher failed"; }
echo "$output"
grep -q "train_mlp: $ranks ranks" <<<"$output" || fail "train_mlp did not run on $ranks ranks"
grep -q "train_mlp: final loss" <<<"$output" || fail "train_mlp did not finish"
if [[ $launcher == torchrun ]]; then
  # A rank that fails writes torchrun's error file, whose text torchrun's summary shows.
  if output=$(COHORT_TIMEOUT=soon run "$hello" 2>&1); then
    echo "$output"; fail "hello_allreduce with COHORT_TIMEOUT=soon succeeded under torchrun"
  fi
  echo "$output"
  grep -q "traceback : hello_allreduce: .*COHORT_TIMEOUT='soon'" <<<"$output" ||
    fail "torchrun's summary does not show the rank's error (TORCHELASTIC_ERROR_FILE)"
fi
echo "PASSED: hello_allreduce and train_mlp under $launcher"
