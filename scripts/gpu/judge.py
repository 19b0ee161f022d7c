"""The GPU check's judge: reads what scripts/gpu-check.sh wrote under --out, judges each number
against its goal, writes the summary table that heads the report, and says how the check ends.

    judge.py summary --out DIR [--gpus N] [--allowed-skips FILE] [--context TEXT]
    judge.py parse-issue-cost LOG JSON      # allreduce_bench --issue-cost's line, as JSON
    judge.py parse-checkpoint LOG JSON      # checkpoint_bench's stall lines, as JSON

What is judged (issue 28, "The check judges its numbers"), from these files under DIR:

  correctness (a miss: exit 1, as a failed required step)
    - every required step passed                        steps.jsonl (one object per step)
    - threads created per collective: 0                 issue_cost.json
    - train_mlp on NCCL says backend nccl and agrees with the host backend's checksum (within
      1e-2 relative: bf16)                              mlp-nccl*.json beside mlp-host*.json
    - no GPU test skipped, except those on the named list with their reason (allowed-skips.txt,
      "needs two GPUs": allowed only on a machine with fewer)      gtest/*.json
  performance (a miss, or a number not measured: exit 3)
    - host cost of issuing a collective <= raw NCCL's + 3 us (both timed alike)  issue_cost.json
    - fused AdamW and SGD, f32 and bf16, at 16M and 64M parameters: >= 90% of the device copy
      (median step of 10 back to back against the median copy)    optim_bench.json
    - managed memory, prefetched: >= 0.95x cudaMalloc memory     memory_bench_key.json
    - checkpoint_bench --gpu at 100 ms of compute: the first step after save_async stalls <= 2%,
      each overlapped step <= 1%                        checkpoint_bench.json
    - each workload's step (scaling_bench, real compute, one GPU) <= 1.05x PyTorch's at the same
      shapes and math (medians of steps timed alike)    plan-W.json, scaling-W.json, torch-W.json
    - rows a hook judged                                hooks/*.judged.json

Exit status of `summary`: 0 when every required step passed and every judged number was met; 1
when a required step or a correctness row failed; 3 when only performance rows missed or were not
measured. The table goes to DIR/summary.md, every row to DIR/judged.json.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys

EXIT_OK = 0
EXIT_CORRECTNESS = 1
EXIT_PERFORMANCE = 3

MET, MISSED, NOT_MEASURED = "met", "MISSED", "NOT MEASURED"

OPTIMIZERS = [("BM_CudaAdamWF32", "AdamW f32"), ("BM_CudaAdamWBf16Master", "AdamW bf16"),
              ("BM_CudaSgdMomentumF32", "SGD f32"), ("BM_CudaSgdMomentumBf16Master", "SGD bf16")]
OPTIMIZER_SIZES = [(16 << 20, "16M"), (64 << 20, "64M")]
OPTIMIZER_GOAL_PCT = 90.0
MANAGED_GOAL = 0.95
ISSUE_COST_MARGIN_US = 3.0
THREADS_GOAL = 0.005  # per collective: prints as 0.00
CHECKSUM_TOLERANCE = 1e-2
CHECKPOINT_FIRST_GOAL_PCT = 2.0
CHECKPOINT_STEP_GOAL_PCT = 1.0
CHECKPOINT_COMPUTE_MS = 100.0
TORCH_RATIO_GOAL = 1.05
WORKLOADS = ["mlp", "resnet50", "gpt2-124m", "bert-large"]


def row(ident, what, value, goal, verdict, kind, note=""):
    return {"id": ident, "what": what, "value": value, "goal": goal, "verdict": verdict,
            "kind": kind, "note": note}


def load_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


# ---- parsers of benchmark text -----------------------------------------------------------------

ISSUE_COST = re.compile(
    r"host cost of issuing one all-reduce of 4 floats \(median of (?P<iterations>\d+)[^)]*\): "
    r"cohort (?P<cohort>[0-9.]+) us, (?:raw (?P<backend>\w+) (?P<raw>[0-9.]+) us|raw: none for "
    r"(?P<none>\w+)); threads created system-wide per collective on rank 0: (?P<threads>-?[0-9.]+)")


def parse_issue_cost(text):
    """allreduce_bench --issue-cost's line as a dict, or None when it is not there."""
    match = ISSUE_COST.search(text)
    if match is None:
        return None
    return {
        "iterations": int(match["iterations"]),
        "cohort_us": float(match["cohort"]),
        "raw_us": float(match["raw"]) if match["raw"] is not None else None,
        "backend": match["backend"] or match["none"],
        "threads_per_collective": float(match["threads"]),
    }


