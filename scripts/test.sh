#!/usr/bin/env bash
# Builds cohort and runs every test (ctest). Installs missing Debian packages first.
#
#   scripts/test.sh                 # CUDA build for sm_90 when nvcc is found, else host-only
#   COHORT_PRESET=debug scripts/test.sh
#   scripts/test.sh -L launch       # extra arguments go to ctest (and only that preset runs)
#
# With the CUDA toolkit present it then builds and tests the host-only preset too, which is how
# host-only users build cohort (set COHORT_TEST_HOST_ONLY=0 to skip that second build).
# The multinode tests (several fake hosts in network namespaces) need root; elsewhere they are
# skipped with the reason. They run in the host-only stage only when both stages run.
# The CUDA preset's tests include gpu_bundle.ldd: it assembles the GPU bundle (scripts/gpu-bundle.sh)
# from that same build, compiling nothing more, and checks it with ldd.
#
# Beside the first build it makes build/torch-venv, PyTorch from PyPI, for the torchrun launch test
# and the TorchStore tests (about 2 minutes and 5.4 GB the first time; they skip where pip cannot);
# the first test run waits for it.
#
# First, the format stage: every C++ file as .clang-format says (scripts/check-format.sh; seconds).
# More stages (docs/reliability.md), each printing its time:
# - fuzz, in CI (CI=true) or with COHORT_TEST_FUZZ=1: every libFuzzer target for
#   COHORT_FUZZ_SECONDS (default 10) each, from its seed corpus; a crash fails the run.
# - sanitizers, COHORT_TEST_SANITIZERS = asan, tsan, 1 (both, the default in CI) or 0 (none, the
#   default elsewhere): the asan preset (AddressSanitizer + UndefinedBehaviorSanitizer) and the
#   tsan preset (ThreadSanitizer): ASan over the unit, multirank, fault, ddp and optim labels,
#   TSan over its subset, the tests labelled `tsan` (docs/reliability.md, "Sanitizers").
# - containers, in CI or with COHORT_TEST_CONTAINERS=1 (`only`: the host-only build and this stage
#   alone): builds the Dockerfile's host flavor with podman on a Debian base it makes with
#   debootstrap (beside the first build), and runs cohort in it (tests/containers/containers.sh;
#   docs/cloud.md). Installs podman, runc and debootstrap; skipped, with the reason, where they,
#   root or a container runtime are missing.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

ci=${CI:-false}
sanitizers=${COHORT_TEST_SANITIZERS:-$([ "$ci" = true ] && echo 1 || echo 0)}
case $sanitizers in
  0 | asan | tsan | 1) ;;
  *) echo "cohort: COHORT_TEST_SANITIZERS='$sanitizers' is not one of asan, tsan, 1 (both), 0" >&2
     exit 2 ;;
esac
fuzz=${COHORT_TEST_FUZZ:-$([ "$ci" = true ] && echo 1 || echo 0)}
containers=${COHORT_TEST_CONTAINERS:-$([ "$ci" = true ] && echo 1 || echo 0)}
case $containers in
  0 | 1 | only) ;;
  *) echo "cohort: COHORT_TEST_CONTAINERS='$containers' is not one of 1, only, 0" >&2
     exit 2 ;;
esac

ensure_packages
ensure_munge_key
# The containers stage's packages, only where that stage runs (its tests skip without them).
containers_installed=0
if [ "$containers" != 0 ] && (ensure_packages podman runc debootstrap); then
  containers_installed=1
