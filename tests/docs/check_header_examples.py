#!/usr/bin/env python3
"""Compiles every example in cohort's public headers.

    check_header_examples.py CXX INCLUDE_DIR [INCLUDE_DIR ...]

An example is a block of doc-comment lines indented by four more spaces ("///     code") that
follows an empty doc line ("///"). Each becomes the body of its own function in one translation
unit, after header_examples_context.hpp, which declares what the examples assume a program has
(a world, a DataParallel, an optimizer, a stream, and the program's own functions such as
forward). A block that is output rather than code starts with a line listed in NOT_CODE.
"""
import glob
import os
import subprocess
import sys
import tempfile

NOT_CODE = ("category         device",)  # memory_report.hpp: the table it prints

HERE = os.path.dirname(os.path.abspath(__file__))


def examples(include_dir):
    found = []
    for path in sorted(glob.glob(os.path.join(include_dir, "cohort", "*", "*.hpp"))):
        with open(path) as handle:
            lines = handle.read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].startswith("///     ") and i > 0 and lines[i - 1].rstrip() == "///":
                j = i
                while j < len(lines) and lines[j].startswith("///     "):
                    j += 1
                block = [line[8:] for line in lines[i:j]]
                if not block[0].startswith(NOT_CODE):
                    found.append((os.path.relpath(path, include_dir), i + 1, block))
                i = j
            else:
                i += 1
    return found


def main(cxx, include_dirs):
    blocks = examples(include_dirs[0])
    assert blocks, "no examples found under " + include_dirs[0]
    source = ['#include "header_examples_context.hpp"', ""]
    where = []  # (first line in source, header, header line, length)
    for index, (header, line, block) in enumerate(blocks):
        # The example in a block of its own, so that it may declare names the context has.
        source.append("int example_%d(EXAMPLE_CONTEXT) {  // %s:%d" % (index, header, line))
        source.append("  {")
        where.append((len(source) + 1, header, line, len(block)))
        source.extend("    " + code for code in block)
        source.append("  }")
        source.append("  return 0;")
        source.append("}")
        source.append("")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "header_examples.cpp")
        with open(path, "w") as handle:
            handle.write("\n".join(source) + "\n")
        command = [cxx, "-std=c++20", "-fsyntax-only", "-Wno-unused", "-Wno-shadow", "-I", HERE]
        for include in include_dirs:
            command += ["-I", include]
        result = subprocess.run(command + [path], capture_output=True, text=True)
    if result.returncode != 0:
        # Point each error at the header line it comes from.
        for error in result.stderr.splitlines():
            text = error
            fields = error.split(":")
            if error.startswith(path + ":") and len(fields) > 2 and fields[1].isdigit():
                number = int(fields[1])
                for first, header, line, length in where:
                    if first <= number < first + length:
                        text = "%s:%d: %s" % (header, line + number - first,
                                              error.split(":", 3)[-1].strip())
            sys.stderr.write(text + "\n")
        sys.stderr.write("header examples: %d blocks, compilation failed\n" % len(blocks))
        return 1
    print("header examples: %d blocks in %d headers compile" %
          (len(blocks), len({header for header, _, _ in blocks})))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
