#!/usr/bin/env bash
# Builds cohort and runs every test (ctest). Installs missing Debian packages first.
#
#   scripts/test.sh                 # CUDA build for sm_90 when nvcc is found, else host-only
#   COHORT_PRESET=debug scripts/test.sh
#   scripts/test.sh -L launch       # extra arguments go to ctest
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

ensure_packages
find_cuda
preset=$(choose_preset ci)
echo "cohort: building preset '$preset'"
build_preset "$preset"
cd "$cohort_root"
ctest --preset "$preset" -j "$(nproc)" "$@"
