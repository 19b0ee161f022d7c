"""DDP training train_mlp's MLP with backend "cohort" and with "gloo" under torchrun: every step's
loss (averaged over the ranks) must agree within floating-point tolerance, since both sum the
same gradients (in different orders).

--device cuda trains both on GPUs (cohort over NCCL, gloo over its CUDA path); --shared-gpu puts
every rank on GPU 0, each rank claiming a host of its own (NCCL_HOSTID) so that NCCL, which
refuses two ranks of one host on one GPU, talks between them over sockets on loopback, as
scripts/gpu-check.sh runs its two-rank steps. --json writes both runs and the comparison."""

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


def run(backend, ranks, extra, shared_gpu=False):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
                "--master-port", str(free_port())]
    program = [SCRIPT, "--backend", backend] + extra
    env = dict(os.environ)
    if shared_gpu:
        env.update(CUDA_VISIBLE_DEVICES="0", COHORT_ALLOW_SHARED_GPU="1", NCCL_SOCKET_IFNAME="lo",
                   NCCL_IB_DISABLE="1")
        command = launcher + ["--no-python", "bash", "-c",
                              'NCCL_HOSTID="cohort-ddp-${LOCAL_RANK:-0}" exec "$@"', "rank",
                              sys.executable] + program
    else:
        command = launcher + program
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"{backend}: torchrun exited with {result.returncode}")
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--shared-gpu", action="store_true")
    parser.add_argument("--json", help="where to write both runs and the comparison")
    args = parser.parse_args()
    extra = ["--steps", str(args.steps), "--warmup", "5", "--device", args.device]
    cohort = run("cohort", args.ranks, extra, args.shared_gpu)
    gloo = run("gloo", args.ranks, extra, args.shared_gpu)
    assert len(cohort["losses"]) == len(gloo["losses"]) == args.steps + 5
    worst = 0.0
    mismatch = None
    for step, (a, b) in enumerate(zip(cohort["losses"], gloo["losses"])):
        # f32 sums of 4 ranks in another order: a few ulps per step, compounding through AdamW.
        tolerance = 1e-5 + 1e-4 * abs(b)
        if mismatch is None and not (math.isfinite(a) and abs(a - b) <= tolerance):
            mismatch = f"step {step}: cohort's loss {a!r}, gloo's {b!r} (tolerance {tolerance:.1e})"
        if math.isfinite(a):
            worst = max(worst, abs(a - b))
    fell = cohort["losses"][-1] < 0.5 * cohort["losses"][0]
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"cohort": cohort, "gloo": gloo, "largest_loss_difference": worst,
                       "agree": mismatch is None, "first_mismatch": mismatch,
                       "loss_fell": fell}, out, indent=1)
    assert mismatch is None, mismatch
    assert fell, "the loss did not fall"
    where = f" on {cohort['gpu']}" if cohort.get("gpu") else ""
    print(f"DDP{where} {cohort['parameters']} parameters, {args.ranks} ranks, {len(gloo['losses'])} "
          f"steps: losses agree (largest difference {worst:.2e}); first {gloo['losses'][0]:.4f}, "
          f"last {gloo['losses'][-1]:.6f}; samples/s cohort {cohort['samples_per_second']:.0f}, "
          f"gloo {gloo['samples_per_second']:.0f}")


if __name__ == "__main__":
    main()
