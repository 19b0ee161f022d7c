#!/usr/bin/env bash
# The build stage of the Dockerfile: configures and builds cohort (no tests), installs it into
# PREFIX with `cmake --install`, and gathers into PREFIX/lib/deps every shared library its
# programs load that the runtime image does not provide. Runs inside the image build, as root,
# from the top of the sources.
#
#   scripts/container-build.sh /opt/cohort
#
# Environment (the Dockerfile's build arguments): COHORT_PRESET (default: `default` where nvcc is
# found, else `host-only`), CUDA_ARCHITECTURES, COHORT_CMAKE_ARGS (extra, split on spaces), JOBS
# (default: every core), BUILD_BASE (printed).
#
# PREFIX then holds bin/ (cohortrun, cohort-store, cohort-doctor), libexec/cohort/ (examples and
# benchmarks), lib/ (libcohort.a, cmake/cohort/, deps/), include/, python/ (the Python package,
# when the tree has one) and share/cohort/image/ (versions: what was built on what;
# runtime-packages: Debian packages the runtime stage must install).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

prefix=${1:?usage: scripts/container-build.sh PREFIX}
jobs=${JOBS:-$(nproc)}
cd "$cohort_root"
find_cuda
if [ -n "${COHORT_PRESET:-}" ]; then
  preset=$COHORT_PRESET
elif command -v nvcc >/dev/null 2>&1; then
  preset=default
else
  preset=host-only
fi
cmake_args=(-DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_EXAMPLES=ON -DCOHORT_BUILD_BENCHMARKS=ON)
[ -z "${CUDA_ARCHITECTURES:-}" ] || cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES")
read -r -a extra <<<"${COHORT_CMAKE_ARGS:-}"
cmake_args+=("${extra[@]}")
# Build arguments that were not given arrive empty: unset them, as ccache tells an empty variable
# from an unset one (CCACHE_DIR, CCACHE_CONFIGPATH; the locale is part of its hash).
for variable in CCACHE_DIR CCACHE_CONFIGPATH LANG LC_ALL LC_CTYPE LC_MESSAGES PIP_CERT \
                PIP_INDEX_URL; do
  [ -n "${!variable:-}" ] || unset "$variable"
done

image_dir="$prefix/share/cohort/image"
mkdir -p "$image_dir"
: >"$image_dir/runtime-packages"
{
  echo "cohort $(sed -n 's/^project(cohort VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt), preset $preset"
  echo "built on ${BUILD_BASE:-an unnamed base}: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "compiler: $(g++ --version | head -n 1); $(cmake --version | head -n 1)"
  if command -v nvcc >/dev/null 2>&1; then
    echo "CUDA: $(nvcc --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\1 (nvcc \2)/p')"
    nccl=$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' \
             /usr/include/nccl.h /usr/local/cuda/include/nccl.h 2>/dev/null | head -n 3 | paste -sd .)
    echo "NCCL: ${nccl:-not found}"
  else
    echo "CUDA: none (host flavor: Gloo on CPUs)"
  fi
} | tee "$image_dir/versions"

cmake --preset "$preset" "${cmake_args[@]}" >/dev/null
# This build's own ccache counters (the cache may be shared with other builds).
export CCACHE_STATSLOG=/tmp/cohort-ccache-stats.log
cmake --build "build/$preset" -j "$jobs"
cmake --install "build/$preset" --prefix "$prefix" --strip
if command -v ccache >/dev/null 2>&1 && [ -f "$CCACHE_STATSLOG" ]; then
  echo "container-build: ccache for this build:" \
       "$(ccache --show-log-stats | grep -E '^ *(Hits|Misses):' | tr -s ' ' | paste -sd ';')"
  rm -f "$CCACHE_STATSLOG"
fi

# ---- Note [Python package in the image] -------------------------------------------------------
# cohort's Python package, when the tree has one (pyproject.toml at the top or in python/), is
# installed into PREFIX/python (the image's PYTHONPATH) with pip, for the python3 of this
# distribution, which the runtime stage then installs (runtime-packages). Without one nothing
# happens; tests/containers/containers.sh imports the package in the image when the tree has it.
python_project=""
for candidate in . python; do
  [ -f "$candidate/pyproject.toml" ] && { python_project=$candidate; break; }
done
if [ -n "$python_project" ]; then
  echo "container-build: installing the Python package of $python_project/pyproject.toml"
  apt-get update
  apt-get install -y --no-install-recommends python3 python3-venv python3-dev
  python3 -m venv /tmp/cohort-pip
  CMAKE_BUILD_PARALLEL_LEVEL=$jobs \
    /tmp/cohort-pip/bin/pip install --no-cache-dir --target "$prefix/python" "./$python_project"
  rm -rf /tmp/cohort-pip /var/lib/apt/lists/*
  echo python3 >>"$image_dir/runtime-packages"
  echo "Python package: $(ls "$prefix/python" | paste -sd ' ')" | tee -a "$image_dir/versions"
fi

# ---- the shared libraries the runtime image lacks: everything ldd resolves beyond those a CUDA
# runtime image (or any Debian or Ubuntu base) provides: glibc, libstdc++, libgcc, the CUDA
# runtime libraries, NCCL, cuBLAS, cuDNN, and the driver's, which the container runtime mounts.
deps="$prefix/lib/deps"
mkdir -p "$deps"
missing=0
while IFS= read -r -d '' file; do
  file -b "$file" | grep -q '^ELF' || continue
  while IFS= read -r line; do
    [[ "$line" == *"=>"* ]] || continue
    name=$(awk '{print $1}' <<<"$line")
    path=$(sed -n 's/.*=> \([^ ]*\).*/\1/p' <<<"$line")
    [[ "$name" =~ $cohort_provided_libraries ]] && continue
    if [ "$path" = not ] || [ -z "$path" ]; then
      echo "container-build: ${file#"$prefix"/} needs $name, which is not found" >&2
      missing=$((missing + 1))
    elif [ ! -e "$deps/$name" ]; then
      cp -L "$path" "$deps/$name"
      strip --strip-unneeded "$deps/$name" 2>/dev/null || true
    fi
  done < <(ldd "$file" 2>/dev/null || true)
done < <(find "$prefix/bin" "$prefix/libexec" "$prefix/python" -type f -print0 2>/dev/null)
[ "$missing" -eq 0 ] || exit 1
echo "container-build: $(find "$deps" -type f | wc -l) libraries copied into $deps:" \
     "$(cd "$deps" && ls | paste -sd ' ')"

