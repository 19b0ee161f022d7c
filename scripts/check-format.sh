#!/usr/bin/env bash
# Checks that the project's C++ files are formatted as .clang-format says: clang-format
# --dry-run --Werror over every .cpp, .hpp, .h, .cc, .cu and .cuh file that git tracks or would
# track (so nothing under build/ and no generated file), and names each file it would change.
#
#   scripts/check-format.sh              # check; exit status 1 when a file differs
#   scripts/check-format.sh --diff       # also show what would change
#   scripts/check-format.sh --fix        # reformat the files that differ, in place
#   scripts/check-format.sh FILE...      # only these files (with or without --diff/--fix)
#
# CLANG_FORMAT picks the program (default: clang-format). Versions format some constructs
# differently, so check with the version CI uses; the script prints the one it ran.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

mode=check
files=()
for argument in "$@"; do
  case "$argument" in
    --diff) mode=diff ;;
    --fix) mode=fix ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check-format.sh: unknown option $argument (see --help)" >&2; exit 2 ;;
    *) files+=("$argument") ;;
  esac
done

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check-format.sh: $clang_format not found; install it (apt-get install clang-format) or" \
       "set CLANG_FORMAT to the program" >&2
  exit 2
fi

if [[ ${#files[@]} -eq 0 ]]; then
  patterns=('*.cpp' '*.hpp' '*.h' '*.cc' '*.cu' '*.cuh')
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked files and new ones not ignored: build/ and whatever the build generates are ignored.
    while IFS= read -r -d '' file; do
      [[ -f "$file" && "$file" != build/* ]] && files+=("$file")
    done < <(git ls-files -z --cached --others --exclude-standard -- "${patterns[@]}" | sort -zu)
  else
    name_tests=(-name "${patterns[0]}")
    for pattern in "${patterns[@]:1}"; do name_tests+=(-o -name "$pattern"); done
    while IFS= read -r -d '' file; do
      files+=("${file#./}")
    done < <(find . \( -path ./build -o -path ./.git \) -prune -o -type f \( "${name_tests[@]}" \) \
               -print0 | sort -z)
  fi
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check-format.sh: no C++ files to check" >&2
  exit 2
fi

# The files clang-format would change, two clang-format processes at a time.
mapfile -t differing < <(printf '%s\0' "${files[@]}" |
  xargs -0 -n 16 -P 2 "$BASH" -c '
    for file; do
      "$0" --dry-run --Werror -- "$file" >/dev/null 2>&1 || printf "%s\n" "$file"
    done' "$clang_format" | sort)

version=$("$clang_format" --version | head -n 1)
if [[ ${#differing[@]} -eq 0 ]]; then
  echo "check-format.sh: ${#files[@]} files formatted as .clang-format says ($version)"
  exit 0
fi

if [[ $mode == fix ]]; then
  "$clang_format" -i -- "${differing[@]}"
  echo "check-format.sh: reformatted ${#differing[@]} of ${#files[@]} files ($version):"
  printf '  %s\n' "${differing[@]}"
  exit 0
fi

echo "check-format.sh: ${#differing[@]} of ${#files[@]} files differ from .clang-format" \
     "($version):"
for file in "${differing[@]}"; do
  changed=$("$clang_format" -- "$file" | diff -- "$file" - | grep -c '^[<>]' || true)
  echo "  $file ($changed lines)"
  if [[ $mode == diff ]]; then
    "$clang_format" -- "$file" | diff -u --label "$file" --label "$file (formatted)" -- "$file" - |
      sed 's/^/    /' || true
  fi
done
echo "Fix them with: scripts/check-format.sh --fix   (or: $clang_format -i FILE...);" \
     "see the changes first with: scripts/check-format.sh --diff"
exit 1
