#!/usr/bin/env python3
"""Runs scaling_bench on 2 host ranks and checks its JSON report and its PNG plot.

    check_scaling_bench.py SCALING_BENCH OUTPUT_DIR
"""
import json
import math
import os
import subprocess
import sys


def main(bench, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    report_path = os.path.join(out_dir, "scaling.json")
    plot_path = os.path.join(out_dir, "scaling.png")
    for path in (report_path, plot_path):
        if os.path.exists(path):
            os.remove(path)
    command = [bench, "--ranks", "2", "--steps", "5", "--warmup", "1", "--json", report_path,
               "--plot", plot_path]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    assert result.returncode == 0, "scaling_bench exited with %d" % result.returncode
    assert "SIMULATED" in result.stdout, "host compute must be reported as simulated"

    with open(report_path) as handle:
        report = json.load(handle)
    assert report["workload"] == "mlp" and report["ranks"] == 2 and report["compute"] == "simulated"
    rows = report["rows"]
    assert [row["ranks"] for row in rows] == [1, 2], rows
    for row in rows:
        for key in ("step_ms", "throughput", "efficiency", "comm_ms", "exposed_comm_ms", "overlap",
                    "busbw_gbps", "lost_exposed_comm", "lost_imbalance", "lost_overhead"):
            assert isinstance(row[key], (int, float)) and math.isfinite(row[key]), (key, row)
        assert row["step_ms"] > 0 and row["throughput"] > 0
    assert abs(rows[0]["efficiency"] - 1.0) < 1e-9
    two = rows[1]
    assert 0.0 < two["efficiency"] <= 1.2, two
    assert two["comm_ms"] > 0 and two["busbw_gbps"] > 0 and two["bytes_per_step"] > 0, two
    assert 0.0 <= two["overlap"] <= 1.0, two
    # The derived numbers follow from the measured ones: busbw from the bytes and the time
    # (nccl-tests' all-reduce bus factor 2(n-1)/n; GB/s are 1e9 bytes per second), the overlap
    # from the exposed and the total communication time.
    n = two["ranks"]
    busbw = two["bytes_per_step"] / (two["comm_ms"] * 1e-3) / 1e9 * 2 * (n - 1) / n
    assert math.isclose(two["busbw_gbps"], busbw, rel_tol=1e-6), (busbw, two)
    overlap = 1.0 - two["exposed_comm_ms"] / two["comm_ms"]
    assert math.isclose(two["overlap"], max(0.0, overlap), rel_tol=1e-6, abs_tol=1e-9), (overlap, two)
    # The lost fraction is split exactly three ways.
    parts = two["lost_exposed_comm"] + two["lost_imbalance"] + two["lost_overhead"]
    assert abs(parts - two["lost"]) < 1e-9, two
    # Automatic bucket caps by default: each rank count measured its link and planned with it;
    # the projection plans with the caps the library would choose on the projected link.
    assert report["bucket_caps"] == "auto", report["bucket_caps"]
    for row in rows[1:]:
        caps = row["buckets"]
        assert caps["automatic"] and caps["alpha_us"] > 0 and caps["bytes_per_us"] > 0, caps
        assert 256 <= caps["first_bytes"] <= caps["middle_bytes"] <= 64 << 20, caps
    assert "buckets at 2 ranks: auto from alpha" in result.stdout, result.stdout
    projected = report["projection"]["rows"]
    assert [p["ranks"] for p in projected] == [8, 64], projected
    assert all(0.0 < p["efficiency"] <= 1.0 for p in projected), projected

    with open(plot_path, "rb") as handle:
        png = handle.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert len(png) > 10000, "PNG of %d bytes" % len(png)
    assert all(row["timed_steps"] == 5 for row in rows), rows  # 5 steps fit the default budget

    # A large workload with a small budget: the expected duration comes first, progress lines
    # at least every 10 s, and the timed steps cut to fit (3 at least).
    command = [bench, "--ranks", "2", "--workload", "gpt2-124m", "--budget-s", "8",
               "--json", report_path]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150)
    sys.stderr.write(result.stderr)
    assert result.returncode == 0, "scaling_bench exited with %d" % result.returncode
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("scaling_bench: gpt2-124m, simulated compute at"), lines[:2]
    assert any(line.startswith("scaling_bench: expected about") for line in lines[:3]), lines[:3]
    elapsed = [int(line.split()[1]) for line in lines
               if line.startswith("scaling_bench: ") and line.split()[1].isdigit() and line.split()[2] == "s:"]
    with open(report_path) as handle:
        report = json.load(handle)
    assert abs(report["simulated_compute_ms"] - 200.0) < 1e-6, report["simulated_compute_ms"]
    assert all(3 <= row["timed_steps"] < 20 for row in report["rows"]), report["rows"]
    gaps = [b - a for a, b in zip([0] + elapsed, elapsed)]
    assert all(gap <= 10 for gap in gaps), elapsed
    print("scaling_bench report and plot OK; budgeted run with progress lines at", elapsed, "s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
