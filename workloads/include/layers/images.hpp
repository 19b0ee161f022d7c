#pragma once

/// @file
/// `ShapeImages`: a procedurally generated image classification data set, nothing downloaded.
/// Each image is one channel of size x size pixels showing one of eight patterns, drawn with a
/// random frequency, phase, position, size and contrast, plus Gaussian noise:
///
/// | label | pattern                  | label | pattern                     |
/// |------:|--------------------------|------:|-----------------------------|
/// | 0     | horizontal stripes       | 4     | checkerboard                |
/// | 1     | vertical stripes         | 5     | a filled square             |
/// | 2     | diagonal stripes (/)     | 6     | a ring                      |
/// | 3     | diagonal stripes (\)     | 7     | a cross (+)                 |
///
/// Sample i of a split is a pure function of (seed, split, i), as in `GaussianMixture`.

#include <layers/dataset.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace layers {

struct ShapeImagesOptions {
  int size = 16;
  /// Standard deviation of the pixel noise; the patterns' contrast is 0.6 to 1.2.
  float noise = 0.4f;
  std::uint64_t seed = 1;
};

class ShapeImages {
 public:
  static constexpr int kClasses = 8;

  explicit ShapeImages(const ShapeImagesOptions& options);

  const ShapeImagesOptions& options() const noexcept { return options_; }
  int pixels() const noexcept { return options_.size * options_.size; }

  /// Writes image `index` of `split` (pixels() floats, row-major) and returns its label.
  std::int32_t sample(Split split, std::uint64_t index, std::span<float> image) const;

  /// Images [first, first + count) of `split`, appended to `images` and `labels`.
  void append_rows(Split split, std::uint64_t first, std::size_t count, std::vector<float>& images,
                   std::vector<std::int32_t>& labels) const;

 private:
  ShapeImagesOptions options_;
};

}  // namespace layers
