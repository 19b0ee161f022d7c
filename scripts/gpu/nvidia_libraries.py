#!/usr/bin/env python3
"""Which NVIDIA libraries the GPU check runs with, compared by full version (scripts/gpu-check.sh).

Python's `nvidia-*` wheels put CUDA, NCCL, cuBLAS and cuDNN in site-packages/nvidia/*/lib. Put on
LD_LIBRARY_PATH, such a folder shadows the system's copy of every library it holds, newer or not:
a wheel's NCCL 2.27 would win over the image's NCCL 2.28.9, and a check of the major version alone
would let it pass. So:

  nvidia_libraries.py dirs [--system-dir DIR]... [--ldconfig FILE] [--site DIR]...
      prints, one a line, the wheels' lib folders that shadow no newer copy of any library they
      hold (the system's: the --system-dir folders first, then the loader's cache, `ldconfig -p`
      or FILE holding its output); says on standard error which folder it left out and why.
      --site defaults to python3's sys.path.
  nvidia_libraries.py fits NAME LOADED COMPILED
      exits 0 when a program compiled against COMPILED can run with LOADED: the same major
      version and not an older release (major.minor; for NCCL, whose minor releases add API and
      configuration fields, major.minor.patch); else prints why and exits 1.

A wheel's library is as new as its wheel (its dist-info names the version and lists the file);
a system library's version is in the name its symbolic link resolves to (libnccl.so.2.28.9).
"""

import glob
import os
import re
import subprocess
import sys

# The libraries cohort loads that a GPU machine brings (scripts/lib/common.sh,
# cohort_provided_libraries), by the name the loader looks for.
WATCHED = re.compile(
    r"^lib(cudart|nccl|cublas|cublasLt|cudnn(_[a-z_]+)?|nvrtc|nvJitLink|cupti)\.so\.\d+$")


def version_tuple(text):
    """(2, 28, 9) from "2.28.9" (a trailing non-numeric part is dropped); None when none."""
    numbers = re.findall(r"\d+", text.split("+")[0])
    return tuple(int(n) for n in numbers) if numbers else None


def file_version(path):
    """The version in the name `path` resolves to (libnccl.so.2 -> libnccl.so.2.28.9), or None."""
    real = os.path.basename(os.path.realpath(path))
    match = re.search(r"\.so\.(\d+(?:\.\d+)+)$", real)
    return version_tuple(match.group(1)) if match else None


def show(version):
    return ".".join(str(n) for n in version) if version else "unknown"


def wheel_versions(site):
    """{absolute file path: version} for every file a dist-info's RECORD lists under site."""
    versions = {}
    for info in glob.glob(os.path.join(site, "*.dist-info")):
        name = os.path.basename(info)[: -len(".dist-info")]
        version = version_tuple(name.split("-", 1)[1]) if "-" in name else None
        metadata = os.path.join(info, "METADATA")
        if os.path.exists(metadata):
            with open(metadata, encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    if line.startswith("Version:"):
                        version = version_tuple(line.split(":", 1)[1].strip()) or version
                        break
        record = os.path.join(info, "RECORD")
        if version is None or not os.path.exists(record):
            continue
        with open(record, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                listed = line.split(",", 1)[0]
                versions[os.path.normpath(os.path.join(site, listed))] = version
    return versions


def system_libraries(system_dirs, ldconfig_text):
    """{soname: (version, path)}: the first copy the loader would find without the wheels."""
    found = {}
    for folder in system_dirs:
        for path in sorted(glob.glob(os.path.join(folder, "lib*.so.*"))):
            name = os.path.basename(path)
            if WATCHED.match(name) and name not in found:
                found[name] = (file_version(path), path)
    for line in ldconfig_text.splitlines():
        match = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if not match or "x86-64" not in match.group(2) and "64bit" not in match.group(2):
            continue
        name, path = match.group(1), match.group(3)
        if WATCHED.match(name) and name not in found:
            found[name] = (file_version(path), path)
    return found


def choose_dirs(sites, system_dirs, ldconfig_text):
    """(folders to use, [why each other folder was left out])."""
    system = system_libraries(system_dirs, ldconfig_text)
    chosen, left_out = [], []
    for site in sites:
        folders = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
        if not folders:
            continue
        versions = wheel_versions(site)
        for folder in folders:
            shadowed = []
            for path in sorted(glob.glob(os.path.join(folder, "lib*.so.*"))):
                name = os.path.basename(path)
                if not WATCHED.match(name) or name not in system:
                    continue
                mine = versions.get(os.path.normpath(path)) or file_version(path)
                theirs, where = system[name]
                if theirs is not None and (mine is None or mine < theirs):
                    shadowed.append(f"{name} {show(mine)} is older than the system's "
                                    f"{show(theirs)} ({where})")
            real = os.path.realpath(folder)
            if shadowed:
                left_out.append(f"{real} left out, the system's copy is newer: "
                                + "; ".join(shadowed))
            elif real not in chosen:
                chosen.append(real)
    return chosen, left_out


def fits(name, loaded, compiled):
    """'' when `loaded` can run what was compiled against `compiled`, else the reason."""
    have, want = version_tuple(loaded), version_tuple(compiled)
    if have is None or want is None:
        return ""  # nothing to compare: the doctor says what it could not read
    if have[0] != want[0]:
        return f"{name} {loaded} loaded but compiled against {compiled} (another major version)"
    width = 3 if name.lower() == "nccl" else 2
    if have[:width] < want[:width]:
        return (f"{name} {loaded} loaded but compiled against {compiled} (an older release: "
                f"it may lack what cohort calls)")
    return ""


def main(argv):
    if len(argv) >= 2 and argv[1] == "fits" and len(argv) == 5:
        reason = fits(argv[2], argv[3], argv[4])
        if reason:
            print(reason)
            return 1
        return 0
    if len(argv) >= 2 and argv[1] == "dirs":
        sites, system_dirs, ldconfig_file = [], [], None
        rest = argv[2:]
        while rest:
            option = rest.pop(0)
            if option in ("--site", "--system-dir", "--ldconfig") and rest:
                value = rest.pop(0)
                if option == "--site":
                    sites.append(value)
                elif option == "--system-dir":
                    system_dirs.append(value)
                else:
                    ldconfig_file = value
            else:
                print(f"nvidia_libraries.py: unknown argument '{option}'", file=sys.stderr)
                return 2
        if not sites:
            sites = [p for p in sys.path if p and os.path.isdir(p)]
        if ldconfig_file is not None:
            with open(ldconfig_file, encoding="utf-8", errors="replace") as text:
                ldconfig_text = text.read()
        else:
            try:
                ldconfig_text = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                                               check=False).stdout
            except OSError:
                ldconfig_text = ""
        chosen, left_out = choose_dirs(sites, system_dirs, ldconfig_text)
        for folder in chosen:
            print(folder)
        for why in left_out:
            print(f"gpu-check: {why}", file=sys.stderr)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
