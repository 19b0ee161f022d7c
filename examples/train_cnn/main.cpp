/// train_cnn: a small ResNet-style CNN (convolutions, batch norm, a residual block, global average
/// pooling) trained data-parallel with cohort on procedurally generated images (eight classes of
/// stripes, checkerboards and shapes with noise, drawn from the seed), with a held-out test split.
/// Same flags and JSON as train_mlp (--width replaces --hidden and --layers):
///
///     cohortrun --nproc-per-node 8 ./train_cnn            # one rank per GPU (or host ranks)
///     ./train_cnn --ranks 4                               # 4 ranks as threads of this process
///     ./train_cnn --ranks 4 --optimizer sgd --zero1 --json out.json
///
/// A `cohort::DistributedSampler` shuffles the images every epoch and gives each rank its slice of
/// every global batch; batch norm normalises over fixed groups of 8 samples (Note [Ghost batch
/// norm] in layers/cnn.hpp), so the same --seed and --global-batch give the same final parameters
/// (to rounding) on any number of ranks.

#include "cli.hpp"

int main(int argc, char** argv) {
  return train_mlp::run_cli(argc, argv, train_mlp::Model::cnn);
}
