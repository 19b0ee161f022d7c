#!/usr/bin/env bash
# The torch backend "cohort" on CUDA tensors, on a machine with a GPU: builds the Python package
# from this checkout against the torch of that machine's Python, then trains DDP on train_mlp's
# MLP with two NCCL ranks sharing GPU 0 (tests/python/test_ddp.py --shared-gpu) over "cohort"
# and over "gloo", and checks that every step's loss agrees (docs/python.md, docs/gpu-results.md).
#
#   scripts/gpu/python-ddp.sh [--out DIR] [--python PYTHON] [--site DIR] [--device cuda|cpu]
#
# Run it from the checkout's root, after scripts/gpu-check.sh (the device tool copies the working
# tree there: `scripts/gpu/python-ddp.sh --out "$OUT/python"`). It needs no package registry: the
# Python must already have torch, nanobind, scikit-build-core, CMake and ninja, and the CUDA
# toolkit must be installed. The build takes a few minutes (the whole library, for this GPU's
# architecture only); --site DIR uses a package already installed there instead, and
# --device cpu runs the same steps on the CPU (to test this script where there is no GPU);
# COHORT_CUDA_ARCHITECTURES (default: native, this machine's GPU) builds for others.
# Writes OUT/python-ddp.json (both runs, the comparison) and OUT/python-ddp.log; exit 0 when the
# losses agree, 1 when they do not or a step failed, 2 for a bad argument.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out_dir="${OUT:-.}/python-ddp"
python=python3
site=""
device=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out_dir=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --site) site=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "python-ddp: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$device" in cuda|cpu) ;; *) echo "python-ddp: --device is cuda or cpu" >&2; exit 2 ;; esac
mkdir -p "$out_dir"
log="$out_dir/python-ddp.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }
fail() { say "python-ddp: $*"; exit 1; }

versions=$("$python" -c 'import sys, torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPUs visible: {torch.cuda.device_count()}")' 2>>"$log") ||
  fail "$python cannot import torch (see $log)"
say "$(date -u +%FT%TZ) $versions; commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ "$device" = cuda ]; then
  "$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
    fail "this torch sees no CUDA device (--device cpu runs the steps on the CPU)"
fi

if [ -z "$site" ]; then
  site="${TMPDIR:-/tmp}/cohort-python-ddp-site"
  build_dir="${TMPDIR:-/tmp}/cohort-python-ddp-build"
  with_cuda=OFF
  defines=()
  if [ "$device" = cuda ]; then
    with_cuda=ON
    defines=(-C "cmake.define.CMAKE_CUDA_ARCHITECTURES=${COHORT_CUDA_ARCHITECTURES:-native}")
    # The NCCL that torch loads (PyPI's nvidia-nccl package, where torch came with one): one
    # libnccl.so.2 is loaded per process, torch's first, so cohort is compiled against its headers.
    # Without it, CMake finds the system's (cmake/FindNCCL.cmake).
    nccl=$("$python" -c 'import os, nvidia.nccl as n
d = list(n.__path__)[0]
h, l = os.path.join(d, "include"), os.path.join(d, "lib", "libnccl.so.2")
print(h + ";" + l if os.path.exists(os.path.join(h, "nccl.h")) and os.path.exists(l) else "")' \
      2>/dev/null) || nccl=""
    if [ -n "$nccl" ]; then
      say "NCCL from torch's environment: ${nccl#*;}"
      defines+=(-C "cmake.define.NCCL_INCLUDE_DIR=${nccl%;*}" -C "cmake.define.NCCL_LIBRARY=${nccl#*;}")
    fi
  fi
  start=$SECONDS
  say "building the package (COHORT_WITH_CUDA=$with_cuda) into $site"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$python" -m pip install --no-build-isolation --no-deps --no-index --upgrade --target "$site" \
    -C build-dir="$build_dir" -C cmake.define.COHORT_WITH_CUDA=$with_cuda "${defines[@]}" \
    "$root" >>"$log" 2>&1 || fail "pip install . failed after $((SECONDS - start)) s (see $log)"
  say "pip install . took $((SECONDS - start)) s"
fi
PYTHONPATH="$site" "$python" -c 'import cohort, torch.distributed as d
assert "COHORT" in d.Backend._plugins
print("import cohort:", cohort.__version__, "built with CUDA:", cohort.built_with_cuda)' 2>&1 |
  tee -a "$log" | grep -q "import cohort" || fail "the package does not import (see $log)"

start=$SECONDS
PYTHONPATH="$site" "$python" "$root/tests/python/test_ddp.py" --ranks 2 --steps 40 \
  --device "$device" --shared-gpu --json "$out_dir/python-ddp.json" >>"$log" 2>&1
status=$?
grep "^DDP" "$log" | tail -n 1
if [ $status -ne 0 ]; then
  fail "DDP over cohort against gloo failed after $((SECONDS - start)) s: $(grep -E 'AssertionError|exited with|Error' "$log" | tail -n 3 | tr '\n' ' ')"
fi
say "python-ddp: passed in $((SECONDS - start)) s"
