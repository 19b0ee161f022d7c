#!/usr/bin/env bash
# scripts/gpu-check.sh must fail loudly, with the reason, whenever nothing real could run: no
# bundle, no nvidia-smi, GPUs that nvidia-smi sees but CUDA cannot use, a library of another major
# version, no python3 to judge with. A bundle whose GPU tests and programs are missing runs to the
# end and fails there, with the judged table on top of its report. Fakes stand in for nvidia-smi
# and cohort-doctor. (The judge itself: test_gpu_judge.py.)
set -uo pipefail
script="$1/scripts/gpu-check.sh"
work=$(mktemp -d)
[ -n "${COHORT_KEEP_WORK:-}" ] && echo "work: $work"
trap '[ -n "${COHORT_KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
failures=0

# expect_failure NAME REASON-REGEX COMMAND...: the check must exit non-zero and say REASON.
expect_failure() {
  local name=$1 reason=$2 output status
  shift 2
  output=$("$@" 2>&1)
  status=$?
  if [ $status -eq 0 ]; then
    echo "FAIL $name: gpu-check exited 0"; echo "$output" | tail -n 5; failures=$((failures + 1))
  elif ! grep -Eq "$reason" <<<"$output"; then
    echo "FAIL $name: exit $status without the reason /$reason/"; echo "$output" | tail -n 5
    failures=$((failures + 1))
  else
    echo "ok   $name: exit $status, $(grep -Eo "$reason" <<<"$output" | head -n 1)"
  fi
}

# A bundle whose doctor prints $work/doctor.json, and a PATH with a fake nvidia-smi (or none).
make_bundle() {  # make_bundle DIR GPU_COUNT NCCL_LOADED [TESTS]
  mkdir -p "$1/bin"
  cat >"$1/bin/cohort-doctor" <<DOCTOR
#!/usr/bin/env bash
if [ "\${1:-}" = "--json" ]; then
  echo '{"gpu_count": $2, "gpu_unavailable_reason": "CUDA driver version is insufficient for CUDA runtime version", "versions": {"cuda runtime": {"loaded": "13.0.0", "compiled": "13.0.0"}, "nccl": {"loaded": "$3", "compiled": "2.28.9"}, "cublas": {"loaded": "13.0.0", "compiled": "13.0.0"}}}'
else
  echo "doctor (fake)"
fi
DOCTOR
  chmod +x "$1/bin/cohort-doctor"
  printf 'commit=fake\ngpu_tests=%s\n' "${4:-}" >"$1/BUNDLE_INFO"
  : >"$1/CTestTestfile.cmake"
}
mkdir -p "$work/smi" "$work/nosmi"
cat >"$work/smi/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
echo "0, NVIDIA H200, 143771 MiB, 535.00"
SMI
chmod +x "$work/smi/nvidia-smi"
for tool in bash env sed grep head tail cut tr wc date hostname mkdir mv rm realpath timeout cat \
            dirname basename chmod awk sort ls ctest; do
  path=$(command -v "$tool" 2>/dev/null) && [ -f "$path" ] && ln -sf "$path" "$work/nosmi/$tool" && ln -sf "$path" "$work/smi/$tool"
done
# The interpreter itself, not a version manager's shim (which needs the full PATH).
python=$(python3 -c 'import sys; print(sys.executable)')
ln -sf "$python" "$work/nosmi/python3" && ln -sf "$python" "$work/smi/python3"
run() { env -u LD_LIBRARY_PATH PATH="$1" "$script" --out "$work/out" "${@:2}"; }

expect_failure "no bundle" "no bundle given" run "$work/smi"
expect_failure "missing bundle folder" "does not exist" run "$work/smi" --bundle "$work/nowhere"
mkdir -p "$work/empty"
expect_failure "a folder that is no bundle" "not a cohort GPU bundle" run "$work/smi" --bundle "$work/empty"
make_bundle "$work/ok" 1 2.28.9
# A packed library (gpu-bundle.sh packs those over 8 MiB): unpacked next to the report, by
# python3's lzma here (this PATH has no xz).
mkdir -p "$work/ok/lib"
printf 'packed library\n' | python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.compress(sys.stdin.buffer.read()))' \
  >"$work/ok/lib/libexample.so.1.xz"
