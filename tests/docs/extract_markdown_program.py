#!/usr/bin/env python3
"""Writes the program a Markdown page shows in one of its sections, to be compiled and run.

    extract_markdown_program.py PAGE.md "SECTION TITLE" OUTPUT.cpp

The program is every ```cpp block of the section (from its "## SECTION TITLE" heading to the
next "## " heading), in order; each starts with a #line directive pointing at the page, so that
a compiler error names the page's line. A section without such a block is an error.
"""
import os
import sys


def main(page, title, output):
    with open(page) as handle:
        lines = handle.read().split("\n")
    heading = "## " + title
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == heading)
    except StopIteration:
        sys.stderr.write("%s has no section \"%s\"\n" % (page, heading))
        return 1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    program = []
    i = start + 1
    while i < end:
        if lines[i].strip() == "```cpp":
            j = i + 1
            while j < end and lines[j].strip() != "```":
                j += 1
            if j == end:
                sys.stderr.write("%s:%d: a ```cpp block that never ends\n" % (page, i + 1))
                return 1
            program.append('#line %d "%s"' % (i + 2, os.path.abspath(page)))
            program.extend(lines[i + 1:j])
            i = j + 1
        else:
            i += 1
    if not program:
        sys.stderr.write("%s: section \"%s\" shows no ```cpp block\n" % (page, title))
        return 1
    text = "\n".join(program) + "\n"
    # Rewrite only a changed program, so that the build does not recompile an unchanged one.
    if os.path.exists(output):
        with open(output) as handle:
            if handle.read() == text:
                return 0
    with open(output, "w") as handle:
        handle.write(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
