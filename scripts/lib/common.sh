# Shared by scripts/test.sh and scripts/run.sh: Debian packages and the build preset.
# shellcheck shell=bash

cohort_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# ccache takes the paths under the checkout as relative ones: two build folders at the same depth
# (a preset's, and the Python package's beside it: tests/python/run.sh) then share its objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$cohort_root}"

# Debian packages the build and tests need. CUDA (nvcc, NCCL, cuDNN) comes with the CUDA toolkit
# and is not installed here; without it cohort builds the host backend alone.
cohort_packages=(
  cmake ninja-build g++ pkg-config python3
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libcli11-dev nlohmann-json3-dev libopenblas-dev openmpi-bin python3-matplotlib ccache
  patchelf xz-utils iproute2
  slurmctld slurmd slurm-client munge
)

# The shared libraries a GPU machine provides, as a regex over their file names: the driver, the
# CUDA runtime libraries, NCCL, cuBLAS, cuDNN, and the C and C++ runtimes. The GPU bundle
# (scripts/gpu-bundle.sh) and the container image (scripts/container-build.sh) carry every other
# library their programs load; NVIDIA's CUDA runtime images have these.
cohort_provided_libraries='^(linux-vdso\.so|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvidia-|libcudart\.so|libcudadevrt|libnvrtc|libnvJitLink|libcupti|libnccl\.so|libcublas\.so|libcublasLt\.so|libcudnn)'

