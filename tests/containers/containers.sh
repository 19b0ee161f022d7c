#!/usr/bin/env bash
# The container image (Dockerfile), built and run with podman: its host flavor, on a Debian base
# this script makes with debootstrap (no image registry is needed). scripts/test.sh runs it as its
# `containers` stage; it exits 77 with the reason where podman, debootstrap or root is missing.
#
#   tests/containers/containers.sh SOURCE_DIR BUILD_DIR     # BUILD_DIR: a host-only build
#   tests/containers/containers.sh SOURCE_DIR BUILD_DIR --base-only   # the base's tarball alone
#
# Checks: the image builds (through the host's ccache, at the host's source path); it holds no
# compiler and no build tree; its default command, cohort-doctor, passes; train_mlp on 4 ranks in
# the image ends on the parameters of the same run outside it (bitwise); two containers on two fake
# hosts (scripts/fake-cluster.sh, `podman run --network ns:...`) train one job bitwise like one
# host; a /dev/shm too small for the ranks gets cohort's error naming --shm-size; and the spot
# story: a run with its checkpoints on a volume, stopped as a cloud stops a spot instance (`podman
# stop`: SIGTERM, then SIGKILL after the grace period), exits 75 and, started again with the same
# command, ends bitwise on the uninterrupted run's parameters; one killed with no grace (SIGKILL
# alone) resumes from the last checkpoint it published and ends the same.
#
# Everything lives in BUILD_DIR/../containers/ (podman's storage, configuration and the base
# image's tarball, kept between runs as a cache; the run's work folder, removed): nothing global is
# read or changed except the host's ccache, which the build reads and adds to, and the fake hosts'
# network namespaces, removed on every exit path like the containers.
#
# COHORT_DEBIAN_MIRROR sets the mirror for debootstrap and the images' apt (default: the host's).
set -uo pipefail

source_dir=$(cd "$1" && pwd)
build_dir=$2
base_only=$([ "${3:-}" = --base-only ] && echo 1 || echo 0)
source "$source_dir/scripts/lib/common.sh"
kSkip=77
skip() { echo "skipped: $*"; exit $kSkip; }

[ "$(id -u)" -eq 0 ] || skip "podman here runs as root only (running as uid $(id -u))"
for tool in $([ $base_only = 1 ] || echo podman runc) debootstrap; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "no '$tool' command (apt-get install podman runc debootstrap)"
done
if [ $base_only = 0 ]; then
  build_dir=$(cd "$build_dir" && pwd)
  [ -x "$build_dir/examples/train_mlp/train_mlp" ] ||
    { echo "FAIL: $build_dir has no train_mlp: build the host-only preset first"; exit 1; }
fi

state="$(dirname "$build_dir")/containers"
mkdir -p "$state"
state=$(cd "$state" && pwd)
# One run at a time per build folder: the storage is shared between runs (it is the cache).
exec 8>"$state/lock"
if ! flock -n 8; then
  echo "waiting for another container test of this build folder (or its base image) to finish"
  flock 8
fi
rm -rf "$state"/rootfs-*  # what a killed debootstrap left

suffix=$(printf '%d%04x' "$$" "$RANDOM")

