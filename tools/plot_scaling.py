#!/usr/bin/env python3
"""Draws a scaling_bench report: efficiency and throughput against ranks, measured and projected.

    python3 tools/plot_scaling.py report.json scaling.png

scaling_bench --plot runs this same script (embedded at build time). Needs matplotlib.
"""
import json
import sys


def main(json_path, png_path):
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_scaling.py: needs matplotlib (Debian: apt-get install python3-matplotlib; "
                 "or pip install matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(json_path) as handle:
        report = json.load(handle)
    rows = report["rows"]
    projected = report.get("projection", {}).get("rows", [])
    unit = report.get("sample_unit", "samples")
    compute = report.get("compute", "real")
    ranks = [row["ranks"] for row in rows]
    title = "%s, %d %s per rank, %s (%s compute)" % (
        report["workload"], report["batch_per_rank"], unit, report["backend"], compute)

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(ranks, [100 * row["efficiency"] for row in rows], "o-", label="measured")
    if projected:
        left.plot([p["ranks"] for p in projected], [100 * p["efficiency"] for p in projected],
                  "s--", label="projected (ring model)")
    left.axhline(100, color="grey", linewidth=0.8)
    left.set_xscale("log", base=2)
    left.set_xlabel("ranks")
    left.set_ylabel("efficiency vs. linear (%)")
    left.set_ylim(0, 105)
    left.legend()
    left.grid(True, alpha=0.3)

    base = rows[0]["throughput"]
    all_ranks = sorted(set(ranks + [p["ranks"] for p in projected]))
    right.plot(all_ranks, [base * r for r in all_ranks], color="grey", linewidth=0.8, label="linear")
    right.plot(ranks, [row["throughput"] for row in rows], "o-", label="measured")
    if projected:
        right.plot([p["ranks"] for p in projected], [p["throughput"] for p in projected], "s--",
                   label="projected (ring model)")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("ranks")
    right.set_ylabel("%s/s" % unit)
    right.legend()
    right.grid(True, alpha=0.3)

    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)


FORMATS = (".png", ".pdf", ".svg")


def parse_arguments(argv):
    import argparse
    import os
    parser = argparse.ArgumentParser(
        prog="plot_scaling.py",
        description="plot_scaling.py: draws a scaling_bench --json report (efficiency and "
                    "throughput against ranks; projections as a band, apart from the measured "
                    "points). scaling_bench --plot runs this same script.")
    parser.add_argument("report", help="the JSON report scaling_bench --json wrote")
    parser.add_argument("output", help="the picture to write: .png, .pdf or .svg")
    args = parser.parse_args(argv)
    if os.path.splitext(args.output)[1] not in FORMATS:
        parser.error("%s: the picture's name must end in .png, .pdf or .svg (its format follows "
                     "from it)" % args.output)
    if not os.path.isfile(args.report):
        parser.error("%s: no such report (write one with scaling_bench --json)" % args.report)
    return args


if __name__ == "__main__":
    arguments = parse_arguments(sys.argv[1:])
    main(arguments.report, arguments.output)