CHECKPOINT_STEP = re.compile(r"training step (?P<step>[0-9.]+) ms \((?P<compute>[0-9.]+) ms of it compute\)")
CHECKPOINT_FIRST = re.compile(r"first step after save_async: \+(?P<ms>-?[0-9.]+) ms = (?P<pct>-?[0-9.]+)% of a step")
CHECKPOINT_WINDOW = re.compile(r"(?P<window>\d+) steps after save_async plus the wait for the save: "
                               r"\+(?P<ms>-?[0-9.]+) ms = (?P<pct>-?[0-9.]+)% of one step "
                               r"\((?P<per_step>-?[0-9.]+)% per step\)")


def parse_checkpoint(text):
    """checkpoint_bench's stall lines as a dict, or None when they are not there."""
    step, first, window = (p.search(text) for p in (CHECKPOINT_STEP, CHECKPOINT_FIRST, CHECKPOINT_WINDOW))
    if step is None or first is None or window is None:
        return None
    return {
        "step_ms": float(step["step"]),
        "compute_ms": float(step["compute"]),
        "first_step_stall_ms": float(first["ms"]),
        "first_step_pct": float(first["pct"]),
        "window_steps": int(window["window"]),
        "window_stall_ms": float(window["ms"]),
        "per_step_pct": float(window["per_step"]),
    }


# ---- Google Benchmark JSON -----------------------------------------------------------------------

def benchmark_base(name):
    """A Google Benchmark run's name without its /iterations:N, /manual_time and /real_time."""
    parts = [p for p in name.split("/")
             if not (p.startswith("iterations:") or p in ("manual_time", "real_time"))]
    return "/".join(parts)


def gbench_rows(path):
    """{base name: the run's row}, the median aggregate where there are repetitions."""
    data = load_json(path)
    if data is None:
        return None
    rows = {}
    for entry in data.get("benchmarks", []):
        base = benchmark_base(entry.get("run_name", entry.get("name", "")))
        if entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                rows[base] = entry
        elif base not in rows or rows[base].get("run_type") != "aggregate":
            rows[base] = entry
    return rows


def gbench_error(entry):
    if entry.get("error_occurred"):
        return entry.get("error_message", "the benchmark reported an error")
    return None


# ---- the judges ----------------------------------------------------------------------------------

def judge_steps(out):
    """Required steps (correctness): (rows, failed names)."""
    steps = []
    path = os.path.join(out, "steps.jsonl")
    if os.path.exists(path):
        with open(path) as handle:
            for line in handle:
                line = line.strip()
                if line:
                    try:
                        steps.append(json.loads(line))
                    except ValueError:
                        pass
    required = [s for s in steps if s.get("required")]
    failed = [s["name"] for s in required if s.get("status") != "PASS"]
    if not required:
        return [row("required_steps", "required steps", "none recorded", "all pass", NOT_MEASURED,
                    "correctness", "steps.jsonl lists no required step")], steps
    value = f"{len(required) - len(failed)} of {len(required)} passed"
    note = "failed: " + "; ".join(failed) if failed else ""
    return [row("required_steps", "required steps", value, "all pass",
                MET if not failed else MISSED, "correctness", note)], steps


