#!/usr/bin/env bash
# Builds cohort and runs every test (ctest). Installs missing Debian packages first.
#
#   scripts/test.sh                 # CUDA build for sm_90 when nvcc is found, else host-only
#   COHORT_PRESET=debug scripts/test.sh
#   scripts/test.sh -L launch       # extra arguments go to ctest
#
# With the CUDA toolkit present it then builds and tests the host-only preset too, which is how
# host-only users build cohort (set COHORT_TEST_HOST_ONLY=0 to skip that second build).
# The CUDA preset's tests include gpu_bundle.ldd: it assembles the GPU bundle (scripts/gpu-bundle.sh)
# from that same build, compiling nothing more, and checks it with ldd.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

ensure_packages
find_cuda
preset=$(choose_preset ci)
run_preset() {
  echo "cohort: building and testing preset '$1'"
  build_preset "$1"
  (cd "$cohort_root" && ctest --preset "$1" -j "$(nproc)" "${@:2}")
}
if [ "$preset" != "host-only" ] && [ "${COHORT_TEST_HOST_ONLY:-1}" != "0" ] && [ $# -eq 0 ]; then
  run_preset host-only
fi
run_preset "$preset" "$@"
