"""FSDP2 (fully_shard, each Linear its own unit) or ZeroRedundancyOptimizer (DDP + ZeRO over
AdamW) training train_mlp's MLP on CPU under torchrun, over a chosen backend. Rank 0 prints one
JSON line with every step's loss averaged over the ranks."""

import argparse
import gc
import json

import torch
import torch.distributed as dist
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--mode", choices=["fsdp2", "zero"], required=True)
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    if args.backend == "cohort":
        import cohort  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, ranks = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    if args.mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    else:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        model = nn.parallel.DistributedDataParallel(model)
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                            lr=0.01)
    generator = torch.Generator().manual_seed(10 + rank)
    labels = torch.randint(0, 10, (32,), generator=generator)
    inputs = torch.randn(10, 32, generator=torch.Generator().manual_seed(3))[labels]
    inputs = inputs + 0.3 * torch.randn(32, 32, generator=generator)
    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    mean = torch.stack(losses).double()
    dist.all_reduce(mean)
    mean /= ranks
    if rank == 0:
        print(json.dumps({"backend": args.backend, "mode": args.mode, "losses": mean.tolist()}))
    # The process group destroyed here, its threads joined, not at interpreter exit (as in
    # python/benchmarks/ddp_mlp.py: a gloo thread alive then aborts the process).
    del model, optimizer, losses, loss, mean
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