# ---- the base image: Debian minbase by debootstrap, cached as a tarball -------------------------
codename=bookworm
if [ -r /etc/os-release ] && grep -q '^ID=debian' /etc/os-release; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
fi
mirror=${COHORT_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -rhsE '^(URIs:|deb ) *https?://[^ ]*/debian/?( |$)' /etc/apt/sources.list \
             /etc/apt/sources.list.d/ | grep -oE 'https?://[^ ]*/debian/?' | head -n 1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi
mirror=${mirror%/}
base_image="localhost/cohort-test-base:$codename"
base_tar="$state/debian-$codename-minbase.tar"
make_base_tarball() {
  [ ! -f "$base_tar" ] || return 0
  echo "making the base image: debootstrap --variant=minbase $codename from $mirror"
  local rootfs="$state/rootfs-$suffix"
  if ! debootstrap --variant=minbase "$codename" "$rootfs" "$mirror" >"$state/debootstrap.log" \
       2>&1; then
    tail -n 20 "$state/debootstrap.log"
    rm -rf "$rootfs"
    skip "debootstrap of Debian $codename from $mirror failed (no mirror reachable?)"
  fi
  # The suite's updates and security fixes too, as Debian's own images have them: the build then
  # gets the compiler and headers the host has, and ccache serves the host's objects.
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror $codename main
deb $mirror $codename-updates main
deb ${mirror%/debian}/debian-security $codename-security main
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/lib/apt/lists/*
  if ! tar -C "$rootfs" -cf "$base_tar.part" . || ! mv "$base_tar.part" "$base_tar"; then
    rm -rf "$rootfs" "$base_tar.part"
    echo "FAIL: cannot write $base_tar"
    exit 1
  fi
  rm -rf "$rootfs"
}
if [ $base_only = 1 ]; then
  make_base_tarball
  echo "the base image's tarball is ready: $base_tar ($SECONDS s)"
  exit 0
fi

work="$state/work-$suffix"
mkdir -p "$work/out"
failures=0
fake_cluster="$source_dir/scripts/fake-cluster.sh"
cluster=""

# ---- podman with a storage and configuration of its own ---------------------------------------
mkdir -p "$state/storage" "$state/storage-run" "$state/tmp"
cat >"$state/containers.conf" <<EOF
[containers]
# Setting the default ulimits is not permitted in some containers (this machine's): none.
default_ulimits = []
[engine]
# crun refuses a hybrid cgroup layout; runc does not.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$state/storage-run/events.log"
tmp_dir = "$state/storage-run/libpod"
volume_path = "$state/storage/volumes"
static_dir = "$state/storage/libpod"
EOF
cat >"$state/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$state/storage"
runroot = "$state/storage-run"
EOF
export CONTAINERS_CONF="$state/containers.conf" CONTAINERS_STORAGE_CONF="$state/storage.conf"
# Buildah's cache mounts and podman's big temporary files go to TMPDIR.
export TMPDIR="$state/tmp"
label="cohort.test=$suffix"

cleanup() {
  local ids
  ids=$(podman ps -aq --filter "label=$label" 2>/dev/null || true)
  # shellcheck disable=SC2086
  [ -z "$ids" ] || podman rm -f -t 0 $ids >/dev/null 2>&1 || true
  [ -z "$cluster" ] || "$fake_cluster" down -c "$cluster" || true
  # containers/storage bind-mounts its overlay folder onto itself: unmounted, so that the build
  # folder can be removed (podman mounts it again next time).
  if mountpoint -q "$state/storage/overlay" 2>/dev/null; then
    umount "$state/storage/overlay" 2>/dev/null || true
  fi
  [ -n "${COHORT_KEEP_WORK:-}" ] || rm -rf "$work"
}
trap 'status=$?; cleanup; exit $status' EXIT
trap 'exit 130' INT TERM HUP

check() {  # check NAME STATUS DETAIL
  if [ "$2" -eq 0 ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: $3"
    failures=$((failures + 1))
  fi
}
finish() {
  if [ $failures -gt 0 ]; then
    echo "$failures check(s) failed (COHORT_KEEP_WORK=1 keeps $work)"
    exit 1
  fi
  echo "all checks passed"
  exit 0
}
elapsed() { echo "$((SECONDS - $1)) s"; }

# Leftovers of a run that was killed (its trap never ran): its containers.
podman rm -f -a -t 0 >/dev/null 2>&1 || true

# ---- the base image ------------------------------------------------------------------------------
start=$SECONDS
make_base_tarball
if ! podman image exists "$base_image"; then
  podman import --quiet "$base_tar" "$base_image" >/dev/null ||
    { echo "FAIL: podman import of $base_tar"; exit 1; }
fi
echo "base image $base_image ready ($(elapsed $start))"
# Can podman start a container here at all (namespaces, cgroups, the runtime)?
if ! error=$(podman run --rm --network none "$base_image" true 2>&1); then
  skip "podman cannot start a container here: $error"
fi

# ---- the image: the Dockerfile's host flavor ---------------------------------------------------
# The build uses the host's ccache, at the same source path, with the same settings and locale
# (ccache hashes LANG and LC_*), so that the objects of the host-only stage (same compiler, same
# flags) serve it.
build_args=(--build-arg "LANG=${LANG:-}")
for variable in LC_ALL LC_CTYPE LC_MESSAGES; do
  [ -z "${!variable:-}" ] || build_args+=(--build-arg "$variable=${!variable}")
done
if command -v ccache >/dev/null 2>&1; then
  ccache_dir=$(ccache -k cache_dir)
  mkdir -p "$ccache_dir"
  ccache -p | sed -n 's/^([^)]*) //p' |
    grep -vE '^(cache_dir|temporary_dir|log_file|stats_log|debug_dir|remote_storage) ' \
    >"$state/ccache.conf"
  build_args+=(-v "$ccache_dir:/cohort-ccache" -v "$state/ccache.conf:/cohort-ccache.conf:ro"
                --build-arg CCACHE_DIR=/cohort-ccache
                --build-arg CCACHE_CONFIGPATH=/cohort-ccache.conf)
fi
# pip in the build stage (the Python package's build dependencies) trusts what the host's pip
# trusts: a proxy's certificate authority, where the host's pip names one.
pip_cert=${PIP_CERT:-$(sed -n 's/^cert *= *//p' /etc/pip.conf 2>/dev/null | head -n 1)}
if [ -n "$pip_cert" ] && [ -f "$pip_cert" ]; then
  build_args+=(-v "$pip_cert:/etc/cohort-pip-ca.crt:ro" --build-arg PIP_CERT=/etc/cohort-pip-ca.crt)
fi
[ -z "${PIP_INDEX_URL:-}" ] || build_args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL")

# The host's OpenBLAS settings go into the containers too: OPENBLAS_CORETYPE picks the kernels,
# and with other kernels the same run ends on other parameters.
env_args=()
while IFS= read -r variable; do
  env_args+=(-e "$variable")
done < <(env | sed -n 's/^\(OPENBLAS_[A-Z0-9_]*\)=.*/\1/p')

image=localhost/cohort:test
start=$SECONDS
echo "building the image (podman build, -j2; its output: $work/build.log)"
# The build stage first, tagged, then the image (its build stage all cached by then): the tag
# keeps the build stage's layers (the packages it installs) from the prune below, which removes
# what earlier runs left.
build() {
  podman build --pull=never --network=host --layers -f "$source_dir/Dockerfile" \
    --build-arg BUILD_BASE="$base_image" --build-arg RUNTIME_BASE="$base_image" \
    --build-arg JOBS=2 --build-arg COHORT_SOURCE_DIR="$source_dir" \
    --build-arg COHORT_CMAKE_ARGS=-DCOHORT_WARNINGS_AS_ERRORS=ON \
    "${build_args[@]}" "$@" "$source_dir" >>"$work/build.log" 2>&1
}
build --target build -t localhost/cohort-test-build:latest && build -t "$image"
status=$?
grep '^container-build: ccache' "$work/build.log" | tail -n 1  # where the build stage ran
check "the Dockerfile builds ($(elapsed $start))" $status "$(tail -n 30 "$work/build.log")"
[ $status -eq 0 ] || finish
podman image prune -f >/dev/null 2>&1 || true
run() { podman run --rm --label "$label" --network none "${env_args[@]}" "$@"; }
run "$image" cat /opt/cohort/share/cohort/image/versions | sed 's/^/     /'

size=$(podman image inspect --format '{{.Size}}' "$image")
base_size=$(podman image inspect --format '{{.Size}}' "$base_image")
echo "     image $((size >> 20)) MiB, of which the base $((base_size >> 20)) MiB"
found=$(run "$image" sh -c 'for tool in g++ gcc c++ cc clang nvcc cmake ninja ld; do
  command -v "$tool"; done; ls -d /opt/cohort/build '"$source_dir"' 2>/dev/null; true')
check "no compiler and no build tree in the image" "$([ -z "$found" ]; echo $?)" "found: $found"

output=$(run "$image" 2>&1)
status=$?
check "the default command, cohort-doctor, passes" \
  "$([ $status -eq 0 ] && grep -q 'Summary: 0 error(s)' <<<"$output"; echo $?)" \
  "exit $status: $(tail -n 15 <<<"$output")"

# ---- train_mlp on 4 ranks: in the image as outside it ------------------------------------------
checksum() { grep -o 'param checksum [-0-9.]*' "$1" | head -n 1 | awk '{print $3}'; }
# 2000 steps (a few seconds) leave the spot checks below time to stop the run halfway.
model=(--bucket-mb 1 --log-every 0)
train=(train_mlp --steps 2000 "${model[@]}")
outside=("$build_dir/tools/cohortrun/cohortrun" --nproc-per-node 4
         "$build_dir/examples/train_mlp/train_mlp" "${model[@]}")
"${outside[@]}" --steps 2000 --params-out "$work/out/outside.bin" >"$work/outside.log" 2>&1
check "outside: 4 ranks train" $? "$(tail -n 5 "$work/outside.log")"
start=$SECONDS
run -v "$work/out:/out" "$image" cohortrun --nproc-per-node 4 "${train[@]}" \
  --params-out /out/inside.bin >"$work/inside.log" 2>&1
check "in the image: 4 ranks train ($(elapsed $start), /dev/shm at podman's default 64 MB)" $? \
  "$(tail -n 5 "$work/inside.log")"
echo "     checksum outside $(checksum "$work/outside.log"), inside $(checksum "$work/inside.log")"
check "in the image: every parameter bitwise as outside" \
  "$(cmp -s "$work/out/outside.bin" "$work/out/inside.bin" && \
     [ "$(checksum "$work/outside.log")" = "$(checksum "$work/inside.log")" ]; echo $?)" \
  "parameters or checksums differ"

# A /dev/shm too small for the ranks' segment: cohort's error says what to give the container.
run --shm-size 1m "$image" cohortrun --nproc-per-node 4 train_mlp --steps 10 "${model[@]}" \
  >"$work/shm.log" 2>&1
status=$?
check "a 1 MiB /dev/shm: the run fails, naming --shm-size and --ipc=host" \
  "$([ $status -ne 0 ] && grep -q -- '--shm-size=1g or --ipc=host' "$work/shm.log"; echo $?)" \
  "exit $status: $(tail -n 5 "$work/shm.log")"

# ---- two containers on two fake hosts, one job -------------------------------------------------
# Over Gloo on both sides (the same ring, so the same order of additions), 2 hosts x 2 ranks end
# bitwise where 1 host x 4 ranks ends.
cluster=$(printf 'k%d%04x' "$$" "$RANDOM" | cut -c 1-20)
"$fake_cluster" up 2 -c "$cluster" >/dev/null 2>"$work/up.err"
status=$?
if [ $status -eq $kSkip ]; then
  cluster=""
  echo "     skipped the two-host check: $(cat "$work/up.err")"
elif [ $status -ne 0 ]; then
  cluster=""
  check "fake-cluster up 2" 1 "$(cat "$work/up.err")"
else
  COHORT_HOST_TRANSPORT=gloo "${outside[@]}" --steps 500 --params-out "$work/out/one-host.bin" \
    >"$work/one-host.log" 2>&1
  check "outside, over Gloo: 1 host x 4 ranks train" $? "$(tail -n 5 "$work/one-host.log")"
  start=$SECONDS
  for host in 0 1; do
    podman run -d --label "$label" --name "cohort-$suffix-node$host" --hostname "node$host" \
      "${env_args[@]}" \
      --network "ns:/run/netns/cohort-fc-$cluster-h$host" -e COHORT_HOST_TRANSPORT=gloo \
      -e COHORT_TIMEOUT=60s -v "$work/out:/out" "$image" \
      cohortrun --nnodes 2 --node-rank "$host" --nproc-per-node 2 --master-addr 10.99.0.1 \
      --master-port 29500 train_mlp --steps 500 "${model[@]}" \
      --params-out "/out/two-hosts.$host.bin" >/dev/null
  done
  statuses=""
  for host in 0 1; do
    statuses+="$(podman wait "cohort-$suffix-node$host") "
    podman logs "cohort-$suffix-node$host" >"$work/node$host.log" 2>&1
  done
  check "two containers on two fake hosts train one job ($(elapsed $start))" \
    "$([ "$statuses" = "0 0 " ]; echo $?)" \
    "exit statuses $statuses: $(tail -n 5 "$work/node0.log" "$work/node1.log")"
  echo "     checksum 1 host x 4 $(checksum "$work/one-host.log")," \
       "2 hosts x 2 $(checksum "$work/node0.log")"
  check "two hosts: every parameter bitwise as on one host" \
    "$(cmp -s "$work/out/one-host.bin" "$work/out/two-hosts.0.bin" && \
       [ "$(checksum "$work/one-host.log")" = "$(checksum "$work/node0.log")" ]; echo $?)" \
    "parameters or checksums differ"
  "$fake_cluster" down -c "$cluster" || true
  cluster=""
fi

# ---- the spot instance: stopped with a grace period, and killed without one ---------------------
# The run the spot instance makes (the same command every time it starts): its checkpoints go to
# the volume mounted at /ckpt, and a start resumes from the latest there.
spot() {  # spot NAME FOLDER: starts the run in container NAME, detached
  podman run -d --label "$label" --network none --name "$1" -v "$2:/ckpt" "${env_args[@]}" \
    "$image" \
    cohortrun --nproc-per-node 4 --grace 20 "${train[@]}" --checkpoint-dir /ckpt \
    --checkpoint-every 100 --params-out /ckpt/final.bin >/dev/null
}
published() {  # published FOLDER: the step of the checkpoint `latest` names, or nothing
  [ -f "$1/latest" ] && grep -o '[0-9]\+' "$1/latest" | tail -n 1 | sed 's/^0*\([0-9]\)/\1/'
}
wait_published() {  # wait_published FOLDER STEP: until `latest` names STEP or later (60 s at most)
  local deadline=$((SECONDS + 60)) step
  while [ $SECONDS -lt $deadline ]; do
    step=$(published "$1")
    [ -n "$step" ] && [ "$step" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
finish_spot() {  # finish_spot NAME FOLDER WHAT: the second life, to the end; compares
  podman rm "$1" >/dev/null
  spot "$1" "$2"
  local status
  status=$(podman wait "$1")
  podman logs "$1" >"$work/$1.second.log" 2>&1
  check "$3: started again, it finishes" "$status" "$(tail -n 5 "$work/$1.second.log")"
  resumed=$(sed -n 's/.*resumed from step \([0-9]*\).*/\1/p' "$work/$1.second.log" | head -n 1)
  check "$3: ends bitwise on the uninterrupted run's parameters" \
    "$(cmp -s "$work/out/inside.bin" "$2/final.bin"; echo $?)" "parameters differ"
}

folder="$work/spot-term"
mkdir -p "$folder"
start=$SECONDS
spot "cohort-$suffix-term" "$folder"
wait_published "$folder" 200
check "spot, stopped: the first life publishes checkpoints" $? "no checkpoint in 60 s"
podman stop -t 30 "cohort-$suffix-term" >/dev/null
status=$(podman wait "cohort-$suffix-term")
podman logs "cohort-$suffix-term" >"$work/term.first.log" 2>&1
saved=$(sed -n 's/.*preempted; saved step \([0-9]*\).*/\1/p' "$work/term.first.log" | head -n 1)
# cohortrun exits 75 when every rank saved and stopped on the SIGTERM it passed on; one that does
# not list that status in its --help yet exits 128 + SIGTERM.
expected=143
run "$image" cohortrun --help | grep -q '^ *75 .*preempted' && expected=75
name="spot, stopped (podman stop -t 30: SIGTERM, then SIGKILL): saves step ${saved:-?}"
check "$name, exits $expected" \
  "$([ "$status" = "$expected" ] && [ -n "$saved" ] &&
     [ "$(published "$folder")" = "$saved" ]; echo $?)" \
  "exit $status, latest $(published "$folder"): $(tail -n 8 "$work/term.first.log")"
finish_spot "cohort-$suffix-term" "$folder" "spot, stopped"
check "spot, stopped: the second life resumed from step $saved" \
  "$([ -n "$saved" ] && [ "$resumed" = "$saved" ]; echo $?)" "it resumed from '${resumed}'"
echo "     ($(elapsed $start) for both lives)"

folder="$work/spot-kill"
mkdir -p "$folder"
start=$SECONDS
spot "cohort-$suffix-kill" "$folder"
wait_published "$folder" 300
check "spot, killed: the first life publishes checkpoints" $? "no checkpoint in 60 s"
podman kill -s KILL "cohort-$suffix-kill" >/dev/null
status=$(podman wait "cohort-$suffix-kill")
podman logs "cohort-$suffix-kill" >"$work/kill.first.log" 2>&1
last=$(published "$folder")
check "spot, killed (SIGKILL alone): exits 137 with step $last its last checkpoint" \
  "$([ "$status" = 137 ] && ! grep -q preempted "$work/kill.first.log"; echo $?)" \
  "exit $status: $(tail -n 8 "$work/kill.first.log")"
finish_spot "cohort-$suffix-kill" "$folder" "spot, killed"
check "spot, killed: the second life resumed from the last checkpoint, step $last" \
  "$([ -n "$last" ] && [ "$resumed" = "$last" ]; echo $?)" "it resumed from '${resumed}'"
echo "     ($(elapsed $start) for both lives)"

# ---- the Python package, where the tree has one (Note [Python package in the image]) ------------
python_project=""
for candidate in "$source_dir" "$source_dir/python"; do
  [ -f "$candidate/pyproject.toml" ] && { python_project=$candidate/pyproject.toml; break; }
done
if [ -z "$python_project" ]; then
  echo "     no Python package in this tree (pyproject.toml): nothing to import in the image"
else
  module=$(sed -n 's/^name *= *"\([^"]*\)".*/\1/p' "$python_project" | head -n 1 | tr '-' '_')
  output=$(run "$image" python3 -c "import $module; print($module.__file__)" 2>&1)
  check "the image imports the Python package '$module'" $? "$output"
fi

finish
