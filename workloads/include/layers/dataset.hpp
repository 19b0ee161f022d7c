#pragma once

/// @file
/// `GaussianMixture`: a synthetic classification data set, learnable but not linearly separable.
/// Each class owns a few clusters whose centres are drawn from the seed; a sample is a centre plus
/// Gaussian noise. Sample i of a split is a pure function of (seed, split, i), so every rank
/// generates exactly the rows of its own shard and no rank holds the whole data set.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace layers {

struct MixtureOptions {
  int features = 32;
  int classes = 10;
  int clusters_per_class = 4;
  /// Standard deviation of the centres' coordinates, and of the noise around a centre.
  float centre_spread = 1.0f;
  float noise = 1.0f;
  std::uint64_t seed = 1;
};

enum class Split : std::uint8_t { train, test };

class GaussianMixture {
 public:
  explicit GaussianMixture(const MixtureOptions& options);

  const MixtureOptions& options() const noexcept { return options_; }

  /// Writes sample `index` of `split` into `features` (options().features floats) and returns its
  /// label.
  std::int32_t sample(Split split, std::uint64_t index, std::span<float> features) const;

  /// Rows [first, first + count) of `split`, appended to `features` (row-major) and `labels`.
  void append_rows(Split split, std::uint64_t first, std::size_t count,
                   std::vector<float>& features, std::vector<std::int32_t>& labels) const;

 private:
  MixtureOptions options_;
  std::vector<float> centres_;  // [clusters, features]
};

}  // namespace layers
