"""The GPU check's judge (scripts/gpu/judge.py) on the host: a full set of results as gpu-check.sh
writes them, every number met (exit 0); then one change at a time, each a miss, a skip or a number
not measured, with the exit status and the row it must give. The benchmark texts it parses are
recorded: the H200 run's issue-cost line (docs/gpu-runs), a host run's issue-cost and
checkpoint_bench output (tests/scripts/gpu_judge/).

    python3 test_gpu_judge.py SOURCE_DIR
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                         os.path.join(os.path.dirname(__file__), "..", ".."))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(SOURCE, "scripts", "gpu"))
import judge  # noqa: E402

RECORDED = os.path.join(SOURCE, "tests", "scripts", "gpu_judge")
ALLOWED = os.path.join(SOURCE, "scripts", "gpu", "allowed-skips.txt")


def gbench(rows):
    """A Google Benchmark JSON file: each (run name, counters) as its median aggregate, the way
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true writes it."""
    benchmarks = []
    for run_name, counters in rows:
        for aggregate in ("mean", "median", "stddev"):
            entry = {"name": f"{run_name}_{aggregate}", "run_name": run_name,
                     "run_type": "aggregate", "aggregate_name": aggregate, "repetitions": 3}
            entry.update(counters if aggregate != "stddev" else {k: 0.1 for k in counters})
            benchmarks.append(entry)
    return {"context": {"host_name": "fake"}, "benchmarks": benchmarks}


def gtest(suites):
    """gtest's JSON output: {suite: [(test, result)]}."""
    return {"testsuites": [{"name": suite, "testsuite": [
        {"name": name, "status": "RUN", "result": result} for name, result in tests]}
        for suite, tests in suites.items()]}


def passing_results():
    """{relative path: content} of a check where every number meets its goal."""
    files = {}
    steps = [{"name": "ctest -L gpu", "status": "PASS", "seconds": 80, "required": True},
             {"name": "hello_allreduce, 2 ranks", "status": "PASS", "seconds": 4, "required": True},
             {"name": "compute-sanitizer", "status": "FAIL", "seconds": 9, "required": False}]
    files["steps.jsonl"] = "\n".join(json.dumps(s) for s in steps) + "\n"
    files["issue_cost.json"] = {"iterations": 2000, "cohort_us": 25.1, "raw_us": 24.37,
                                "backend": "nccl", "threads_per_collective": 0.0}
    optim = []
    for bench, _ in judge.OPTIMIZERS:
        for size, _ in judge.OPTIMIZER_SIZES:
            optim.append((f"{bench}/{size}/manual_time",
                          {"pct_of_copy": 93.5, "median_step_us": 480.0, "copy_GBps": 4100.0}))
    files["optim_bench.json"] = gbench(optim)
    files["memory_bench_key.json"] = gbench([
        ("BM_DeviceCopyCeiling/iterations:1/manual_time", {"bytes_per_second": 4.1e12}),
        ("BM_StreamDeviceMalloc/iterations:20/manual_time", {"bytes_per_second": 3.9e12,
                                                            "pct_of_copy": 95.1}),
        ("BM_StreamManaged/prefetched/iterations:20/manual_time", {"bytes_per_second": 3.85e12,
                                                                  "pct_of_copy": 93.9})])
    files["mlp-host.json"] = {"backend": "shm", "param_checksum": -125.7570}
    files["mlp-nccl.json"] = {"backend": "nccl", "param_checksum": -125.8874}
    files["gtest/test_optim_gpu.json"] = gtest({"CudaOptimizer": [
        ("AdamWWithManagedStateIsBitwiseEqualToTheDevicePool", "COMPLETED"),
        ("OversubscribedManagedStateConstructsAndSteps", "COMPLETED")]})
    files["gtest/test_comm_gpu.json"] = gtest({"NcclCollectives": [
        ("EveryOpMatchesTheHostResult", "COMPLETED"),
        ("EachRankCreatesAContextOnItsOwnGpuOnly", "SKIPPED")]})
    files["checkpoint_bench.json"] = {"step_ms": 101.2, "compute_ms": 100.0,
                                      "first_step_stall_ms": 1.1, "first_step_pct": 1.09,
                                      "window_steps": 4, "window_stall_ms": 2.0,
                                      "per_step_pct": 0.49}
    for workload in judge.WORKLOADS:
        files[f"plan-{workload}.json"] = {"workload": workload, "batch": 32, "math": "fp32"}
        files[f"scaling-{workload}.json"] = {"rows": [{"ranks": 1, "step_ms": 20.4}]}
        files[f"torch-{workload}.json"] = {"workload": workload, "batch": 32, "math": "fp32",
                                           "torch": "2.11.0", "optimizer": "sgd, fused",
                                           "step_ms": [20.0, 19.8, 20.1, 25.0, 19.9]}
    return files


