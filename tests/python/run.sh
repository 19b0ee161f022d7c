#!/usr/bin/env bash
# The Python package's tests (ctest label `python`; docs/python.md). Each call runs one:
#
#   tests/python/run.sh BUILD_DIR build          # pip install . into BUILD_DIR/python-site
#   tests/python/run.sh BUILD_DIR dlpack         # cohort.init() and DLPack arrays, 3 ranks
#   tests/python/run.sh BUILD_DIR torch_backend  # init_process_group("cohort"), 3 ranks
#   tests/python/run.sh BUILD_DIR file_store     # the same over a FileStore (init_method file://)
#   tests/python/run.sh BUILD_DIR ddp            # DDP with "cohort" against "gloo": same losses
#   tests/python/run.sh BUILD_DIR sharded        # FSDP2 and ZeroRedundancyOptimizer, likewise
#   tests/python/run.sh BUILD_DIR version_lock   # a cohort built for another torch refuses it
#   tests/python/run.sh BUILD_DIR faults         # killed, absent and mismatched ranks
#   tests/python/run.sh BUILD_DIR exit           # ranks that leave without destroy_process_group
#   tests/python/run.sh BUILD_DIR torch_suite    # PyTorch's distributed_test, collectives on CPU
#                                                # (5 to 25 minutes: only with
#                                                # COHORT_TEST_TORCH_SUITE=1; report in BUILD_DIR)
#
# The package is built by pip from this checkout, in the virtual environment scripts/test.sh
# prepares (build/torch-venv, with PyTorch from PyPI), and installed into a folder of the build
# (pip --target), so that several builds never share one installation. Exit 77 (ctest: skipped)
# where that environment is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build_dir=$(cd "$1" && pwd)
test=$2
venv="$root/build/torch-venv"
python="$venv/bin/python"
site="$build_dir/python-site"

if [ ! -x "$python" ] || ! "$python" -c 'import torch.distributed.run' 2>/dev/null; then
  echo "skipped: no PyTorch environment at $venv (scripts/test.sh makes it)"
  exit 77
fi

# The CUDA setting of this build, so that the package is built as the library around it is.
with_cuda=OFF
if grep -q '^COHORT_WITH_CUDA:BOOL=ON' "$build_dir/CMakeCache.txt" 2>/dev/null; then
  with_cuda=ON
fi

# The package's CMake build compiles the library again, with the flags of this build's (Release,
# position-independent). Its folder sits beside this build's, at the same depth, and ccache takes
# paths relative to the checkout (CCACHE_BASEDIR): the command lines are then the same as this
# build's, so ccache answers from this build's objects and only the extension modules compile.
package_build="$(dirname "$build_dir")/$(basename "$build_dir").python-package"
# The same compilers and CUDA architectures as this build (ccache hashes the compiler's name).
from_cache() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" 2>/dev/null; }
build_package() {
  # nanobind and scikit-build-core, once (pip answers quickly when they are there).
  if ! "$python" -c 'import nanobind, scikit_build_core' 2>/dev/null; then
    "$python" -m pip install -q nanobind scikit-build-core
  fi
  local start=$SECONDS
  # Warnings are errors here, as in every build of the project's own (pyproject.toml turns
  # them off for users' installs).
  local defines=(-C cmake.define.COHORT_WITH_CUDA=$with_cuda -C cmake.define.COHORT_WARNINGS_AS_ERRORS=ON)
  local variable value
  for variable in CMAKE_C_COMPILER CMAKE_CXX_COMPILER CMAKE_CUDA_COMPILER CMAKE_CUDA_ARCHITECTURES; do
    value=$(from_cache $variable)
    [ -z "$value" ] || defines+=(-C "cmake.define.$variable=$value")
  done
  CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" \
    "$python" -m pip install -q --no-build-isolation --no-deps --upgrade --target "$site" \
    -C build-dir="$package_build" "${defines[@]}" "$root"
  echo "pip install . took $((SECONDS - start)) s (with CUDA: $with_cuda)"
  PYTHONPATH="$site" "$python" -c 'import cohort, torch.distributed as d; assert "COHORT" in d.Backend._plugins; print("import cohort:", cohort.__version__, "backend registered")'
}

if [ "$test" = build ]; then
  build_package
  exit 0
fi
if [ ! -f "$site/cohort/__init__.py" ]; then
  echo "the package is not built: run '$0 $build_dir build' first (ctest: python.build)" >&2
  exit 1
fi

export PYTHONPATH="$site:$here"
export OMP_NUM_THREADS=1
torchrun=("$python" -m torch.distributed.run)
cohortrun="$build_dir/tools/cohortrun/cohortrun"
# torchrun leaves torchelastic_* folders in TMPDIR: give it one of its own.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cohort-python-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"
port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

case "$test" in
  dlpack)
    "$cohortrun" --nproc-per-node 3 "$python" "$here/test_dlpack.py"
    ;;
  torch_backend)
    "${torchrun[@]}" --nproc-per-node 3 --master-port "$(port)" "$here/test_torch_backend.py"
    ;;
  file_store)
    COHORT_TEST_INIT_METHOD="file://$tmp/store" \
      "${torchrun[@]}" --nproc-per-node 2 --master-port "$(port)" "$here/test_torch_backend.py"
    ;;
  ddp)
    "$python" "$here/test_ddp.py" --ranks 4
    ;;
  sharded)
    "$python" "$here/test_sharded.py"
    ;;
  version_lock)
    "$python" "$here/test_version_lock.py" "$site"
    ;;
  faults)
    "$python" "$here/test_faults.py"
    ;;
  exit)
    # torchrun fails the run if a rank dies of a signal; each rank also prints its last line.
    COHORT_TEST_STORE_FILE="$tmp/exit-store" "${torchrun[@]}" --nproc-per-node 2 \
      --master-port "$(port)" "$here/test_exit.py" 2>&1 | tee "$tmp/exit.log"
    for rank in 0 1; do
      grep -q "rank $rank: leaving without destroy_process_group" "$tmp/exit.log" || {
        echo "rank $rank did not reach its exit" >&2
        exit 1
      }
    done
    ;;
  torch_suite)
    if [ "${COHORT_TEST_TORCH_SUITE:-0}" != 1 ]; then
      echo "skipped: PyTorch's distributed_test takes 5 to 25 minutes here; run it with" \
           "COHORT_TEST_TORCH_SUITE=1 (ctest -R python.torch_suite)"
      exit 77
    fi
    # The suite's own helpers import expecttest.
    "$python" -c 'import expecttest' 2>/dev/null || "$python" -m pip install -q expecttest
    PYTHONPATH="$site:$here/suite" "$python" "$here/torch_suite.py" \
      "$build_dir/torch-suite-report.tsv" \
      '^test_(all_reduce|broadcast|all_gather|reduce_scatter|barrier|reduce_|gather|scatter|allgather|all_to_all|send_recv|isend|irecv|batch_isend|sparse_all|backend|destroy|get_rank|get_backend|new_group)' 2
    ;;
  *)
    echo "unknown test '$test' (see the top of $0)" >&2
    exit 2
    ;;
esac