expect_failure "no nvidia-smi" "nvidia-smi is not installed" run "$work/nosmi" --bundle "$work/ok"
make_bundle "$work/old-driver" 0 2.28.9
expect_failure "GPUs CUDA cannot use" "nvidia-smi sees GPUs but CUDA cannot use them" \
  run "$work/smi" --bundle "$work/old-driver"
make_bundle "$work/nccl3" 1 3.0.1
expect_failure "NCCL of another major version" "refusing to run with another major version or an older release: nccl 3.0.1" \
  run "$work/smi" --bundle "$work/nccl3"
mkdir -p "$work/nopython"
for tool in "$work"/smi/*; do
  [ "$(basename "$tool")" = python3 ] || cp -P "$tool" "$work/nopython/"
done
expect_failure "no python3 to judge with" "python3 is not installed" run "$work/nopython" --bundle "$work/ok"
expect_status() {  # expect_status NAME STATUS COMMAND...
  local name=$1 expected=$2 status
  shift 2
  "$@" >/dev/null 2>&1
  status=$?
  if [ $status -eq "$expected" ]; then
    echo "ok   $name: exit $status"
  else
    echo "FAIL $name: exit $status, not $expected"; failures=$((failures + 1))
  fi
}
expect_status "a budget that is no number" 2 run "$work/smi" --bundle "$work/ok" --budget soon
if command -v ctest >/dev/null; then
  # Nothing of the bundle can run: every step fails fast, the judge fails the check (exit 1), and
  # the report opens with the judged table.
  expect_failure "ctest finds no GPU test" "ctest -L gpu: FAIL" run "$work/smi" --bundle "$work/ok" --quick
  grep -q "No tests were found" "$work/out/ctest-gpu.log" ||
    { echo "FAIL ctest finds no GPU test: its log does not say so"; failures=$((failures + 1)); }
  output=$(run "$work/smi" --bundle "$work/ok" --quick 2>&1)
  status=$?
  [ $status -eq 1 ] || { echo "FAIL: the judged exit status is $status, not 1"; failures=$((failures + 1)); }
  first_section=$(grep -m 1 '^## ' "$work/out/gpu-report.md")
  if [ "$first_section" != "## Judged results" ]; then
    echo "FAIL: the report opens with '$first_section', not the judged table"; failures=$((failures + 1))
  fi
  grep -q '^- \*\*Exit 1\*\*' "$work/out/gpu-report.md" ||
    { echo "FAIL: the report does not say exit 1"; failures=$((failures + 1)); }
  grep -q '^| required steps | .* | all pass | \*\*MISSED\*\* | failed: ctest -L gpu; ' "$work/out/gpu-report.md" ||
    { echo "FAIL: the judged table does not name the failed GPU tests"; failures=$((failures + 1)); }
  grep -q '"name": "ctest -L gpu", "status": "FAIL".*"required": true' "$work/out/steps.jsonl" ||
    { echo "FAIL: steps.jsonl does not record the failed GPU tests"; failures=$((failures + 1)); }
  grep -q "Mode: --quick" "$work/out/gpu-report.md" ||
    { echo "FAIL: the report does not name --quick"; failures=$((failures + 1)); }
  grep -Eq "gpu-check: \[[0-9]+s\] ctest -L gpu: FAIL \(exit [0-9]+ after [0-9]+s\)" <<<"$output" ||
    { echo "FAIL: the step's time is not printed"; failures=$((failures + 1)); }
  echo "ok   a bundle that cannot run: exit $status, the judged table on top of the report"
fi
if [ "$(cat "$work/out/lib/libexample.so.1" 2>/dev/null)" != "packed library" ]; then
  echo "FAIL: the packed library was not unpacked into $work/out/lib"; failures=$((failures + 1))
fi
[ -s "$work/out/gpu-report.md" ] || { echo "FAIL: no report written"; failures=$((failures + 1)); }
exit $failures
