#!/usr/bin/env python3
"""Runs scaling_bench on 2 host ranks and checks its report: the versioned JSON (provenance, SI
units, spreads, null where nothing applies), a breakdown whose parts add up, the model check at
every measured count, the projection rules (none from simulated compute; from a named card's
published peak only at a stated utilization, as a band with every input's source), --compare,
--precision, tokens/s, and the plot.

    check_scaling_bench.py SCALING_BENCH OUTPUT_DIR
"""
import json
import math
import os
import subprocess
import sys

failures = []


def expect(condition, what, detail=""):
    if condition:
        print("ok   " + what)
    else:
        print("FAIL " + what + ("\n     " + str(detail)[-2000:] if detail else ""))
        failures.append(what)


def run(bench, *args, timeout=240):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    return subprocess.run([bench, *args], capture_output=True, text=True, timeout=timeout,
                          env=environment)


def close(a, b, tolerance=1e-9):
    return abs(a - b) <= tolerance * max(1.0, abs(a), abs(b))


def main(bench, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    report_path = os.path.join(out_dir, "scaling.json")
    plot_path = os.path.join(out_dir, "scaling.png")
    for path in (report_path, plot_path):
        if os.path.exists(path):
            os.remove(path)
    result = run(bench, "--ranks", "2", "--steps", "8", "--json", report_path, "--plot", plot_path)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr[-3000:])
    expect(result.returncode == 0, "scaling_bench runs (exit %d)" % result.returncode)
    if result.returncode != 0:
        sys.exit("scaling_bench failed")
    text = result.stdout
    expect("SIMULATED" in text, "host compute is reported as simulated")
    with open(report_path) as handle:
        report = json.load(handle)

    # Provenance and units: two reports of two clusters compare.
    expect(report["schema"] == "cohort.scaling_bench/2", "the report names its schema")
    for key in ("timestamp", "commit", "cohort_version", "hosts", "rank_hosts", "command_line",
                "environment", "machine"):
        expect(key in report and report[key] not in (None, "", []), "provenance: " + key, report.get(key))
    expect(report["command_line"][0] == bench and "--ranks" in report["command_line"],
           "the command line as given")
    expect(len(report["rank_hosts"]) == 2, "a host per rank")
    topology = report["topology"]
    expect(topology == {"ranks": 2, "nodes": 1, "ranks_per_node": 2, "backend": "shm",
                        "device": "host"}, "topology", topology)
    expect(report["workload"]["precision"] == "fp32" and report["workload"]["gradient_dtype"] == "f32",
           "precision and gradient dtype")
    rows = report["rows"]
    expect([row["ranks"] for row in rows] == [1, 2], "one row per rank count")
    one, two = rows
    for row in rows:
        for key in ("step_s", "compute_s", "optimizer_s", "outside_s", "wait_s", "issue_s"):
            stat = row[key]
            expect(all(isinstance(stat[k], float) and math.isfinite(stat[k])
                       for k in ("mean_kept", "p10", "median", "p90")) and
                   stat["p10"] <= stat["median"] <= stat["p90"],
                   "%d ranks: %s has a mean and a p10 <= median <= p90 spread" % (row["ranks"], key), stat)
        expect(0.05 < row["step_s"]["mean_kept"] < 10, "%d ranks: the step in seconds" % row["ranks"])
    expect(one["comm_s"] is None and one["overlap"] is None and one["lost"] is None and
           one["step_busbw_bytes_per_s"] is None,
           "1 rank: what does not apply is null, never 0", one)
    expect(abs(one["efficiency"]["value"] - 1.0) < 1e-12, "1 rank: efficiency 1")

    # The breakdown: five named parts that add up to the lost time, exposed % from exposed ms.
    step = two["step_s"]["mean_kept"]
    lost = two["lost"]
    parts = ["compute_slowdown_s", "imbalance_s", "exposed_comm_s", "optimizer_slowdown_s",
             "outside_slowdown_s"]
    expect(close(sum(lost[p]["mean_kept"] for p in parts), lost["total_s"], 1e-9),
           "the five parts add up to the lost time", lost)
    expect(close(lost["total_s"], step - one["step_s"]["mean_kept"], 1e-9),
           "the lost time is the step against 1 rank")
    expect(close(two["lost_fraction"]["exposed_comm"], lost["exposed_comm_s"]["mean_kept"] / step, 1e-9),
           "exposed %% is exposed ms over the step")
    expect(close(two["efficiency"]["value"], one["step_s"]["mean_kept"] / step, 1e-9),
           "efficiency is T1 / T2")
    comm = two["comm_s"]["mean_kept"]
    expect(close(two["step_busbw_bytes_per_s"], two["bytes_per_step"] / comm * 2 * (2 - 1) / 2, 1e-6),
           "step busbw from the bytes and the communication time (nccl-tests' factor)")
    expect(close(two["overlap"], max(0.0, min(1.0, 1 - lost["exposed_comm_s"]["mean_kept"] / comm)), 1e-9),
           "overlap from exposed and total communication")
    expect("compute slower" in text and "imbalance" in text and "exposed communication" in text
           and "optimizer slower" in text and "outside slower" in text,
           "the text names every part of the lost time")
    expect("step busbw = " in text and "link busbw = " in text and "beta = " in text,
           "one name per bandwidth, each with its definition")

    # Simulated compute: its overshoot against what was asked, next to every efficiency.
    expect(report["compute"]["kind"] == "simulated" and
           report["compute"]["simulated"]["setting"] == "--target-step-ms" and
           abs(report["compute"]["simulated"]["asked_s"] - 0.2) < 1e-9, "the simulated setting")
    expect(all(isinstance(row["simulated_compute_overshoot"], float) for row in rows) and
           "compute vs asked" in text, "every row states the simulated overshoot")

    # The model check at every measured count above one, within 10%.
    checks = report["model_checks"]
    expect([c["ranks"] for c in checks] == [2], "a model check at 2 ranks", checks)
    for c in checks:
        expect(abs(c["error"]) <= 0.10, "the model predicts the 2-rank step within 10%% (%+.1f%%)"
               % (100 * c["error"]), c)
        expect(close(c["error"], c["predicted_step_s"] / c["measured_step_s"] - 1, 1e-9),
               "the error is predicted / measured - 1")
        expect(c["probe"] is not None and c["probe_comm_s"] > 0 and
               c["error_with_probe_link"] is not None, "the link check beside it")

    # No projection from simulated compute, and the text says why.
    projection = report["projection"]
    expect(projection["target"] is None and "SIMULATED" in projection["why_not"] and
           projection["rows"] == [] and "no projection: the compute here is SIMULATED" in text,
           "no projection from simulated compute", projection)

    with open(plot_path, "rb") as handle:
        png = handle.read()
    expect(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, "the plot is a PNG")

    # A named card's published peak, at a stated utilization: a band, each input with its source,
    # never a projection at a measured count.
    projected_path = os.path.join(out_dir, "a100.json")
    result = run(bench, "--ranks", "2", "--steps", "4", "--target", "a100", "--precision", "tf32",
                 "--target-utilization", "0.4", "--project-to", "2", "--project-to", "8",
                 "--project-to", "64", "--json", projected_path)
    expect(result.returncode == 0, "--target a100 runs", result.stderr)
    with open(projected_path) as handle:
        projected = json.load(handle)["projection"]
    expect([p["ranks"] for p in projected["rows"]] == [8, 64],
           "projected to 8 and 64, not to the measured 2", projected["rows"])
    for p in projected["rows"]:
        expect(p["step_s_low"] <= p["step_s"] <= p["step_s_high"] and
               p["efficiency_low"] <= p["efficiency"] <= p["efficiency_high"],
               "%d GPUs: the estimate lies in its band" % p["ranks"], p)
    sources = {i["name"]: i["source"] for i in projected["inputs"]}
    expect("156 TFLOP/s" in sources.get("forward and backward per rank", "") and
           "40% utilization" in sources["forward and backward per rank"] and
           sources["all-reduce busbw in a node"].startswith("published") and
           sources["all-reduce busbw across nodes"].startswith("published"),
           "every input of the A100 projection names its source", sources)
    expect("PROJECTION (not measured)" in result.stdout and "[" in result.stdout,
           "the text marks the projection and prints its band")
    result = run(bench, "--ranks", "2", "--steps", "3", "--target", "a100", "--target-utilization",
                 "0.4", "--link-gbps", "100", "--json", projected_path)
    with open(projected_path) as handle:
        projected = json.load(handle)["projection"]
    sources = {i["name"]: i["source"] for i in projected["inputs"]}
    expect(sources.get("all-reduce busbw in a node", "").startswith("given: --link-gbps"),
           "a link given on the command line says so", sources)
    result = run(bench, "--ranks", "2", "--target", "a100")
    expect(result.returncode == 2 and "--target-utilization" in result.stderr,
           "a card's peak without a stated utilization is refused", result.stderr)
    result = run(bench, "--ranks", "2", "--target", "this")
    expect(result.returncode == 2 and "simulated" in result.stderr,
           "--target this from simulated compute is refused", result.stderr)

    # --compare: two reports side by side; a file that is no report is refused.
    result = run(bench, "--compare", report_path, projected_path)
    expect(result.returncode == 0 and "# A: " in result.stdout and "# B: " in result.stdout and
           "step A" in result.stdout, "--compare prints both", result.stdout + result.stderr)
    result = run(bench, "--compare", report_path, bench)
    expect(result.returncode == 2 and "not JSON" in result.stderr, "--compare refuses a non-report",
           result.stderr)

    # Precision: bf16 gradients halve the bytes; real host compute is fp32 only.
    bf16_path = os.path.join(out_dir, "bf16.json")
    result = run(bench, "--ranks", "2", "--steps", "3", "--precision", "bf16", "--json", bf16_path)
    with open(bf16_path) as handle:
        bf16 = json.load(handle)
    expect(result.returncode == 0 and bf16["workload"]["gradient_dtype"] == "bf16" and
           close(bf16["rows"][1]["bytes_per_step"], two["bytes_per_step"] / 2, 1e-3),
           "--precision bf16: bf16 gradients, half the bytes (to the buckets' alignment)",
           result.stderr)
    result = run(bench, "--ranks", "1", "--compute", "real", "--precision", "bf16")
    expect(result.returncode == 2 and "fp32 only" in result.stderr,
           "bf16 real compute on host ranks is refused", result.stderr)

    # A large workload with a small budget: GPT-2 in tokens/s, the expected duration first,
    # progress lines at least every 10 s, the timed steps cut to fit (3 at least).
    result = run(bench, "--ranks", "2", "--workload", "gpt2-124m", "--budget-s", "8", "--json",
                 report_path)
    lines = result.stderr.splitlines()
    expect(result.returncode == 0 and lines and
           lines[0].startswith("scaling_bench: gpt2-124m, simulated compute at") and
           any(line.startswith("scaling_bench: expected about") for line in lines[:3]),
           "a budgeted run says what to expect first", result.stderr[-1500:])
    elapsed = [int(line.split()[1]) for line in lines
               if line.startswith("scaling_bench: ") and line.split()[1].isdigit() and line.split()[2] == "s:"]
    gaps = [b - a for a, b in zip([0] + elapsed, elapsed)]
    expect(all(gap <= 10 for gap in gaps), "progress lines at least every 10 s", elapsed)
    with open(report_path) as handle:
        gpt2 = json.load(handle)
    expect(all(3 <= row["timed_steps"] < 20 for row in gpt2["rows"]), "the budget cut the steps")
    expect(gpt2["workload"]["tokens_per_sample"] == 1024 and
           close(gpt2["rows"][0]["throughput_tokens_per_s"],
                 1024 * gpt2["rows"][0]["throughput_samples_per_s"], 1e-9) and
           "tokens/s" in result.stdout, "GPT-2 in tokens/s")

    if failures:
        sys.exit("%d check(s) failed:\n  %s" % (len(failures), "\n  ".join(failures)))
    print("scaling_bench report, model check, projection rules, compare and plot OK")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
