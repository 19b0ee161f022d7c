#!/usr/bin/env python3
"""Draws a scaling_bench report: efficiency and throughput against ranks. Measured points carry
their p10..p90 over the steps; projections, when the report has them, are a band (the model's
error measured in the same run), drawn apart from the measured curve and never joined to it,
with their assumptions in the caption.

    python3 tools/plot_scaling.py report.json scaling.png

scaling_bench --plot runs this same script (embedded at build time). Needs matplotlib.
"""
import json
import sys
import textwrap


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
    if not str(report.get("schema", "")).startswith("cohort.scaling_bench/2"):
        sys.exit("plot_scaling.py: %s is not a scaling_bench report of schema "
                 "cohort.scaling_bench/2 (rerun scaling_bench --json)" % json_path)
    workload = report["workload"]
    rows = report["rows"]
    projection = report.get("projection") or {}
    projected = [p for p in projection.get("rows", []) if "step_s" in p]
    tokens = workload.get("tokens_per_sample")
    unit = "tokens/s" if tokens else "%s/s" % workload["sample_unit"]
    scale = tokens or 1
    compute = report["compute"]
    ranks = [row["ranks"] for row in rows]
    title = "%s, %d %s per rank, %s, %s on %s (%s compute)" % (
        workload["name"], workload["batch_per_rank"], workload["sample_unit"],
        workload["precision"], report["topology"]["backend"], report["topology"]["device"],
        compute["kind"])

    caption = caption_lines(report, projection, projected)
    text = "\n".join(textwrap.fill(line, 170) for line in caption)
    lines = text.count("\n") + 1
    height = 4.4 + 0.13 * lines
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, height))
    # Measured: points with their spread over the steps, joined only to each other.
    efficiency = [100 * row["efficiency"]["value"] for row in rows]
    low = [100 * row["efficiency"]["p10"] for row in rows]
    high = [100 * row["efficiency"]["p90"] for row in rows]
    left.errorbar(ranks, efficiency,
                  yerr=[[max(0.0, e - l) for e, l in zip(efficiency, low)],
                        [max(0.0, h - e) for e, h in zip(efficiency, high)]],
                  fmt="o-", color="C0", capsize=3, label="measured (p10..p90 of the steps)")
    if projected:
        label = "PROJECTED to %s (band: the model's error here)" % projection.get("target")
        for i, p in enumerate(projected):
            x = p["ranks"]
            left.fill_between([x / 1.25, x * 1.25], [100 * p["efficiency_low"]] * 2,
                              [100 * p["efficiency_high"]] * 2, color="C3", alpha=0.25,
                              label=label if i == 0 else None)
            left.plot([x], [100 * p["efficiency"]], "s", color="C3", markerfacecolor="none")
    left.axhline(100, color="grey", linewidth=0.8)
    left.set_xscale("log", base=2)
    left.set_xlabel("ranks")
    left.set_ylabel("efficiency vs. linear (%)")
    left.set_ylim(0, max([110.0] + [h + 5 for h in high]))
    left.legend(fontsize=7, loc="lower left")
    left.grid(True, alpha=0.3)

    # Throughput in one unit of one device: a projection to another card's throughput would sit
    # on this device's scale, so only a projection to this device is drawn here.
    same_device = "(this device" in str(projection.get("target"))
    if not same_device:
        projected = []
    base = rows[0]["throughput_samples_per_s"] * scale
    all_ranks = sorted(set(ranks + [p["ranks"] for p in projected]))
    right.plot(all_ranks, [base * r for r in all_ranks], color="grey", linewidth=0.8,
               label="linear from 1 rank (measured)")
    right.plot(ranks, [row["throughput_samples_per_s"] * scale for row in rows], "o-", color="C0",
               label="measured")
    for i, p in enumerate(projected):
        x = p["ranks"]
        one = p["throughput_samples_per_s"] * p["step_s"] * scale
        right.fill_between([x / 1.25, x * 1.25], [one / p["step_s_high"]] * 2,
                           [one / p["step_s_low"]] * 2, color="C3", alpha=0.25,
                           label="PROJECTED (band)" if i == 0 else None)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("ranks")
    right.set_ylabel(unit)
    right.legend(fontsize=7, loc="upper left")
    if not same_device and projection.get("target"):
        right.set_title("measured only (the projection is to another device)", fontsize=8)
    right.grid(True, alpha=0.3)

    figure.suptitle(title)
    bottom = (0.13 * lines + 0.2) / height
    figure.tight_layout(rect=(0, bottom, 1, 1))
    figure.text(0.01, 0.01, text, fontsize=6.5, va="bottom", ha="left")
    figure.savefig(png_path, dpi=100)


def caption_lines(report, projection, projected):
    """What the picture cannot show: simulated compute, the projection's inputs and sources,
    its assumptions, and where and when it was measured."""
    compute = report["compute"]
    caption = []
    if compute["kind"] == "simulated":
        simulated = compute["simulated"]
        caption.append("Compute SIMULATED: a sleep of %.0f ms a step (%s), not a GPU; its "
                       "efficiency depends on that setting." % (1e3 * simulated["asked_s"],
                                                              simulated["setting"]))
    if projected:
        caption.append("Projection (NOT measured) to %s. Inputs:" % projection["target"])
        caption.extend("  %s: %.4g %s (%s)" % (i["name"], i["value"], i["unit"], i["source"])
                       for i in projection["inputs"])
        caption.extend("  " + line for line in projection.get("assumptions", []))
    elif projection.get("why_not"):
        caption.append("No projection: %s." % projection["why_not"])
    caption.append("%s, commit %s, %s" % (report["timestamp"], report["commit"],
                                          ", ".join(report["hosts"])))
    return caption


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
