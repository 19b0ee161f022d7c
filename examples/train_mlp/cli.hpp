#pragma once

// The command line shared by train_mlp and train_cnn: the same flags and JSON for both models.

#include "train.hpp"

namespace train_mlp {

/// Parses the flags, trains `model` (as threads with --ranks, else as one rank of a launcher's
/// world) and writes --json; returns the exit status.
int run_cli(int argc, char** argv, Model model);

}  // namespace train_mlp