class Judged(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="gpu-judge-")
        self.addCleanup(shutil.rmtree, self.out)

    def write(self, files):
        for path, content in files.items():
            full = os.path.join(self.out, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as handle:
                handle.write(content if isinstance(content, str) else json.dumps(content))

    def judged(self, files, gpus=1):
        self.write(files)
        rows, _ = judge.judge_all(self.out, gpus, ALLOWED)
        return rows, judge.exit_status(rows)

    def only(self, rows, ident):
        found = [r for r in rows if r["id"] == ident]
        self.assertEqual(len(found), 1, f"{ident} in {[r['id'] for r in rows]}")
        return found[0]

    def test_every_number_met(self):
        rows, status = self.judged(passing_results())
        self.assertEqual([r["what"] for r in rows if r["verdict"] != judge.MET], [])
        self.assertEqual(status, judge.EXIT_OK)
        # Every judged result is there: 8 optimizer rows, 4 workloads, the rest one each.
        self.assertEqual(sum(r["id"].startswith("optimizer_") for r in rows), 8)
        self.assertEqual(sum(r["id"].startswith("pytorch_") for r in rows), 4)
        for ident in ("required_steps", "gpu_test_skips", "train_mlp_nccl", "threads_per_collective",
                      "issue_cost", "managed_prefetched", "checkpoint_first_step",
                      "checkpoint_each_step"):
            self.only(rows, ident)
        self.assertIn("NcclCollectives.EachRankCreatesAContextOnItsOwnGpuOnly",
                      self.only(rows, "gpu_test_skips")["note"])
        # The median of PyTorch's steps (20.0), not their mean (21.0): 20.4 / 20.0.
        self.assertEqual(self.only(rows, "pytorch_resnet50")["value"],
                         "20.40 / 20.00 ms = 1.020x")

    def test_an_optimizer_below_90_percent_of_the_copy_misses(self):
        files = passing_results()
        files["optim_bench.json"]["benchmarks"] = [
            dict(b, pct_of_copy=85.0) if b["run_name"].startswith("BM_CudaSgdMomentumBf16Master/67108864")
            else b for b in files["optim_bench.json"]["benchmarks"]]
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        missed = [r for r in rows if r["verdict"] != judge.MET]
        self.assertEqual([r["id"] for r in missed], ["optimizer_sgd_bf16_64M"])
        self.assertEqual(missed[0]["value"], "85.0%")

    def test_a_benchmark_that_did_not_run_is_not_measured(self):
        files = passing_results()
        del files["torch-bert-large.json"]
        files["optim_bench.json"]["benchmarks"] = [
            dict(b, error_occurred=True, error_message="no GPU: no CUDA device is visible")
            if b["run_name"].startswith("BM_CudaAdamWF32/16777216") else b
            for b in files["optim_bench.json"]["benchmarks"]]
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        self.assertEqual(self.only(rows, "pytorch_bert_large")["verdict"], judge.NOT_MEASURED)
        row = self.only(rows, "optimizer_adamw_f32_16M")
        self.assertEqual(row["verdict"], judge.NOT_MEASURED)
        self.assertIn("no GPU", row["note"])

    def test_cohort_slower_than_pytorch_by_more_than_5_percent_misses(self):
        files = passing_results()
        files["scaling-gpt2-124m.json"] = {"rows": [{"ranks": 1, "step_ms": 21.1}]}
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        self.assertEqual(self.only(rows, "pytorch_gpt2_124m")["verdict"], judge.MISSED)

    def test_pytorch_in_another_math_is_not_the_same_work(self):
        files = passing_results()
        files["torch-mlp.json"]["math"] = "tf32"
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        row = self.only(rows, "pytorch_mlp")
        self.assertEqual(row["verdict"], judge.NOT_MEASURED)
        self.assertIn("not the same work", row["note"])

    def test_scaling_bench_reports_with_step_statistics_are_read_too(self):
        files = passing_results()
        files["scaling-mlp.json"] = {"rows": [{"ranks": 1, "step_s": {"mean_kept": 0.0211,
                                                                      "median": 0.0204}}]}
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_OK)
        self.assertTrue(self.only(rows, "pytorch_mlp")["value"].startswith("20.40 / 20.00"))

    def test_an_unlisted_skip_fails_the_check(self):
        files = passing_results()
        files["gtest/test_optim_gpu.json"] = gtest({"CudaOptimizer": [
            ("OversubscribedManagedStateConstructsAndSteps", "SKIPPED")]})
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        row = self.only(rows, "gpu_test_skips")
        self.assertEqual(row["verdict"], judge.MISSED)
        self.assertIn("test_optim_gpu: CudaOptimizer.OversubscribedManagedStateConstructsAndSteps",
                      row["note"])

    def test_a_listed_skip_fails_where_the_gpus_it_needs_are_there(self):
        rows, status = self.judged(passing_results(), gpus=2)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        self.assertEqual(self.only(rows, "gpu_test_skips")["verdict"], judge.MISSED)

    def test_no_gpu_test_results_fail_the_check(self):
        files = passing_results()
        for name in [n for n in files if n.startswith("gtest/")]:
            del files[name]
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        self.assertEqual(self.only(rows, "gpu_test_skips")["verdict"], judge.NOT_MEASURED)

    def test_a_thread_per_collective_fails_the_check(self):
        files = passing_results()
        files["issue_cost.json"]["threads_per_collective"] = 1.0
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        self.assertEqual(self.only(rows, "threads_per_collective")["verdict"], judge.MISSED)

    def test_issue_cost_more_than_3_us_over_raw_misses(self):
        files = passing_results()
        files["issue_cost.json"]["cohort_us"] = 27.5
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        self.assertEqual(self.only(rows, "issue_cost")["verdict"], judge.MISSED)

    def test_managed_memory_below_095_of_cudamalloc_misses(self):
        files = passing_results()
        files["memory_bench_key.json"] = gbench([
            ("BM_StreamDeviceMalloc/iterations:20/manual_time", {"bytes_per_second": 4.0e12}),
            ("BM_StreamManaged/prefetched/iterations:20/manual_time", {"bytes_per_second": 3.6e12})])
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        self.assertEqual(self.only(rows, "managed_prefetched")["value"], "0.900x")

    def test_the_nccl_run_must_run_on_nccl_and_agree_with_the_host(self):
        files = passing_results()
        files["mlp-nccl.json"] = {"backend": "gloo", "param_checksum": -125.8874}
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        self.assertIn("backend gloo", self.only(rows, "train_mlp_nccl")["value"])
        files["mlp-nccl.json"] = {"backend": "nccl", "param_checksum": -110.0}
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        self.assertEqual(self.only(rows, "train_mlp_nccl")["verdict"], judge.MISSED)

    def test_several_nccl_runs_are_paired_by_name(self):
        files = passing_results()
        files["mlp-nccl-zero2.json"] = {"backend": "nccl", "param_checksum": 3.0}
        files["mlp-host-zero2.json"] = {"backend": "shm", "param_checksum": 3.001}
        files["mlp-nccl-zero3.json"] = {"backend": "nccl", "param_checksum": 3.0}
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        self.assertEqual(self.only(rows, "train_mlp_nccl_zero2")["verdict"], judge.MET)
        self.assertEqual(self.only(rows, "train_mlp_nccl_zero3")["verdict"], judge.NOT_MEASURED)

    def test_a_failed_required_step_fails_the_check(self):
        files = passing_results()
        files["steps.jsonl"] += json.dumps({"name": "train_mlp, NCCL, 2 ranks", "status": "TIMEOUT",
                                            "seconds": 90, "required": True}) + "\n"
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_CORRECTNESS)
        self.assertIn("train_mlp, NCCL, 2 ranks", self.only(rows, "required_steps")["note"])

    def test_checkpoint_stalls_over_their_goals_miss(self):
        files = passing_results()
        files["checkpoint_bench.json"] = dict(files["checkpoint_bench.json"], first_step_pct=2.5,
                                              per_step_pct=1.2)
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        self.assertEqual(self.only(rows, "checkpoint_first_step")["verdict"], judge.MISSED)
        self.assertEqual(self.only(rows, "checkpoint_each_step")["verdict"], judge.MISSED)

    def test_hook_rows_join_the_table(self):
        files = passing_results()
        files["hooks/comm-nccl-init.judged.json"] = [
            {"id": "nccl_init_s", "what": "NCCL init of a World", "value": "3.1 s",
             "goal": "<= 2 s", "met": False, "note": "6 communicators"}]
        rows, status = self.judged(files)
        self.assertEqual(status, judge.EXIT_PERFORMANCE)
        self.assertEqual(self.only(rows, "nccl_init_s")["verdict"], judge.MISSED)

    def test_the_summary_command_writes_the_table_and_exits_with_its_status(self):
        files = passing_results()
        files["optim_bench.json"]["benchmarks"][1]["pct_of_copy"] = 50.0  # a median row
        self.write(files)
        done = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "gpu", "judge.py"),
                               "summary", "--out", self.out, "--gpus", "1", "--context",
                               "NVIDIA H200, driver 580"], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        self.assertEqual(done.returncode, judge.EXIT_PERFORMANCE, done.stderr)
        with open(os.path.join(self.out, "summary.md")) as handle:
            summary = handle.read()
        self.assertTrue(summary.startswith("## Judged results"))
        self.assertIn("Every number: NVIDIA H200, driver 580.", summary)
        self.assertIn("| fused AdamW f32 step, 16M parameters, of the device copy | 50.0% | >= 90% | "
                      "**MISSED** |", summary)
        self.assertIn("**Exit 3**", summary)
        with open(os.path.join(self.out, "judged.json")) as handle:
            self.assertEqual(json.load(handle)["exit"], judge.EXIT_PERFORMANCE)


