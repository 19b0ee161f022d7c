#!/usr/bin/env python3
"""Compiles, with -Wall -Wextra -Werror, a designated initializer naming one member of each public
options struct, once per member.

    check_options_defaults.py CXX INCLUDE_DIR [INCLUDE_DIR ...]

An options struct is a `struct <Name>Options {` in cohort's public headers. A user writes
`cohort::SamplerOptions{.dataset_size = n, .batch_per_rank = 32}` and leaves the rest at their
defaults; GCC's -Wextra (missing-field-initializers) warns for every member left out that has no
default member initializer. Naming each member alone leaves every other one out at least once,
so the warning names any member without a default.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

STRUCT = re.compile(r"^struct (\w+Options) \{", re.M)
NAMESPACE = re.compile(r"namespace ([\w:]+) \{")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def body_of(text, start):
    """The text between the brace at `start` and its partner."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    raise ValueError("unbalanced braces")


def without_angles(text):
    """`text` without template arguments (which may hold parentheses: std::function<void(X&)>)."""
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"<[^<>]*>", "", text)
    return text


def members(body):
    """The names of the data members declared in a struct body."""
    body = re.sub(r"//[^\n]*", "", body)
    declarations, depth, current = [], 0, ""
    for char in body:
        if char in "{(":
            depth += 1
        elif char in "})":
            depth -= 1
        if char == ";" and depth == 0:
            declarations.append(current.strip())
            current = ""
        else:
            current += char
    names = []
    for declaration in declarations:
        if not declaration or declaration.startswith(("static ", "using ", "friend ")):
            continue
        if "operator" in declaration:
            continue
        head = re.split(r"[={]", declaration, maxsplit=1)[0]
        if "(" in without_angles(head):
            continue  # a member function
        names.append(IDENTIFIER.findall(head)[-1])
    return names


def namespace_at(text, position):
    """The namespaces open at `position` of `text` (comments removed), outermost first."""
    stack = []  # (name or None for other braces)
    i = 0
    while i < position:
        match = NAMESPACE.match(text, i)
        if match:
            stack.append(match.group(1))
            i = match.end()
            continue
        if text[i] == "{":
            stack.append(None)
        elif text[i] == "}" and stack:
            stack.pop()
        i += 1
    return [name for name in stack if name is not None]


def options_structs(include_dir):
    found = []
    for path in sorted(glob.glob(os.path.join(include_dir, "cohort", "*", "*.hpp"))):
        with open(path) as handle:
            text = re.sub(r"//[^\n]*", "", handle.read())
        for match in STRUCT.finditer(text):
            qualified = "::".join(namespace_at(text, match.start()) + [match.group(1)])
            header = os.path.relpath(path, include_dir)
            found.append((header, qualified, members(body_of(text, match.end() - 1))))
    return found


def main(cxx, include_dirs):
    structs = options_structs(include_dirs[0])
    names = {qualified for _, qualified, _ in structs}
    assert "cohort::SamplerOptions" in names, "no SamplerOptions found: the parser is out of date"
    source = []
    for header, _, _ in structs:
        source.append("#include <%s>" % header)
    source.append("")
    for index, (header, qualified, fields) in enumerate(structs):
        assert fields, "no members found in %s (%s): the parser is out of date" % (qualified,
                                                                                  header)
        for field in fields:
            source.append("[[maybe_unused]] %s options_%d_%s{.%s = {}};  // %s" %
                          (qualified, index, field, field, header))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "options_defaults.cpp")
        with open(path, "w") as handle:
            handle.write("\n".join(source) + "\n")
        command = [cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror"]
        for include in include_dirs:
            command += ["-I", include]
        result = subprocess.run(command + [path], capture_output=True, text=True)
    if result.returncode != 0:
        missing = sorted(set(re.findall(r"missing initializer for member .([\w:]+).",
                                        result.stderr)))
        for member in missing:
            sys.stderr.write("%s has no default member initializer\n" % member)
        if not missing:
            sys.stderr.write(result.stderr)
        sys.stderr.write("options defaults: a member of a public options struct has no default "
                         "(give it one: `= {}` or a value), so a designated initializer that "
                         "leaves it out warns under -Wextra\n")
        return 1
    print("options defaults: %d structs, %d members, each left out in turn, compile warning-free"
          % (len(structs), sum(len(fields) for _, _, fields in structs)))
    for _, qualified, fields in structs:
        print("  %s: %s" % (qualified, ", ".join(fields)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
