"""DDP training train_mlp's MLP with backend "cohort" and with "gloo" under torchrun: every step's
loss (averaged over the ranks) must agree within floating-point tolerance, since both sum the
same gradients (in different orders)."""

import argparse
import json
import math
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "python", "benchmarks", "ddp_mlp.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(backend, ranks, extra):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               "--master-port", str(free_port()), SCRIPT, "--backend", backend] + extra
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"{backend}: torchrun exited with {result.returncode}")
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    extra = ["--steps", str(args.steps), "--warmup", "5"]
    cohort = run("cohort", args.ranks, extra)
    gloo = run("gloo", args.ranks, extra)
    assert len(cohort["losses"]) == len(gloo["losses"]) == args.steps + 5
    worst = 0.0
    for step, (a, b) in enumerate(zip(cohort["losses"], gloo["losses"])):
        # f32 sums of 4 ranks in another order: a few ulps per step, compounding through AdamW.
        tolerance = 1e-5 + 1e-4 * abs(b)
        assert math.isfinite(a) and abs(a - b) <= tolerance, (step, a, b)
        worst = max(worst, abs(a - b))
    assert cohort["losses"][-1] < 0.5 * cohort["losses"][0], "the loss did not fall"
    print(f"DDP {cohort['parameters']} parameters, {args.ranks} ranks, {len(gloo['losses'])} "
          f"steps: losses agree (largest difference {worst:.2e}); first {gloo['losses'][0]:.4f}, "
          f"last {gloo['losses'][-1]:.6f}; samples/s cohort {cohort['samples_per_second']:.0f}, "
          f"gloo {gloo['samples_per_second']:.0f}")


if __name__ == "__main__":
    main()