def judge_issue_cost(out):
    data = load_json(os.path.join(out, "issue_cost.json"))
    if data is None:
        return [row("threads_per_collective", "threads created per collective", "-", "0",
                    NOT_MEASURED, "correctness", "no issue_cost.json (allreduce_bench --issue-cost)"),
                row("issue_cost", "host cost of issuing an all-reduce, cohort against raw NCCL",
                    "-", f"<= raw + {ISSUE_COST_MARGIN_US:g} us", NOT_MEASURED, "performance",
                    "no issue_cost.json")]
    rows = []
    threads = data.get("threads_per_collective")
    if threads is None or threads < 0:
        rows.append(row("threads_per_collective", "threads created per collective", "-", "0",
                        NOT_MEASURED, "correctness", "the thread count could not be read"))
    else:
        rows.append(row("threads_per_collective", "threads created per collective",
                        f"{threads:.2f}", "0", MET if threads < THREADS_GOAL else MISSED,
                        "correctness", f"over {data.get('iterations', '?')} collectives, system-wide"))
    cohort, raw = data.get("cohort_us"), data.get("raw_us")
    what = f"host cost of issuing an all-reduce ({data.get('backend', '?')})"
    goal = f"<= raw + {ISSUE_COST_MARGIN_US:g} us"
    if cohort is None or raw is None:
        rows.append(row("issue_cost", what, f"cohort {cohort} us" if cohort else "-", goal,
                        NOT_MEASURED, "performance", "no raw backend timed beside cohort"))
    else:
        rows.append(row("issue_cost", what, f"cohort {cohort:.2f} us, raw {raw:.2f} us", goal,
                        MET if cohort <= raw + ISSUE_COST_MARGIN_US else MISSED, "performance",
                        f"cohort adds {cohort - raw:+.2f} us; the call alone, medians"))
    return rows


def judge_optimizers(out):
    rows_by_name = gbench_rows(os.path.join(out, "optim_bench.json"))
    rows = []
    for bench, label in OPTIMIZERS:
        for size, size_label in OPTIMIZER_SIZES:
            ident = f"optimizer_{label.replace(' ', '_').lower()}_{size_label}"
            what = f"fused {label} step, {size_label} parameters, of the device copy"
            goal = f">= {OPTIMIZER_GOAL_PCT:g}%"
            entry = (rows_by_name or {}).get(f"{bench}/{size}")
            if entry is None:
                note = "no optim_bench.json" if rows_by_name is None else f"no {bench}/{size} row"
                rows.append(row(ident, what, "-", goal, NOT_MEASURED, "performance", note))
                continue
            error = gbench_error(entry)
            pct = entry.get("pct_of_copy")
            if error or pct is None:
                rows.append(row(ident, what, "-", goal, NOT_MEASURED, "performance",
                                error or "no pct_of_copy counter"))
                continue
            note = ""
            if "median_step_us" in entry and "copy_GBps" in entry:
                note = (f"median step {entry['median_step_us']:.1f} us, copy "
                        f"{entry['copy_GBps']:.0f} GB/s")
            rows.append(row(ident, what, f"{pct:.1f}%", goal,
                            MET if pct >= OPTIMIZER_GOAL_PCT else MISSED, "performance", note))
    return rows


def judge_managed(out):
    rows_by_name = gbench_rows(os.path.join(out, "memory_bench_key.json"))
    what = "managed memory, prefetched, against cudaMalloc memory"
    goal = f">= {MANAGED_GOAL:g}x"
    if rows_by_name is None:
        return [row("managed_prefetched", what, "-", goal, NOT_MEASURED, "performance",
                    "no memory_bench_key.json")]
    device = rows_by_name.get("BM_StreamDeviceMalloc")
    managed = rows_by_name.get("BM_StreamManaged/prefetched")
    for entry, name in ((device, "BM_StreamDeviceMalloc"), (managed, "BM_StreamManaged/prefetched")):
        if entry is None or gbench_error(entry) or not entry.get("bytes_per_second"):
            reason = gbench_error(entry) if entry else f"no {name} row"
            return [row("managed_prefetched", what, "-", goal, NOT_MEASURED, "performance",
                        reason or f"{name} has no bytes_per_second")]
    ratio = managed["bytes_per_second"] / device["bytes_per_second"]
    return [row("managed_prefetched", what, f"{ratio:.3f}x", goal,
                MET if ratio >= MANAGED_GOAL else MISSED, "performance",
                f"{managed['bytes_per_second'] / 1e9:.0f} against "
                f"{device['bytes_per_second'] / 1e9:.0f} GB/s")]


