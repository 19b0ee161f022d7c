#!/usr/bin/env python3
"""Every program's bad flags and the COHORT_* environment, as a table.

Each row runs one program with one bad input and expects: a non-zero exit that is not a crash
(no signal, no sanitizer report, no uncaught exception), within a time bound (no hang), and a
message naming the flag or variable. Row ids are listed in docs/reliability.md.

    bad_input_table.py BUILD_DIR [ROW_ID ...]
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

BUILD = os.path.abspath(sys.argv[1])
ONLY = set(sys.argv[2:])
PROGRAMS = {
    "cohortrun": "tools/cohortrun/cohortrun",
    "cohort-store": "tools/cohort-store/cohort-store",
    "cohort-doctor": "tools/cohort-doctor/cohort-doctor",
    "train_mlp": "examples/train_mlp/train_mlp",
    "scaling_bench": "benchmarks/scaling_bench",
    "allreduce_bench": "benchmarks/allreduce_bench",
}
SCRATCH = tempfile.mkdtemp(prefix="cohort-bad-input-")
MARKER = os.path.join(SCRATCH, "shell-ran")
READ_ONLY = os.path.join(SCRATCH, "read-only")
os.mkdir(READ_ONLY, 0o555)
# One rank launched by hand: what cohort::init reads when no launcher ran the program.
ONE_RANK = {"COHORT_RANK": "0", "COHORT_WORLD_SIZE": "1", "COHORT_LOCAL_RANK": "0",
            "COHORT_LOCAL_WORLD_SIZE": "1", "COHORT_STORE": "memory"}
# Rank 1 of 2, whose store is rank 0's at COHORT_MASTER_ADDR:COHORT_MASTER_PORT.
RANK_1 = {"COHORT_RANK": "1", "COHORT_WORLD_SIZE": "2", "COHORT_LOCAL_RANK": "1",
          "COHORT_LOCAL_WORLD_SIZE": "2"}
TRAIN = ["--host", "--steps", "1", "--hidden", "8", "--layers", "2", "--global-batch", "8"]

# (id, program, arguments, environment, text the message must contain)
ROWS = [
    # train_mlp
    ("mlp-lr-negative", "train_mlp", ["--lr", "-1"], {}, "--lr"),
    ("mlp-lr-zero", "train_mlp", ["--lr", "0"], {}, "--lr"),
    ("mlp-lr-nan", "train_mlp", ["--lr", "nan"], {}, "--lr"),
    ("mlp-ranks-zero", "train_mlp", ["--ranks", "0"], {}, "--ranks"),
    ("mlp-ranks-negative", "train_mlp", ["--ranks", "-2"], {}, "--ranks"),
    ("mlp-ranks-huge", "train_mlp", ["--ranks", "100000"], {}, "--ranks"),
    ("mlp-hidden-huge", "train_mlp", ["--hidden", "100000000"], {}, "--hidden"),
    ("mlp-hidden-zero", "train_mlp", ["--hidden", "0"], {}, "--hidden"),
    # Within every flag's range, but far more memory than any host has: refused before allocating.
    ("mlp-memory-too-big", "train_mlp", ["--hidden", "10000000", "--layers", "50"], {},
     "refused before allocating"),
    ("mlp-memory-too-many-ranks", "train_mlp", ["--hidden", "4096", "--layers", "10", "--ranks", "1024"],
     {}, "refused before allocating"),
    ("mlp-layers-text", "train_mlp", ["--layers", "two"], {}, "--layers"),
    ("mlp-steps-fraction", "train_mlp", ["--steps", "1.5"], {}, "--steps"),
    ("mlp-batch-zero", "train_mlp", ["--global-batch", "0"], {}, "--global-batch"),
    ("mlp-log-every-negative", "train_mlp", ["--log-every", "-1"], {}, "--log-every"),
    ("mlp-keep-zero", "train_mlp", ["--keep-checkpoints", "0"], {}, "--keep-checkpoints"),
    ("mlp-optimizer-unknown", "train_mlp", ["--optimizer", "adam"], {}, "--optimizer"),
    ("mlp-bucket-mb-zero", "train_mlp", ["--bucket-mb", "0"], {}, "--bucket-mb"),
    ("mlp-first-bucket-mb-nan", "train_mlp", ["--first-bucket-mb", "nan"], {}, "--first-bucket-mb"),
    ("mlp-json-folder", "train_mlp", ["--json", SCRATCH], {}, "--json"),
    ("mlp-json-no-folder", "train_mlp", ["--json", "/nonexistent/dir/r.json"], {}, "--json"),
    ("mlp-json-read-only", "train_mlp", ["--json", READ_ONLY + "/r.json"], {}, "--json"),
    ("mlp-params-out-folder", "train_mlp", ["--params-out", SCRATCH], {}, "--params-out"),
    ("mlp-unknown-flag", "train_mlp", ["--bogus"], {}, "--bogus"),
    # scaling_bench
    ("scaling-layers-zero", "scaling_bench", ["--layers", "0"], {}, "--layers"),
    ("scaling-hidden-zero", "scaling_bench", ["--hidden", "0"], {}, "--hidden"),
    ("scaling-warmup-negative", "scaling_bench", ["--warmup", "-3"], {}, "--warmup"),
    ("scaling-batch-negative", "scaling_bench", ["--batch-per-rank", "-4"], {}, "--batch-per-rank"),
    ("scaling-bucket-zero", "scaling_bench", ["--bucket-mb", "0"], {}, "--bucket-mb"),
    ("scaling-bucket-negative", "scaling_bench", ["--bucket-mb", "-1"], {}, "--bucket-mb"),
    ("scaling-bucket-nan", "scaling_bench", ["--bucket-mb", "nan"], {}, "--bucket-mb"),
    ("scaling-first-bucket-negative", "scaling_bench", ["--first-bucket-mb", "-5"], {},
     "--first-bucket-mb"),
    ("scaling-sim-tflops-nan", "scaling_bench", ["--sim-tflops", "nan"], {}, "--sim-tflops"),
    ("scaling-link-gbps-zero", "scaling_bench", ["--link-gbps", "0"], {}, "--link-gbps"),
    ("scaling-link-gbps-negative", "scaling_bench", ["--link-gbps", "-5"], {}, "--link-gbps"),
    ("scaling-node-gbps-inf", "scaling_bench", ["--node-gbps", "inf"], {}, "--node-gbps"),
    ("scaling-latency-negative", "scaling_bench", ["--link-latency-us", "-1"], {},
     "--link-latency-us"),
    ("scaling-gpus-per-node-zero", "scaling_bench", ["--gpus-per-node", "0"], {}, "--gpus-per-node"),
    ("scaling-ranks-zero", "scaling_bench", ["--ranks", "0"], {}, "--ranks"),
    ("scaling-steps-zero", "scaling_bench", ["--steps", "0"], {}, "--steps"),
    ("scaling-workload-unknown", "scaling_bench", ["--workload", "llama"], {}, "--workload"),
    ("scaling-json-folder", "scaling_bench", ["--json", SCRATCH], {}, "--json"),
    ("scaling-json-read-only", "scaling_bench", ["--json", READ_ONLY + "/r.json"], {}, "--json"),
    ("scaling-plot-folder", "scaling_bench", ["--plot", SCRATCH], {}, "--plot"),
    ("scaling-plot-no-folder", "scaling_bench", ["--plot", "/nonexistent/dir/p.png"], {}, "--plot"),
    # A quote in the path must not reach a shell: the plot may be drawn (when python3 has
    # matplotlib) or refused, but the marker file must not appear (None: any exit status).
    ("scaling-plot-shell", "scaling_bench",
     ["--ranks", "1", "--steps", "1", "--warmup", "0", "--hidden", "8", "--layers", "2",
      "--plot", "x'; touch shell-ran; echo '.png"], {}, None),
    ("scaling-plot-python-shell", "scaling_bench",
     ["--ranks", "1", "--steps", "1", "--warmup", "0", "--hidden", "8", "--layers", "2",
      "--plot", "p.png"], {"COHORT_PYTHON": "python3; touch shell-ran"}, None),
    # allreduce_bench
    ("allreduce-minbytes-text", "allreduce_bench", ["-b", "lots"], {}, "--minbytes"),
    ("allreduce-minbytes-zero", "allreduce_bench", ["-b", "0"], {}, "--minbytes"),
    ("allreduce-maxbytes-unit", "allreduce_bench", ["-e", "1T"], {}, "--maxbytes"),
    ("allreduce-stepfactor-one", "allreduce_bench", ["-f", "1"], {}, "--stepfactor"),
    ("allreduce-iters-zero", "allreduce_bench", ["-n", "0"], {}, "--iters"),
    ("allreduce-warmup-negative", "allreduce_bench", ["-w", "-1"], {}, "--warmup_iters"),
    ("allreduce-dtype-unknown", "allreduce_bench", ["-d", "float8"], {}, "--datatype"),
    ("allreduce-op-unknown", "allreduce_bench", ["-o", "prod"], {}, "--op"),
    ("allreduce-ranks-zero", "allreduce_bench", ["--ranks", "0"], {}, "--ranks"),
    ("allreduce-transport-unknown", "allreduce_bench", ["--transport", "rdma"], {}, "--transport"),
    ("allreduce-json-folder", "allreduce_bench", ["--json", SCRATCH], {}, "--json"),
    # cohortrun
    ("cohortrun-unknown-option", "cohortrun", ["--bogus", "true"], {}, "unknown option '--bogus'"),
    ("cohortrun-unknown-option-alone", "cohortrun", ["--bogus"], {}, "unknown option '--bogus'"),
    ("cohortrun-unknown-after-known", "cohortrun", ["--nproc-per-node", "1", "--bogus", "true"], {},
     "unknown option '--bogus'"),
    ("cohortrun-nproc-zero", "cohortrun", ["--nproc-per-node", "0", "true"], {}, "--nproc-per-node"),
    ("cohortrun-nproc-missing", "cohortrun", ["true"], {}, "--nproc-per-node"),
    ("cohortrun-kill-timeout-nan", "cohortrun", ["--nproc-per-node", "1", "--kill-timeout", "nan",
                                                 "true"], {}, "--kill-timeout"),
    ("cohortrun-grace-negative", "cohortrun", ["--nproc-per-node", "1", "--grace", "-1", "true"], {},
     "--grace"),
    ("cohortrun-port-huge", "cohortrun", ["--nproc-per-node", "1", "--master-port", "70000", "true"],
     {}, "--master-port"),
    ("cohortrun-node-rank-too-big", "cohortrun", ["--nproc-per-node", "1", "--nnodes", "2",
                                                  "--node-rank", "2", "--master-addr", "127.0.0.1",
                                                  "true"], {}, "--node-rank"),
    ("cohortrun-nnodes-no-master", "cohortrun", ["--nproc-per-node", "1", "--nnodes", "2", "true"],
     {}, "--master-addr"),
    ("cohortrun-restarts-many-nodes", "cohortrun", ["--nproc-per-node", "1", "--nnodes", "2",
                                                    "--master-addr", "127.0.0.1",
                                                    "--max-restarts", "1", "true"], {},
     "--max-restarts"),
    ("cohortrun-restart-delay-negative", "cohortrun", ["--nproc-per-node", "1",
                                                      "--restart-delay", "-1", "true"], {},
     "--restart-delay"),
    ("cohortrun-restart-delay-above-max", "cohortrun", ["--nproc-per-node", "1",
                                                       "--restart-delay", "5",
                                                       "--max-restart-delay", "2", "true"], {},
     "--max-restart-delay 2 is below --restart-delay 5"),
    ("cohortrun-no-program", "cohortrun", ["--nproc-per-node", "1"], {}, "PROGRAM"),
    ("cohortrun-missing-program", "cohortrun", ["--nproc-per-node", "1", "/nonexistent/program"],
     {}, "/nonexistent/program"),
    # cohort-store and cohort-doctor
    ("store-port-huge", "cohort-store", ["--port", "70000"], {}, "--port"),
    ("store-port-negative", "cohort-store", ["--port", "-1"], {}, "--port"),
    ("store-max-message-zero", "cohort-store", ["--max-message-bytes", "0"], {},
     "--max-message-bytes"),
    ("store-host-unresolvable", "cohort-store", ["--host", "no.such.host.invalid", "--port", "0"],
     {}, "no.such.host.invalid"),
    ("store-unknown-flag", "cohort-store", ["--bogus"], {}, "--bogus"),
    ("doctor-unknown-flag", "cohort-doctor", ["--bogus"], {}, "--bogus"),
    # The COHORT_* environment, read by cohort::init (train_mlp as one hand-launched rank)
    ("env-timeout-zero", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_TIMEOUT": "0"}, "COHORT_TIMEOUT"),
    ("env-timeout-tiny", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_TIMEOUT": "1e-9"}, "COHORT_TIMEOUT"),
    ("env-timeout-overflow", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_TIMEOUT": "3000000h"},
     "COHORT_TIMEOUT"),
    ("env-timeout-nan", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_TIMEOUT": "nan"}, "COHORT_TIMEOUT"),
    ("env-timeout-unit", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_TIMEOUT": "10 days"},
     "COHORT_TIMEOUT"),
    ("env-log-level", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_LOG_LEVEL": "loud"},
     "COHORT_LOG_LEVEL"),
    ("env-debug-collectives", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_DEBUG_COLLECTIVES": "maybe"},
     "COHORT_DEBUG_COLLECTIVES"),
    ("env-store-kind", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_STORE": "redis"}, "COHORT_STORE"),
    ("env-host-transport", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_HOST_TRANSPORT": "rdma"},
     "COHORT_HOST_TRANSPORT"),
    ("env-rank-negative", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_RANK": "-1"}, "COHORT_RANK"),
    ("env-rank-too-big", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_RANK": "1"}, "COHORT_RANK"),
    ("env-world-size-zero", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_WORLD_SIZE": "0"},
     "COHORT_WORLD_SIZE"),
    ("env-world-size-text", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_WORLD_SIZE": "two"},
     "COHORT_WORLD_SIZE"),
    ("env-master-port-huge", "train_mlp", TRAIN,
     {**RANK_1, "COHORT_MASTER_ADDR": "127.0.0.1", "COHORT_MASTER_PORT": "70000"}, "COHORT_MASTER_PORT"),
    ("env-master-addr-unresolvable", "train_mlp", TRAIN,
     {**RANK_1, "COHORT_MASTER_ADDR": "no.such.host.invalid", "COHORT_MASTER_PORT": "29999"}, "no.such.host.invalid"),
    ("env-store-external", "train_mlp", TRAIN, {**ONE_RANK, "COHORT_STORE_EXTERNAL": "perhaps"},
     "COHORT_STORE_EXTERNAL"),
]

CRASH_SIGNS = ("Sanitizer", "terminate called", "Segmentation fault", "core dumped", "Aborted")


def run_row(row):
    row_id, program, args, env, expected = row
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    environment.update(env)
    command = [os.path.join(BUILD, PROGRAMS[program])] + args
    start = time.monotonic()
    try:
        done = subprocess.run(command, env=environment, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60, cwd=SCRATCH)
    except subprocess.TimeoutExpired:
        return "hung (still running after 60 s)"
    took = time.monotonic() - start
    output = done.stdout + done.stderr
    if os.path.exists(MARKER):
        os.remove(MARKER)
        return "a shell ran a command taken from a path or a variable"
    if done.returncode == 0 and expected is not None:
        return "exited 0 (the bad input was accepted)"
    if done.returncode < 0 or done.returncode >= 128:
        return "crashed (status %d)" % done.returncode
    for sign in CRASH_SIGNS:
        if sign in output:
            return "crash report in the output (%r)" % sign
    if expected is not None and expected not in output:
        return "message does not name %r: %r" % (expected, output.strip()[-400:])
    if took > 30:
        return "took %.0f s" % took
    return None


def main():
    if os.access(READ_ONLY, os.W_OK):
        # root writes into read-only folders: those rows cannot fail here, so they say so.
        skipped = {r[0] for r in ROWS if READ_ONLY in " ".join(r[2])}
    else:
        skipped = set()
    failures = 0
    ran = 0
    for row in ROWS:
        if ONLY and row[0] not in ONLY:
            continue
        if not os.path.exists(os.path.join(BUILD, PROGRAMS[row[1]])):
            print("SKIP %-34s %s is not built" % (row[0], row[1]))
            continue
        if row[0] in skipped:
            print("SKIP %-34s running as root: a read-only folder is writable" % row[0])
            continue
        ran += 1
        problem = run_row(row)
        print("%s %-34s %s %s" % ("FAIL" if problem else "ok  ", row[0], row[1],
                                  problem or " ".join(row[2])[:60]))
        failures += bool(problem)
    print("bad-input table: %d rows run, %d failed" % (ran, failures))
    os.chmod(READ_ONLY, 0o755)
    shutil.rmtree(SCRATCH, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
