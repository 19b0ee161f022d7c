#!/usr/bin/env bash
# Mutation check: applies each plausible bug of tests/mutation/mutants.txt to a copy of the source,
# rebuilds only the test binary that should catch it (host-only build, through ccache), runs the
# named tests and expects them to FAIL. Exits 1 if any mutant survives (its tests pass), 2 if the
# list no longer matches the code or a mutant does not build. The real tree is never touched.
#
#   tests/mutation/run.sh                # every mutant
#   tests/mutation/run.sh ddp_sum_not_avg halved_deadline
#
# The copy and its build are kept under $COHORT_MUTATION_DIR (default /tmp/cohort-mutation-<uid>)
# so that a second run rebuilds only what changed. Run on demand (docs/testing.md, "Mutation check").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
work=${COHORT_MUTATION_DIR:-${TMPDIR:-/tmp}/cohort-mutation-$(id -u)}
copy="$work/src"
build="$work/build"
jobs=${COHORT_MUTATION_JOBS:-$(nproc)}
test_timeout=${COHORT_MUTATION_TEST_TIMEOUT:-600}

log() { printf '[mutation %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# The working tree as it is (tracked and untracked, not ignored), with modification times kept so
# that ninja rebuilds only what differs from the last run.
log "copying $root to $copy"
mkdir -p "$copy"
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
   tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$copy"

if [[ ! -f "$build/build.ninja" ]]; then
  log "configuring a host-only build in $build"
  cmake -S "$copy" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_CUDA=OFF \
    -DCOHORT_BUILD_TESTS=ON -DCOHORT_BUILD_BENCHMARKS=OFF -DCOHORT_BUILD_EXAMPLES=OFF >/dev/null
fi

mutated_file=""
mutated_original=""
restore() {
  if [[ -n "$mutated_file" ]]; then
    cp "$mutated_original" "$copy/$mutated_file"
    mutated_file=""
  fi
}
trap restore EXIT

# apply <code> <bug>: replaces the one line holding <code> (exactly once in the tree) by <bug>.
apply() {
  local code=$1 bug=$2 files
  files=$(cd "$copy" && grep -rlF -- "$code" src kernels include || true)
  if [[ $(printf '%s' "$files" | grep -c .) -ne 1 ]]; then
    log "the code is not in exactly one file (found: ${files:-none}): update mutants.txt"
    return 1
  fi
  mutated_file=$files
  mutated_original="$work/original"
  cp "$copy/$mutated_file" "$mutated_original"
  CODE=$code BUG=$bug python3 - "$copy/$mutated_file" <<'PY'
import os, sys
path, code, bug = sys.argv[1], os.environ["CODE"], os.environ["BUG"]
text = open(path).read()
if text.count(code) != 1:
    sys.exit(f"{path}: the code occurs {text.count(code)} times, not once")
open(path, "w").write(text.replace(code, "" if bug == "<nothing>" else bug))
PY
}

selected=("$@")
killed=0
survived=()
broken=()
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  IFS='|' read -r name code bug target filter <<<"$line"
  trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
  name=$(trim "$name") code=$(trim "$code") bug=$(trim "$bug")
  target=$(trim "$target") filter=$(trim "$filter")
  if [[ ${#selected[@]} -gt 0 && ! " ${selected[*]} " == *" $name "* ]]; then
    continue
  fi
  log "$name: $target --gtest_filter=$filter"
  if ! apply "$code" "$bug"; then
    broken+=("$name (code not found)")
    continue
  fi
  start=$SECONDS
  if ! cmake --build "$build" --target "$target" -j "$jobs" >"$work/$name.build.log" 2>&1; then
    log "$name: does not build (see $work/$name.build.log)"
    broken+=("$name (does not build)")
    restore
    continue
  fi
  binary=$(find "$build/tests" -type f -name "$target" -perm -u+x | head -1)
  status=0
  COHORT_TEST_BINARY_DIR="$build" timeout "$test_timeout" "$binary" --gtest_filter="$filter" \
    >"$work/$name.test.log" 2>&1 || status=$?
  restore
  if [[ $status -eq 0 ]]; then
    log "$name: SURVIVED: the tests passed with the bug ($((SECONDS - start)) s)"
    survived+=("$name")
  else
    failed=$(grep -c '^\[  FAILED  \].*\.' "$work/$name.test.log" || true)
    log "$name: killed (exit $status, $failed failing tests, $((SECONDS - start)) s)"
    killed=$((killed + 1))
  fi
done <"$here/mutants.txt"

# The unmutated tree must build again (and stays built for the next run).
restore
log "$killed killed, ${#survived[@]} survived, ${#broken[@]} broken"
if [[ ${#broken[@]} -gt 0 ]]; then
  printf '  broken: %s\n' "${broken[@]}"
  exit 2
fi
if [[ ${#survived[@]} -gt 0 ]]; then
  printf '  survived: %s\n' "${survived[@]}"
  exit 1
fi
if [[ $killed -eq 0 ]]; then
  log "no mutant ran (names: ${selected[*]:-all})"
  exit 2
fi
