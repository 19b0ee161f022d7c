# Shared by scripts/test.sh and scripts/run.sh: Debian packages and the build preset.
# shellcheck shell=bash

cohort_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# Debian packages the build and tests need. CUDA (nvcc, NCCL, cuDNN) comes with the CUDA toolkit
# and is not installed here; without it cohort builds the host backend alone.
cohort_packages=(
  cmake ninja-build g++ pkg-config python3
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libcli11-dev nlohmann-json3-dev libopenblas-dev openmpi-bin python3-matplotlib ccache
  patchelf
)

# Installs whichever of cohort_packages are missing. Idempotent: does nothing when all are there.
ensure_packages() {
  local missing=()
  local package
  for package in "${cohort_packages[@]}"; do
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
  cmake --preset "$preset" -S "$cohort_root" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
}