fi
find_cuda
preset=$(choose_preset ci)
# (run_stage runs it in a context where set -e does not apply: every step checks itself.)
# ctest for a preset, with the temporary folder inside that preset's build folder (emptied
# first): what a test's ranks leave behind (a failure's collectives dump, a killed rank's files)
# stays there, not in /tmp.
run_ctest() {
  local scratch="$cohort_root/build/$1/test-tmp"
  rm -rf "$scratch" && mkdir -p "$scratch" || return 1
  (cd "$cohort_root" && TMPDIR="$scratch" ctest --preset "$@")
}
# Every C++ file formatted as .clang-format says (scripts/check-format.sh names the files that are
# not, and how to fix them). Seconds.
check_format() {
  ensure_packages clang-format || return 1
  bash "$cohort_root/scripts/check-format.sh"
}
run_preset() {
  echo "cohort: building and testing preset '$1'"
  build_preset "$1" || return 1
  wait_for_torch
  run_ctest "$1" -j "$(nproc)" "${@:2}"
}
# ThreadSanitizer builds and runs its subset only: the executables labelled `tsan`
# (tests/CMakeLists.txt says which and why), less what tsan_excluded_tests names.
run_tsan() {
  echo "cohort: building and testing the ThreadSanitizer subset (preset 'tsan', target tsan_tests)"
  cmake --preset tsan -S "$cohort_root" >/dev/null || return 1
  cmake --build --preset tsan -j "$(nproc)" --target tsan_tests || return 1
  run_ctest tsan -j "$(nproc)" -E "$(tsan_excluded_tests)"
}
# The container image: podman builds the Dockerfile's host flavor (through ccache, from the
# objects of the host-only build) and the tests run it, comparing with the host-only build's
# train_mlp (built here when the host-only stage did not run). Exit status 77 of the tests is a
# skip; they print why.
build_for_containers() {
  cmake --preset host-only -S "$cohort_root" >/dev/null &&
    cmake --build --preset host-only -j "$(nproc)" --target train_mlp cohortrun
}
containers_test="$cohort_root/tests/containers/containers.sh"
# The Debian base image's tarball (debootstrap: mostly downloading and unpacking, about 30 s to 3
# minutes here) is made beside the first build, and the stage waits for it.
base_pid=""
base_log="$cohort_root/build/containers-base.log"
start_container_base() {
  [ "$containers_installed" = 1 ] || return 0
  mkdir -p "$cohort_root/build"
  bash "$containers_test" "$cohort_root" "$cohort_root/build/host-only" --base-only \
    >"$base_log" 2>&1 &
  base_pid=$!
}
run_containers() {
  echo "cohort: building the container image and running cohort in it (tests/containers/containers.sh)"
  if [ "$containers_installed" != 1 ]; then
    echo "cohort: stage 'containers' skipped: podman, runc and debootstrap cannot be installed here"
    return 0
  fi
  if [ -n "$base_pid" ]; then
    wait "$base_pid" || true  # on failure, the tests make it again and say why
    base_pid=""
    sed 's/^/cohort: beside the builds: /' "$base_log"
  fi
  build_for_containers >/dev/null || return 1
  local status=0
  bash "$containers_test" "$cohort_root" "$cohort_root/build/host-only" || status=$?
  if [ $status -eq 77 ]; then
    echo "cohort: stage 'containers' skipped (the reason is above)"
    return 0
  fi
  return $status
}
# PyTorch from PyPI for the torchrun launch test and the TorchStore tests (build/torch-venv, once
# for every preset); without it those tests skip and say why.
with_torch() {
  ensure_torch_venv >/dev/null || echo "cohort: PyTorch could not be installed; its tests will skip"
}
# Installing PyTorch is mostly a download (5.4 GB): it runs beside the first build, and the first
# test run waits for it. Its output and time are printed then.
torch_pid=""
torch_log="$cohort_root/build/torch-venv.log"
start_torch() {
  mkdir -p "$cohort_root/build"
  ( start=$SECONDS; with_torch
    echo "cohort: torch-venv took $((SECONDS - start)) s, beside the first build" ) >"$torch_log" 2>&1 &
  torch_pid=$!
}
wait_for_torch() {
  [ -n "$torch_pid" ] || return 0
  wait "$torch_pid" || true
  torch_pid=""
  cat "$torch_log"
}
if [ $# -eq 0 ] && [ "$containers" = only ]; then
  start_container_base
  run_stage "host-only build" build_for_containers
  run_stage "containers" run_containers
  print_stage_times
elif [ $# -eq 0 ]; then
  start_torch
  [ "$containers" = 0 ] || start_container_base
  run_stage "format" check_format
  if [ "$preset" != "host-only" ] && [ "${COHORT_TEST_HOST_ONLY:-1}" != "0" ]; then
    run_stage "host-only" run_preset host-only
    # The CUDA build runs the tests of the code it compiles differently (cuda_stage_labels in
    # scripts/lib/common.sh says which and why); the rest ran in the host-only stage, on the same
    # host code, and would only repeat it. That leaves out the multinode tests (fake hosts, host
    # ranks) and the real launchers' (launch.*: torchrun, Slurm, TorchStore against PyTorch).
    run_stage "$preset" run_preset "$preset" -L "$(cuda_stage_labels)" -LE multinode \
      -E '^launch\.'
  else
    run_stage "$preset" run_preset "$preset"
  fi
  if [ "$sanitizers" = asan ] || [ "$sanitizers" = 1 ]; then
    # Not the Python package: pip builds it without the sanitizer (its own CMake build), so the
    # asan stage would only build and run the host-only stage's package tests again.
    run_stage "asan" run_preset asan -LE '^python$'
  fi
  if [ "$sanitizers" = tsan ] || [ "$sanitizers" = 1 ]; then
    # ThreadSanitizer leaves out what docs/reliability.md lists under "TSan subset", with why.
    run_stage "tsan" run_tsan
  fi
  if [ "$fuzz" = 1 ]; then
    run_stage "fuzz" run_fuzzers "${COHORT_FUZZ_SECONDS:-10}"
  fi
  if [ "$containers" = 1 ]; then
    run_stage "containers" run_containers
  fi
  print_stage_times
else
  with_torch
  run_preset "$preset" "$@"
fi