# Installs whichever of the given packages (default: cohort_packages) are missing. Idempotent:
# does nothing when all are there.
ensure_packages() {
  local wanted=("$@")
  [ ${#wanted[@]} -gt 0 ] || wanted=("${cohort_packages[@]}")
  local missing=()
  local package
  for package in "${wanted[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "cohort: installing missing Debian packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "cohort: these packages are missing and this user cannot install them: ${missing[*]}" >&2
      echo "cohort: install them as root (apt-get install ${missing[*]}) and run again." >&2
      exit 1
    fi
  fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
}

# The launch tests start a one-node Slurm cluster, which authenticates through munge: give the
# machine a munge key when the package left none (its postinst cannot always make one). Root only;
# elsewhere the Slurm test skips and says why.
ensure_munge_key() {
  [ "$(id -u)" -eq 0 ] || return 0
  [ -f /etc/munge/munge.key ] && return 0
  command -v mungekey >/dev/null 2>&1 || return 0
  mungekey --create --keyfile /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 600 /etc/munge/munge.key
}

# Puts the CUDA toolkit on PATH when it is installed in the usual place but not on PATH.
find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1; then
    local candidate
    for candidate in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
      if [ -x "$candidate/nvcc" ]; then
        export PATH="$candidate:$PATH"
        break
      fi
    done
  fi
}

# The preset to build: COHORT_PRESET if set; host-only without a CUDA toolkit; else the given one.
choose_preset() {
  local wanted=$1
  if [ -n "${COHORT_PRESET:-}" ]; then
    echo "$COHORT_PRESET"
  elif ! command -v nvcc >/dev/null 2>&1; then
    echo "host-only"
  else
    echo "$wanted"
  fi
}

# Configures and builds a preset.
build_preset() {
  local preset=$1
  cmake --preset "$preset" -S "$cohort_root" >/dev/null || return 1
  cmake --build --preset "$preset" -j "$(nproc)"
}

# ---- Stages: each prints its time; print_stage_times sums them up. ----
cohort_stage_times=()

# run_stage NAME COMMAND...: runs COMMAND, then prints how long it took (also when it fails).
run_stage() {
  local name=$1
  shift
  local start=$SECONDS
  echo "cohort: stage '$name' starts"
  local status=0
  "$@" || status=$?
  local took=$((SECONDS - start))
  cohort_stage_times+=("$name ${took}s$([ $status -eq 0 ] || echo " (failed)")")
  echo "cohort: stage '$name' took ${took} s$([ $status -eq 0 ] || echo ", and failed")"
  return $status
}

print_stage_times() {
  echo "cohort: stage times: ${cohort_stage_times[*]}; total ${SECONDS} s"
}

# ---- Sanitizers and fuzzers (docs/reliability.md) ----

# The labels the CUDA preset's stage runs when the host-only stage ran too: the tests of the code
# that the CUDA build compiles differently (COHORT_WITH_CUDA: core, memory, data, ddp, optim,
# the World's backend choice in comm, cohort-doctor in diagnostics, the package and the GPU bundle
# in package and scripts, header compile checks in docs), every unit test, and the gpu tests, which
# must skip with their reason. The others (checkpoint, launch, examples, the multirank and fault
# tests outside those folders) run only host code that is the same source in both builds, and
# without a GPU the CUDA build takes its host paths: the host-only stage's run of them is theirs.
cuda_stage_labels() {
  echo '^(unit|gpu|package|scripts|docs|core|memory|data|ddp|optim|comm|diagnostics)$'
}

# Tests ThreadSanitizer does not run, as one ctest -E regex. Each has its reason in
# docs/reliability.md ("TSan subset").
tsan_excluded_tests() {
  local excluded=(
    # Makes the host-loop mistake on purpose, racing the optimizer's step, to check that
    # COHORT_DEBUG_STREAMS reports it: TSan reports the race it exists to show.
    "^DebugStreams\.HostLoopThatDoesNotWaitForTheStepIsReported/"
    # Every collective on 5, 6 and 7 ranks: the same code as on 3 (shares that do not divide
    # evenly) and 4 and 8 (which run), at 8-20 s each under TSan with more threads than cores.
    "^WorldSizes/EveryCollective\.MatchesClosedFormResults/[567]ranks"
  )
  local IFS='|'
  echo "${excluded[*]}"
}

# Builds the libFuzzer targets (clang) and runs each for $1 seconds from its seeds. A crash fails
# the stage; the input is kept under build/fuzz/artifacts/ to be added to tests/fuzz/regressions/.
run_fuzzers() {
  local seconds=$1
  ensure_packages clang libclang-rt-14-dev || return 1
  build_preset fuzz || return 1
  local build="$cohort_root/build/fuzz"
  local fuzz_dir="$cohort_root/tests/fuzz"
  local target
  for target in $(sed -n 's/^set(cohort_fuzz_targets \(.*\))$/\1/p' "$fuzz_dir/CMakeLists.txt"); do
    local work="$build/corpus/$target" artifacts="$build/artifacts/$target"
    mkdir -p "$work" "$artifacts" || return 1
    local dict=()
    [ -f "$fuzz_dir/$target.dict" ] && dict=("-dict=$fuzz_dir/$target.dict")
    echo "cohort: fuzzing $target for ${seconds} s"
    if ! "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" \
        "$work" "$fuzz_dir/corpus/$target" 2>&1 | tail -n 25; then
      echo "cohort: fuzz_$target failed; its input is in $artifacts/: add it to" \
           "tests/fuzz/regressions/$target/ and fix the bug" >&2
      return 1
    fi
  done
}

# Prints the python of the virtual environment with PyTorch that the PyTorch peer benchmarks and
# the torchrun tests share, build/torch-venv (one for every preset), creating it and installing
# torch with pip the first time (PyPI's wheel with its CUDA libraries: about 66 s and 5.3 GB on a
# quiet machine). Idempotent, and safe to call from tests that run at once (a lock). Returns 1,
# saying why on stderr, when torch cannot be installed (no network, no wheel for this machine).
ensure_torch_venv() {
  local venv="$cohort_root/build/torch-venv"
  mkdir -p "$cohort_root/build" || return 1
  (
    flock 9
    local probe=(-c 'import torch.distributed.run, numpy')
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" "${probe[@]}" >/dev/null 2>&1; then
      exit 0
    fi
    ensure_packages python3-venv >&2
    if ! python3 -m venv "$venv" >&2 || ! "$venv/bin/python" -m pip install -q torch numpy >&2; then
      echo "cohort: cannot install torch into $venv (pip install torch failed)" >&2
      exit 1
    fi
    if ! "$venv/bin/python" "${probe[@]}" >&2; then
      echo "cohort: torch was installed into $venv but torch.distributed.run does not import" >&2
      exit 1
    fi
  ) 9>"$cohort_root/build/torch-venv.lock" || return 1
  echo "$venv/bin/python"
}
