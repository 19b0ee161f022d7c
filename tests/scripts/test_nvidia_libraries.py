#!/usr/bin/env python3
"""scripts/gpu/nvidia_libraries.py: a wheel's lib folder never shadows a newer system copy of a
library it holds, versions compare in full, and a library older than the one compiled against is
refused (major.minor; NCCL major.minor.patch). Fake site-packages and system folders, no GPU."""

import os
import sys
import shutil
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu"))
import nvidia_libraries as libraries  # noqa: E402


def wheel(site, dist, version, folder, files):
    """A wheel `dist`-`version` whose RECORD lists nvidia/<folder>/lib/<file> for each file."""
    lib = os.path.join(site, "nvidia", folder, "lib")
    os.makedirs(lib, exist_ok=True)
    info = os.path.join(site, f"{dist}-{version}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "RECORD"), "a") as record:
        for name in files:
            open(os.path.join(lib, name), "w").close()
            record.write(f"nvidia/{folder}/lib/{name},sha256=x,1\n")
    return os.path.realpath(lib)


def system_library(folder, soname, full):
    """`folder`/`soname` -> `folder`/<soname's base>.so.<full>, as a package installs it."""
    os.makedirs(folder, exist_ok=True)
    real = os.path.join(folder, soname.split(".so.")[0] + ".so." + full)
    open(real, "w").close()
    os.symlink(os.path.basename(real), os.path.join(folder, soname))
    return os.path.join(folder, soname)


class ChooseDirs(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="cohort-nvidia-libraries-")
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.site = os.path.join(self.root, "site")
        self.system = os.path.join(self.root, "usr-lib")

    def choose(self, ldconfig=""):
        return libraries.choose_dirs([self.site], [self.system], ldconfig)

    def test_an_older_wheel_leaves_the_newer_system_nccl_in_place(self):
        system_library(self.system, "libnccl.so.2", "2.28.9")
        nccl = wheel(self.site, "nvidia_nccl_cu13", "2.27.3", "nccl", ["libnccl.so.2"])
        chosen, left_out = self.choose()
        self.assertNotIn(nccl, chosen)
        self.assertEqual(len(left_out), 1)
        self.assertIn("libnccl.so.2 2.27.3 is older than the system's 2.28.9", left_out[0])

    def test_the_same_major_is_not_enough_minor_and_patch_count(self):
        system_library(self.system, "libnccl.so.2", "2.28.9")
        nccl = wheel(self.site, "nvidia_nccl_cu13", "2.28.3", "nccl", ["libnccl.so.2"])
        chosen, _ = self.choose()
        self.assertNotIn(nccl, chosen)

    def test_a_newer_wheel_is_used(self):
        system_library(self.system, "libnccl.so.2", "2.28.9")
        nccl = wheel(self.site, "nvidia_nccl_cu13", "2.30.7", "nccl", ["libnccl.so.2"])
        chosen, left_out = self.choose()
        self.assertEqual(chosen, [nccl])
        self.assertEqual(left_out, [])

    def test_a_library_the_system_lacks_comes_from_the_wheel(self):
        cudnn = wheel(self.site, "nvidia_cudnn_cu13", "9.26.0.51", "cudnn",
                      ["libcudnn.so.9", "libcudnn_ops.so.9"])
        chosen, _ = self.choose()
        self.assertEqual(chosen, [cudnn])

    def test_a_folder_of_several_wheels_that_shadows_one_newer_library_is_left_out(self):
        # CUDA 13's wheels share nvidia/cu13/lib: a newer runtime beside an older cuBLAS.
        system_library(self.system, "libcudart.so.13", "13.0.96")
        system_library(self.system, "libcublas.so.13", "13.5.0.1")
        wheel(self.site, "nvidia_cuda_runtime", "13.2.86", "cu13", ["libcudart.so.13"])
        mixed = wheel(self.site, "nvidia_cublas", "13.4.1.3", "cu13", ["libcublas.so.13"])
        chosen, left_out = self.choose()
        self.assertNotIn(mixed, chosen)
        self.assertIn("libcublas.so.13 13.4.1.3 is older than the system's 13.5.0.1",
                      left_out[0])

    def test_the_loaders_cache_counts_as_the_system(self):
        library = system_library(os.path.join(self.root, "cache"), "libnccl.so.2", "2.28.9")
        nccl = wheel(self.site, "nvidia_nccl_cu13", "2.26.2", "nccl", ["libnccl.so.2"])
        ldconfig = f"\tlibnccl.so.2 (libc6,x86-64) => {library}\n"
        chosen, _ = libraries.choose_dirs([self.site], [], ldconfig)
        self.assertNotIn(nccl, chosen)


class Fits(unittest.TestCase):
    def test_each_rule(self):
        self.assertEqual(libraries.fits("nccl", "2.28.9", "2.28.9"), "")
        self.assertEqual(libraries.fits("nccl", "2.28.10", "2.28.9"), "")
        self.assertEqual(libraries.fits("nccl", "2.30.7", "2.28.9"), "")
        self.assertIn("older release", libraries.fits("nccl", "2.28.3", "2.28.9"))
        self.assertIn("older release", libraries.fits("nccl", "2.27.9", "2.28.9"))
        self.assertIn("another major version", libraries.fits("nccl", "3.0.1", "2.28.9"))
        self.assertEqual(libraries.fits("cuda runtime", "13.0.88", "13.0.96"), "")  # patch: no
        self.assertIn("older release", libraries.fits("cublas", "13.0.2", "13.1.0"))
        self.assertIn("another major version", libraries.fits("cuda runtime", "12.9.1", "13.0.0"))
        self.assertEqual(libraries.fits("cudnn", "", "9.19.0"), "")  # not read: the doctor says

    def test_the_command_exits_by_the_rule(self):
        self.assertEqual(libraries.main(["x", "fits", "nccl", "2.28.9", "2.28.9"]), 0)
        self.assertEqual(libraries.main(["x", "fits", "nccl", "2.27.3", "2.28.9"]), 1)


if __name__ == "__main__":
    unittest.main()