class Parsers(unittest.TestCase):
    def read(self, name):
        with open(os.path.join(RECORDED, name)) as handle:
            return handle.read()

    def test_the_h200_runs_issue_cost_line(self):
        parsed = judge.parse_issue_cost(self.read("issue_cost_h200.log"))
        self.assertEqual(parsed, {"iterations": 2000, "cohort_us": 29.70, "raw_us": 24.37,
                                  "backend": "nccl", "threads_per_collective": 0.0})

    def test_a_host_backend_issue_cost_line_has_no_raw(self):
        parsed = judge.parse_issue_cost(self.read("issue_cost_host.log"))
        self.assertEqual(parsed["backend"], "shm")
        self.assertIsNone(parsed["raw_us"])
        self.assertGreaterEqual(parsed["threads_per_collective"], 0.0)

    def test_checkpoint_bench_output(self):
        parsed = judge.parse_checkpoint(self.read("checkpoint_bench_host.log"))
        self.assertEqual(parsed["compute_ms"], 20.0)
        self.assertEqual(parsed["first_step_stall_ms"], -5.351)
        self.assertEqual(parsed["first_step_pct"], -42.4)
        self.assertEqual(parsed["window_steps"], 4)
        self.assertEqual(parsed["per_step_pct"], 278.82)

    def test_text_without_the_lines_parses_to_nothing(self):
        self.assertIsNone(judge.parse_issue_cost("allreduce_bench: error: no GPU\n"))
        self.assertIsNone(judge.parse_checkpoint("checkpoint_bench: --gpu needs a GPU\n"))

    def test_optim_bench_run_without_a_gpu_is_not_measured(self):
        # Recorded: optim_bench of the ci build on a machine without a GPU, --quick's filter.
        with tempfile.TemporaryDirectory() as folder:
            shutil.copy(os.path.join(RECORDED, "optim_bench_no_gpu.json"),
                        os.path.join(folder, "optim_bench.json"))
            rows = judge.judge_optimizers(folder)
        self.assertEqual(len(rows), 8)
        for r in rows:
            self.assertEqual(r["verdict"], judge.NOT_MEASURED, r)
            self.assertIn("no GPU", r["note"])

    def test_the_parse_commands_write_json_or_fail(self):
        with tempfile.TemporaryDirectory() as folder:
            script = os.path.join(SOURCE, "scripts", "gpu", "judge.py")
            target = os.path.join(folder, "issue_cost.json")
            done = subprocess.run([sys.executable, script, "parse-issue-cost",
                                   os.path.join(RECORDED, "issue_cost_h200.log"), target])
            self.assertEqual(done.returncode, 0)
            with open(target) as handle:
                self.assertEqual(json.load(handle)["raw_us"], 24.37)
            done = subprocess.run([sys.executable, script, "parse-checkpoint",
                                   os.path.join(RECORDED, "issue_cost_h200.log"),
                                   os.path.join(folder, "checkpoint.json")], capture_output=True)
            self.assertEqual(done.returncode, 1)
            self.assertFalse(os.path.exists(os.path.join(folder, "checkpoint.json")))

    def test_the_allowed_skips_list_reads_and_refuses_a_bad_line(self):
        allowed = judge.read_allowed_skips(ALLOWED)
        self.assertEqual(allowed["NcclCollectives.EachRankCreatesAContextOnItsOwnGpuOnly"][0], 2)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
            handle.write("Suite.Test needs two GPUs\n")
        self.addCleanup(os.unlink, handle.name)
        with self.assertRaises(ValueError):
            judge.read_allowed_skips(handle.name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
