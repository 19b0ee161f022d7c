/// train_mlp: an MLP classifier trained data-parallel with cohort on a synthetic data set (a
/// mixture of Gaussians drawn from the seed), with a held-out test split. Each rank reads its own
/// shard of every global batch; each layer's gradients are all-reduced while backward continues.
///
///     cohortrun --nproc-per-node 8 ./train_mlp            # one rank per GPU (or host ranks)
///     ./train_mlp --ranks 4                               # 4 ranks as threads of this process
///     ./train_mlp --ranks 4 --optimizer sgd --zero1 --precision bf16 --json out.json
///
/// The same --seed and --global-batch give the same final parameters (to rounding) on any number
/// of ranks.

#include "cli.hpp"

int main(int argc, char** argv) {
  return train_mlp::run_cli(argc, argv, train_mlp::Model::mlp);
}
