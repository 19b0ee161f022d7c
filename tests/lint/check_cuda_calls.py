#!/usr/bin/env python3
"""Refuses two CUDA habits that hide bugs, in every C++ and CUDA source of the tree.

1. cudaGetLastError() used to check a launch (or anything else). It returns whatever error any
   earlier call on the thread left pending, so an unrelated failure is reported as this call's,
   and it clears it from its owner's check (Note [Checking a launch] in
   include/cohort/core/detail/cuda_launch.hpp). The one allowed form is `(void)cudaGetLastError()`,
   which clears an error the code has just handled itself. cudaPeekAtLastError() has the same
   flaw outside the tests, which use it to show that an unrelated error stays pending.
2. A pageable `cudaMemcpy(`. It runs on the legacy default stream, which cohort's non-blocking
   streams do not wait for, and a pageable host-to-device copy may return before its data has
   arrived: copy in the stream's order (cudaMemcpyAsync on the stream, or
   cohort::detail::write_now / read_after). Allowed only in the named safe helper
   tests/support/cuda_copy.hpp (cohort_test::copy_with_device_idle, which idles the device on
   both sides), and on a call that fails on purpose, marked `// fails on purpose: <why>` on its
   line or the line before.

Usage: check_cuda_calls.py SOURCE_ROOT   (exit 1 naming each offence)
       check_cuda_calls.py --self-test   (the rules on known good and bad lines)
"""

import os
import re
import sys

EXTENSIONS = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc")
FOLDERS = ("src", "include", "kernels", "workloads", "benchmarks", "examples", "tools", "tests")
SAFE_COPY_HELPERS = {"tests/support/cuda_copy.hpp"}  # path -> the named safe helper lives here
ON_PURPOSE = re.compile(r"//\s*fails on purpose:\s*\S")

GET_LAST_ERROR = re.compile(r"\bcudaGetLastError\s*\(")
CLEARED = re.compile(r"\(\s*void\s*\)\s*cudaGetLastError\s*\(\s*\)")
PEEK = re.compile(r"\bcudaPeekAtLastError\s*\(")
PAGEABLE_COPY = re.compile(r"\bcudaMemcpy\s*\(")


def code_only(text):
    """`text` with comments and string and character literals blanked, line breaks kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def offences(relative, text):
    """[(line number, what)] for one file."""
    found = []
    lines = text.split("\n")
    code = code_only(text).split("\n")
    in_tests = relative.startswith("tests/")
    for number, line in enumerate(code, start=1):
        for match in GET_LAST_ERROR.finditer(line):
            if not any(c.start() <= match.start() < c.end() for c in CLEARED.finditer(line)):
                found.append((number, "cudaGetLastError() used as a check: check the call's own "
                                      "status (a launch: cohort::detail::launch_kernel); only "
                                      "(void)cudaGetLastError() may clear an error just handled"))
        if PEEK.search(line) and not in_tests:
            found.append((number, "cudaPeekAtLastError() reports errors that are not this call's: "
                                  "check the call's own status"))
        if PAGEABLE_COPY.search(line) and relative not in SAFE_COPY_HELPERS:
            marked = ON_PURPOSE.search(lines[number - 1]) or (
                number >= 2 and ON_PURPOSE.search(lines[number - 2]))
            if not marked:
                found.append((number, "pageable cudaMemcpy( on the legacy stream: copy in the "
                                      "stream's order (cudaMemcpyAsync on it, or "
                                      "cohort::detail::write_now / read_after), or use "
                                      "cohort_test::copy_with_device_idle (tests/support/"
                                      "cuda_copy.hpp)"))
    return found


def check_tree(root):
    failures = []
    scanned = 0
    for folder in FOLDERS:
        for directory, subfolders, files in os.walk(os.path.join(root, folder)):
            subfolders[:] = [s for s in subfolders if s != "build" and not s.startswith(".")]
            for name in files:
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as source:
                    text = source.read()
                scanned += 1
                for number, what in offences(relative, text):
                    failures.append(f"{relative}:{number}: {what}")
    return scanned, failures


def self_test():
    """Each rule on lines it must refuse and lines it must accept."""
    bad = [
        ("src/a.cu", "  COHORT_CUDA_TRY(cudaGetLastError());"),
        ("workloads/b.cu", "  const cudaError_t error = cudaGetLastError();"),
        ("tests/c.cu", "  kernel<<<1, 1>>>(); ASSERT_EQ(cudaGetLastError(), cudaSuccess);"),
        ("src/d.cpp", "  if (cudaPeekAtLastError() != cudaSuccess) throw 1;"),
        ("tests/e.cpp", "  check(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));"),
        ("benchmarks/f.cpp", "    cudaMemcpy (h, d, n, cudaMemcpyDeviceToHost);"),
    ]
    good = [
        ("src/a.cu", "    (void)cudaGetLastError();  // this launch's own error"),
        ("src/a.cu", "  // never cudaGetLastError() after a launch"),
        ("src/a.cu", '  COHORT_FAIL(CudaError, "cudaMemcpy(...) failed");'),
        ("src/a.cu", "  COHORT_CUDA_TRY(cudaMemcpyAsync(d, h, n, kind, stream));"),
        ("tests/e.cpp", "  EXPECT_NE(cudaPeekAtLastError(), cudaSuccess);"),
        ("tests/support/cuda_copy.hpp", "  status = cudaMemcpy(to, from, bytes, kind);"),
        ("tests/e.cpp", "  ASSERT_NE(cudaMemcpy(nullptr, &v, 1, k), cudaSuccess);  "
                        "// fails on purpose: leaves an error pending"),
        ("tests/e.cpp", "  // fails on purpose: leaves an error pending\n"
                        "  ASSERT_NE(cudaMemcpy(nullptr, &v, 1, k), cudaSuccess);"),
    ]
    wrong = [f"not refused: {path}: {line}" for path, line in bad if not offences(path, line)]
    wrong += [f"refused: {path}: {line}: {offences(path, line)}" for path, line in good
              if offences(path, line)]
    return wrong


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        wrong = self_test()
        for line in wrong:
            print(line)
        print("self-test:", "FAILED" if wrong else "passed")
        return 1 if wrong else 0
    if len(argv) != 2:
        print(__doc__)
        return 2
    wrong = self_test()
    if wrong:
        print("the checker's own rules are broken:", *wrong, sep="\n  ")
        return 1
    scanned, failures = check_tree(argv[1])
    if scanned < 50:
        print(f"only {scanned} sources found under {argv[1]}: is it cohort's source tree?")
        return 1
    for failure in failures:
        print(failure)
    print(f"{scanned} sources checked, {len(failures)} offences")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