def judge_train_mlp(out):
    rows = []
    for nccl_path in sorted(glob.glob(os.path.join(out, "mlp-nccl*.json"))):
        suffix = os.path.basename(nccl_path)[len("mlp-nccl"):-len(".json")]
        ident = "train_mlp_nccl" + suffix.replace("-", "_")
        what = f"train_mlp{suffix and ' ' + suffix.strip('-')} on 2 NCCL ranks against the host backend"
        goal = f"backend nccl; checksum within {CHECKSUM_TOLERANCE:g} relative"
        nccl = load_json(nccl_path)
        host = load_json(os.path.join(out, f"mlp-host{suffix}.json"))
        if nccl is None or host is None:
            rows.append(row(ident, what, "-", goal, NOT_MEASURED, "correctness",
                            f"missing {'mlp-host' + suffix + '.json' if host is None else os.path.basename(nccl_path)}"))
            continue
        backend = nccl.get("backend")
        h, g = host.get("param_checksum"), nccl.get("param_checksum")
        if backend != "nccl":
            rows.append(row(ident, what, f"backend {backend}", goal, MISSED, "correctness",
                            "the NCCL run did not run on NCCL"))
            continue
        if host.get("backend") == "nccl":
            rows.append(row(ident, what, "host run on nccl", goal, MISSED, "correctness",
                            "the host run did not run on the host backend"))
            continue
        if not isinstance(h, (int, float)) or not isinstance(g, (int, float)):
            rows.append(row(ident, what, "-", goal, NOT_MEASURED, "correctness", "no param_checksum"))
            continue
        agree = math.isfinite(g) and abs(h - g) <= CHECKSUM_TOLERANCE * max(1.0, abs(h))
        rows.append(row(ident, what, f"{g:.6g} against {h:.6g}", goal, MET if agree else MISSED,
                        "correctness", f"backend {backend}, host {host.get('backend')}"))
    if not rows:
        rows.append(row("train_mlp_nccl", "train_mlp on 2 NCCL ranks against the host backend", "-",
                        "backend nccl; checksums agree", NOT_MEASURED, "correctness",
                        "no mlp-nccl*.json"))
    return rows


def read_allowed_skips(path):
    """{test: (minimum GPUs for which the skip is no longer allowed, reason)}."""
    allowed = {}
    if not path or not os.path.exists(path):
        return allowed
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or not parts[1].isdigit():
                raise ValueError(f"{path}: '{line}' is not 'Suite.Test GPUS reason'")
            allowed[parts[0]] = (int(parts[1]), parts[2])
    return allowed


def judge_skips(out, gpus, allowed_path):
    what = "GPU tests that skipped"
    goal = "none, or listed with a reason"
    files = sorted(glob.glob(os.path.join(out, "gtest", "*.json")))
    if not files:
        return [row("gpu_test_skips", what, "-", goal, NOT_MEASURED, "correctness",
                    "no gtest/*.json (GTEST_OUTPUT) from the GPU tests")]
    allowed = read_allowed_skips(allowed_path)
    run = 0
    listed, unlisted = [], []
    for path in files:
        data = load_json(path) or {}
        program = os.path.splitext(os.path.basename(path))[0]
        for suite in data.get("testsuites", []):
            for test in suite.get("testsuite", []):
                name = f"{suite.get('name')}.{test.get('name')}"
                run += 1
                if test.get("result") != "SKIPPED":
                    continue
                rule = allowed.get(name)
                if rule is not None and (gpus is None or gpus < rule[0]):
                    listed.append(f"{name} ({rule[1]})")
                else:
                    unlisted.append(f"{program}: {name}")
    value = f"{len(unlisted) + len(listed)} of {run}"
    if unlisted:
        return [row("gpu_test_skips", what, value, goal, MISSED, "correctness",
                    "not on the list: " + "; ".join(unlisted))]
    return [row("gpu_test_skips", what, value, goal, MET, "correctness",
                ("listed: " + "; ".join(listed)) if listed else "")]


