"""A cohort built for another torch (or for none) refuses to load its torch backend, with an
ImportError that names both versions; COHORT_SKIP_TORCH=1 imports it without the backend."""

import os
import shutil
import subprocess
import sys
import tempfile


def import_cohort(site, environment=None):
    env = dict(os.environ, PYTHONPATH=site, **(environment or {}))
    return subprocess.run([sys.executable, "-c", "import cohort, torch; print(torch.__version__)"],
                          capture_output=True, text=True, env=env, timeout=120)


def with_build_info(site, folder, torch_version):
    copy = os.path.join(folder, "site")
    shutil.copytree(os.path.join(site, "cohort"), os.path.join(copy, "cohort"))
    path = os.path.join(copy, "cohort", "_build_info.py")
    lines = open(path).read().splitlines()
    lines = [f'TORCH_VERSION = "{torch_version}"' if line.startswith("TORCH_VERSION") else line
             for line in lines]
    open(path, "w").write("\n".join(lines) + "\n")
    return copy


def main():
    site = sys.argv[1]
    good = import_cohort(site)
    assert good.returncode == 0, good.stderr
    running = good.stdout.strip()
    with tempfile.TemporaryDirectory() as folder:
        other = with_build_info(site, folder, "2.3.1+cpu")
        result = import_cohort(other)
        assert result.returncode != 0, "a cohort built for torch 2.3.1 imported into " + running
        assert "ImportError" in result.stderr, result.stderr
        for words in ("built against torch 2.3.1+cpu", f"runs torch {running}", "Rebuild",
                      "COHORT_SKIP_TORCH"):
            assert words in result.stderr, (words, result.stderr)
        skipped = import_cohort(other, {"COHORT_SKIP_TORCH": "1"})
        assert skipped.returncode == 0, skipped.stderr
    with tempfile.TemporaryDirectory() as folder:
        none = with_build_info(site, folder, "")
        result = import_cohort(none)
        assert result.returncode != 0 and "built without PyTorch" in result.stderr, result.stderr
    print(f"version lock: a cohort built for torch 2.3.1 or for none refuses torch {running} "
          "with both versions named")


if __name__ == "__main__":
    main()
