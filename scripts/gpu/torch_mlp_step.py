"""The MLP step of `scaling_bench --workload mlp` in PyTorch eager, on one GPU: the peer that
cohort's number sits beside in the GPU check's report.

Same model and step: 32 inputs, 8 linear layers 1024 wide with ReLU between them, 10 classes,
softmax cross-entropy, batch 256, plain SGD (lr 1e-4), f32 with TF32 matrix products as cuBLAS
gives cohort by default. Times are CUDA-event medians over the timed steps, after a warm-up.
"""
import argparse
import statistics

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    widths = [32] + [args.hidden] * (args.layers - 1) + [10]
    modules = []
    for i in range(args.layers):
        modules.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 1 < args.layers:
            modules.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*modules).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    inputs = torch.randn(args.batch, 32, device=device)
    labels = torch.randint(0, 10, (args.batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels, reduction="sum")
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    median_ms = statistics.median(times)
    name = torch.cuda.get_device_name(device)
    print(f"PyTorch {torch.__version__} eager MLP step ({args.layers} x {args.hidden}, batch "
          f"{args.batch}, SGD) on {name}: median {median_ms:.3f} ms/step, "
          f"{args.batch / median_ms * 1e3:.0f} samples/s over {args.steps} steps")


if __name__ == "__main__":
    main()