def judge_checkpoint(out):
    data = load_json(os.path.join(out, "checkpoint_bench.json"))
    first_what = "checkpoint: first step after save_async, stall"
    step_what = "checkpoint: each overlapped step, stall"
    if data is None:
        return [row("checkpoint_first_step", first_what, "-", f"<= {CHECKPOINT_FIRST_GOAL_PCT:g}%",
                    NOT_MEASURED, "performance", "no checkpoint_bench.json"),
                row("checkpoint_each_step", step_what, "-", f"<= {CHECKPOINT_STEP_GOAL_PCT:g}%",
                    NOT_MEASURED, "performance", "no checkpoint_bench.json")]
    note = f"{data['compute_ms']:g} ms of compute, step {data['step_ms']:.1f} ms"
    wrong_compute = abs(data["compute_ms"] - CHECKPOINT_COMPUTE_MS) > 1e-6
    verdict = (lambda ok: NOT_MEASURED if wrong_compute else (MET if ok else MISSED))
    if wrong_compute:
        note += f" (the goal is at {CHECKPOINT_COMPUTE_MS:g} ms)"
    return [row("checkpoint_first_step", first_what, f"{data['first_step_pct']:.2f}%",
                f"<= {CHECKPOINT_FIRST_GOAL_PCT:g}%",
                verdict(data["first_step_pct"] <= CHECKPOINT_FIRST_GOAL_PCT), "performance", note),
            row("checkpoint_each_step", step_what, f"{data['per_step_pct']:.2f}%",
                f"<= {CHECKPOINT_STEP_GOAL_PCT:g}%",
                verdict(data["per_step_pct"] <= CHECKPOINT_STEP_GOAL_PCT), "performance",
                f"over {data['window_steps']} steps and the wait"),
            ]


def cohort_step_ms(report):
    """The median step (ms) at one rank from a scaling_bench --json report, either schema."""
    rows = report.get("rows") or []
    if not rows:
        return None
    first = rows[0]
    if isinstance(first.get("step_ms"), (int, float)):
        return float(first["step_ms"])  # the median of the slowest rank
    step = first.get("step_s")
    if isinstance(step, dict) and isinstance(step.get("median"), (int, float)):
        return float(step["median"]) * 1e3
    return None


def judge_torch(out, workloads):
    rows = []
    for workload in workloads:
        ident = f"pytorch_{workload.replace('-', '_')}"
        goal = f"<= {TORCH_RATIO_GOAL:g}x"
        plan = load_json(os.path.join(out, f"plan-{workload}.json"))
        cohort = load_json(os.path.join(out, f"scaling-{workload}.json"))
        torch = load_json(os.path.join(out, f"torch-{workload}.json"))
        what = f"{workload} step, cohort against PyTorch"
        if plan is not None:
            what += f" ({plan.get('math')}, batch {plan.get('batch')})"
        missing = [name for name, data in (("plan", plan), ("scaling_bench", cohort),
                                           ("PyTorch", torch)) if data is None]
        if missing:
            rows.append(row(ident, what, "-", goal, NOT_MEASURED, "performance",
                            "no " + ", no ".join(missing) + " result"))
            continue
        cohort_ms = cohort_step_ms(cohort)
        times = torch.get("step_ms") or []
        if cohort_ms is None or not times:
            rows.append(row(ident, what, "-", goal, NOT_MEASURED, "performance",
                            "a step time is missing"))
            continue
        if torch.get("math") != plan.get("math") or torch.get("batch") != plan.get("batch"):
            rows.append(row(ident, what, "-", goal, NOT_MEASURED, "performance",
                            f"not the same work: PyTorch ran {torch.get('math')} batch "
                            f"{torch.get('batch')}"))
            continue
        torch_ms = statistics.median(times)
        ratio = cohort_ms / torch_ms
        rows.append(row(ident, what, f"{cohort_ms:.2f} / {torch_ms:.2f} ms = {ratio:.3f}x", goal,
                        MET if ratio <= TORCH_RATIO_GOAL else MISSED, "performance",
                        f"medians; PyTorch {torch.get('torch', '?')}, {torch.get('optimizer', '')}"))
    return rows


