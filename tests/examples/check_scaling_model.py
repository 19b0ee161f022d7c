#!/usr/bin/env python3
"""The scaling model predicts what it measures: for every workload (mlp, resnet50, gpt2-124m,
bert-large) at every measured rank count of a CI-sized run (4 host ranks, 15 s of budget each),
the model check is within 10% of the measured step, and the breakdown adds up.

    check_scaling_model.py SCALING_BENCH OUTPUT_DIR [WORKLOAD ...]
"""
import json
import os
import subprocess
import sys
import time

WORKLOADS = ("mlp", "resnet50", "gpt2-124m", "bert-large")
LIMIT = 0.10


def load_average():
    with open("/proc/loadavg") as handle:
        return float(handle.read().split()[0])


def main(bench, out_dir, workloads):
    os.makedirs(out_dir, exist_ok=True)
    failures = []
    for workload in workloads:
        path = os.path.join(out_dir, "%s.json" % workload)
        before = load_average()
        began = time.monotonic()
        environment = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
        result = subprocess.run([bench, "--ranks", "4", "--workload", workload, "--budget-s", "15",
                                 "--json", path], capture_output=True, text=True, timeout=600,
                                env=environment)
        took = time.monotonic() - began
        if result.returncode != 0:
            failures.append("%s: exit %d: %s" % (workload, result.returncode, result.stderr[-500:]))
            continue
        with open(path) as handle:
            report = json.load(handle)
        checks = {c["ranks"]: c for c in report["model_checks"]}
        counts = [row["ranks"] for row in report["rows"] if row["ranks"] > 1]
        line = "%-10s %5.0f s, load %.1f -> %.1f:" % (workload, took, before, load_average())
        for k in counts:
            check = checks.get(k)
            if check is None:
                failures.append("%s: no model check at %d ranks" % (workload, k))
                continue
            line += "  %d ranks %.1f ms measured, %.1f predicted (%+.1f%%)" % (
                k, 1e3 * check["measured_step_s"], 1e3 * check["predicted_step_s"], 100 * check["error"])
            if abs(check["error"]) > LIMIT:
                failures.append("%s at %d ranks: the model is %+.1f%% off" % (workload, k,
                                                                            100 * check["error"]))
        for row in report["rows"][1:]:
            lost = row["lost"]
            parts = sum(lost[p]["mean_kept"] for p in ("compute_slowdown_s", "imbalance_s",
                                                       "exposed_comm_s", "optimizer_slowdown_s",
                                                       "outside_slowdown_s"))
            if abs(parts - lost["total_s"]) > 1e-9 * max(1.0, abs(lost["total_s"])):
                failures.append("%s at %d ranks: the parts do not add up" % (workload, row["ranks"]))
        print(line)
    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))
    print("the model predicts every measured count within %.0f%%" % (100 * LIMIT))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:] or WORKLOADS)
