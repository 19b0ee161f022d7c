"""scripts/gpu/torch_workload_step.py, the PyTorch peer of scaling_bench's step, on the host with
CPU PyTorch at tiny sizes: it takes the shapes from cohort's own plans (scaling_bench
--layers-json), builds every parameter of each workload, runs the MLP and a convolution and GEMM
plan, sets the math the plan names, and refuses a plan whose shapes do not agree.

    test_torch_workload_step.py SOURCE_DIR SCALING_BENCH PYTHON_WITH_TORCH

Exit 77 (ctest: skipped) where that python has no PyTorch.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE, SCALING_BENCH, PYTHON = (os.path.abspath(a) for a in sys.argv[1:4])
del sys.argv[1:4]
SCRIPT = os.path.join(SOURCE, "scripts", "gpu", "torch_workload_step.py")
TINY_LAYERS = os.path.join(SOURCE, "tests", "scripts", "gpu_judge", "tiny_layers_plan.json")
# The published models' parameter counts (workloads/include/layers/workloads.hpp).
PARAMETERS = {"resnet50": 25557032, "bert-large": 335141888, "gpt2-124m": 124439808}


def peer(*args):
    return subprocess.run([PYTHON, SCRIPT, *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1"))


class TorchWorkloadStep(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory(prefix="torch-peer-")
        self.addCleanup(self.folder.cleanup)

    def plan(self, workload, *options):
        path = os.path.join(self.folder.name, f"plan-{workload}.json")
        done = subprocess.run([SCALING_BENCH, "--workload", workload, *options, "--layers-json", path],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(path) as handle:
            return path, json.load(handle)

    def run_peer(self, plan_path, steps=2):
        out = os.path.join(self.folder.name, "result.json")
        done = peer("--plan", plan_path, "--device", "cpu", "--steps", str(steps), "--warmup", "1",
                    "--json", out)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(out) as handle:
            return json.load(handle)

    def test_every_workloads_plan_is_built_parameter_for_parameter(self):
        for workload, count in PARAMETERS.items():
            path, plan = self.plan(workload)
            self.assertEqual(plan["parameters"], count)
            done = peer("--plan", path, "--validate")
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn(f"{workload}: {count} parameters", done.stdout)
        # resnet50's convolutions carry their geometry; its fully connected layer runs GEMMs.
        _, plan = self.plan("resnet50", "--batch-per-rank", "4")
        convs = [layer for layer in plan["layers"] if layer["conv"]]
        self.assertEqual(len(convs), 53)
        self.assertTrue(all(layer["conv"]["n"] == 4 for layer in convs))
        self.assertEqual(convs[0]["conv"], {"n": 4, "c": 3, "h": 224, "w": 224, "filters": 64,
                                            "kernel": 7, "stride": 2, "padding": 3})

    def test_the_gemms_are_those_a_gpu_rank_runs(self):
        # GemmWork on a GPU: [1024, 1024] x [1024, depth] products (depth a multiple of 8, at most
        # 4096) covering each layer's FLOPs, forward and twice that backward.
        _, plan = self.plan("gpt2-124m", "--batch-per-rank", "2")
        gemms = 0
        for layer in plan["layers"]:
            for key, factor in (("forward_gemm", 1.0), ("backward_gemm", 2.0)):
                gemm = layer[key]
                if gemm is None:
                    continue
                gemms += 1
                self.assertEqual(gemm["side"], 1024, layer["name"])
                self.assertEqual(gemm["depth"] % 8, 0, layer["name"])
                self.assertLessEqual(gemm["depth"], 4096, layer["name"])
                done = 2.0 * gemm["side"] ** 2 * gemm["depth"] * gemm["repeats"]
                asked = factor * layer["forward_flops"]
                # The depth is rounded to a multiple of 8 (at least 8): off by at most 4 columns
                # of depth per GEMM, or 8 for the smallest.
                unit = 2.0 * gemm["side"] ** 2
                self.assertLessEqual(abs(done - asked), unit * max(4 * gemm["repeats"], 8),
                                     layer["name"])
                if gemm["depth"] >= 256:
                    self.assertAlmostEqual(done / asked, 1.0, delta=0.02, msg=layer["name"])
        self.assertGreater(gemms, 20)
        # The math follows --precision; the peer runs FP32 or TF32 only, so 16-bit is refused.
        _, tf32 = self.plan("gpt2-124m", "--precision", "tf32")
        self.assertEqual(tf32["math"], "tf32")
        refused = subprocess.run([SCALING_BENCH, "--workload", "gpt2-124m", "--precision", "bf16",
                                  "--layers-json", os.path.join(self.folder.name, "bf16.json")],
                                 capture_output=True, text=True, timeout=120)
        self.assertEqual(refused.returncode, 2, refused.stderr)
        self.assertIn("not --precision bf16", refused.stderr)

    def test_the_mlp_trains_at_cohorts_shapes(self):
        path, plan = self.plan("mlp", "--hidden", "16", "--layers", "3", "--batch-per-rank", "8")
        self.assertEqual(plan["math"], "fp32")
        result = self.run_peer(path)
        self.assertEqual(result["parameters"], plan["parameters"])
        self.assertEqual(result["parameter_tensors"], 6)
        self.assertEqual(result["updated_parameter_tensors"], 6)
        self.assertTrue(result["finite"])
        self.assertEqual(len(result["step_ms"]), 2)
        self.assertEqual(result["allow_tf32"], {"matmul": False, "cudnn": False})

    def test_convolutions_and_gemms_run_and_step_the_filters(self):
        result = self.run_peer(TINY_LAYERS)
        self.assertEqual(result["parameters"], 490)
        self.assertEqual(result["updated_parameter_tensors"], 2)  # the two filters; GEMM layers' grads stay zero
        self.assertTrue(result["finite"])

    def test_tf32_plans_allow_tf32(self):
        with open(TINY_LAYERS) as handle:
            plan = json.load(handle)
        plan["math"] = "tf32"
        path = os.path.join(self.folder.name, "tf32.json")
        with open(path, "w") as handle:
            json.dump(plan, handle)
        self.assertEqual(self.run_peer(path, steps=1)["allow_tf32"], {"matmul": True, "cudnn": True})

    def test_a_plan_whose_shapes_disagree_is_refused(self):
        with open(TINY_LAYERS) as handle:
            plan = json.load(handle)
        plan["layers"][1]["params"][0]["shape"] = [8, 3, 3, 3]
        # The count agrees: the filter's shape is what is wrong.
        plan["parameters"] = sum(
            math.prod(p["shape"]) for layer in plan["layers"] for p in layer["params"])
        path = os.path.join(self.folder.name, "bad.json")
        with open(path, "w") as handle:
            json.dump(plan, handle)
        done = peer("--plan", path, "--validate")
        self.assertEqual(done.returncode, 2)
        self.assertIn("conv2.weight has shape [8, 3, 3, 3], the convolution needs [8, 4, 3, 3]",
                      done.stderr)


if __name__ == "__main__":
    probe = subprocess.run([PYTHON, "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        print(f"SKIPPED: {PYTHON} has no PyTorch (scripts/test.sh makes build/torch-venv)")
        sys.exit(77)
    unittest.main(verbosity=2)