def judge_hooks(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "hooks", "*.judged.json"))):
        data = load_json(path)
        name = os.path.basename(path)
        if not isinstance(data, list):
            rows.append(row(name, f"hook {name}", "-", "rows", NOT_MEASURED, "performance",
                            "not a JSON list of rows"))
            continue
        for entry in data:
            try:
                rows.append(row(str(entry["id"]), str(entry["what"]), str(entry["value"]),
                                str(entry["goal"]), MET if entry["met"] else MISSED,
                                entry.get("kind", "performance"), str(entry.get("note", ""))))
            except (KeyError, TypeError):
                rows.append(row(name, f"hook {name}", "-", "rows", NOT_MEASURED, "performance",
                                f"a row without id, what, value, goal or met: {entry}"))
    return rows


def judge_all(out, gpus, allowed_path):
    steps_rows, steps = judge_steps(out)
    rows = steps_rows
    rows += judge_skips(out, gpus, allowed_path)
    rows += judge_train_mlp(out)
    rows += judge_issue_cost(out)
    rows += judge_managed(out)
    rows += judge_optimizers(out)
    rows += judge_checkpoint(out)
    rows += judge_torch(out, WORKLOADS)
    rows += judge_hooks(out)
    return rows, steps


def exit_status(rows):
    if any(r["kind"] == "correctness" and r["verdict"] != MET for r in rows):
        return EXIT_CORRECTNESS
    if any(r["verdict"] != MET for r in rows):
        return EXIT_PERFORMANCE
    return EXIT_OK


def render(rows, steps, status, context):
    lines = ["## Judged results", ""]
    if context:
        lines += [f"Every number: {context}.", ""]
    lines += ["| result | value | goal | verdict | note |", "|---|---|---|---|---|"]
    for r in rows:
        cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
        verdict = r["verdict"] if r["verdict"] == MET else f"**{r['verdict']}**"
        lines.append(f"| {cell(r['what'])} | {cell(r['value'])} | {cell(r['goal'])} | {verdict} | "
                     f"{cell(r['note'])} |")
    lines.append("")
    if steps:
        took = sum(s.get("seconds", 0) for s in steps)
        lines.append(f"- Steps: {len(steps)}, {took:.0f} s in all (each step's time is in its line "
                     f"below).")
    words = {EXIT_OK: "every required step passed and every judged number was met",
             EXIT_CORRECTNESS: "a required step or a correctness result failed",
             EXIT_PERFORMANCE: "correct, but a judged number missed its goal or was not measured"}
    lines.append(f"- **Exit {status}**: {words[status]}.")
    return "\n".join(lines) + "\n\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    summary = sub.add_parser("summary", help="judge everything under --out")
    summary.add_argument("--out", required=True)
    summary.add_argument("--gpus", type=int, default=None, help="GPUs the machine has")
    summary.add_argument("--allowed-skips", default=os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "allowed-skips.txt"))
    summary.add_argument("--context", default="")
    for name in ("parse-issue-cost", "parse-checkpoint"):
        parse = sub.add_parser(name)
        parse.add_argument("log")
        parse.add_argument("json")
    args = parser.parse_args(argv)

    if args.command in ("parse-issue-cost", "parse-checkpoint"):
        try:
            with open(args.log, errors="replace") as handle:
                text = handle.read()
        except OSError as error:
            print(f"judge: {error}", file=sys.stderr)
            return 1
        parsed = (parse_issue_cost if args.command == "parse-issue-cost" else parse_checkpoint)(text)
        if parsed is None:
            print(f"judge: {args.log} has no {args.command[6:]} result", file=sys.stderr)
            return 1
        with open(args.json, "w") as handle:
            json.dump(parsed, handle, indent=2)
            handle.write("\n")
        return 0

    try:
        rows, steps = judge_all(args.out, args.gpus, args.allowed_skips)
    except ValueError as error:
        print(f"judge: {error}", file=sys.stderr)
        return EXIT_CORRECTNESS
    status = exit_status(rows)
    text = render(rows, steps, status, args.context)
    with open(os.path.join(args.out, "summary.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.out, "judged.json"), "w") as handle:
        json.dump({"exit": status, "rows": rows}, handle, indent=2)
        handle.write("\n")
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
