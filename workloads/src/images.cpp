#include <layers/images.hpp>

#include "random.hpp"

#include <cohort/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace layers {
using detail::Generator;
using detail::mix;

ShapeImages::ShapeImages(const ShapeImagesOptions& options) : options_(options) {
  COHORT_EXPECTS(options.size >= 8, "ShapeImages: images need at least 8 x 8 pixels");
  COHORT_EXPECTS(options.noise >= 0.0f, "ShapeImages: the noise must not be negative");
}

std::int32_t ShapeImages::sample(Split split, std::uint64_t index, std::span<float> image) const {
  const int size = options_.size;
  COHORT_EXPECTS_EQ(image.size(), static_cast<std::size_t>(pixels()),
                    "ShapeImages::sample: the image span must hold size x size floats");
  Generator generator(mix(options_.seed ^ 0x5bd1e995ULL) ^
                      mix(index * 2 + (split == Split::test ? 1 : 0)));
  auto unit = [&] { return static_cast<float>(generator.uniform()); };
  const auto label = static_cast<std::int32_t>(generator.next() % kClasses);
  const float contrast = 0.6f + 0.6f * unit();
  const float period = 3.0f + 3.0f * unit();
  const float phase = 2.0f * std::numbers::pi_v<float> * unit();
  const float frequency = 2.0f * std::numbers::pi_v<float> / period;
  const float s = static_cast<float>(size);
  // Shapes: a centre away from the border and an extent of a fifth to a third of the image.
  const float cx = s * (0.3f + 0.4f * unit()), cy = s * (0.3f + 0.4f * unit());
  const float extent = s * (0.2f + 0.13f * unit());
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const auto fx = static_cast<float>(x), fy = static_cast<float>(y);
      float value = 0.0f;
      switch (label) {
        case 0:
          value = std::sin(frequency * fy + phase);
          break;
        case 1:
          value = std::sin(frequency * fx + phase);
          break;
        case 2:
          value = std::sin(frequency * (fx + fy) * 0.7071f + phase);
          break;
        case 3:
          value = std::sin(frequency * (fx - fy) * 0.7071f + phase);
          break;
        case 4:
          value = std::sin(frequency * fx + phase) * std::sin(frequency * fy + phase) > 0 ? 1.0f
                                                                                          : -1.0f;
          break;
        case 5:
          value = std::abs(fx - cx) <= extent * 0.7f && std::abs(fy - cy) <= extent * 0.7f ? 1.0f
                                                                                           : 0.0f;
          break;
        case 6:
          value = std::abs(std::hypot(fx - cx, fy - cy) - extent) <= 0.8f ? 1.0f : 0.0f;
          break;
        default:
          value = std::abs(fx - cx) <= 0.8f || std::abs(fy - cy) <= 0.8f ? 1.0f : 0.0f;
          break;
      }
      image[static_cast<std::size_t>(y * size + x)] = contrast * value;
    }
  }
  for (float& value : image) value += options_.noise * generator.normal();
  return label;
}

void ShapeImages::append_rows(Split split, std::uint64_t first, std::size_t count,
                              std::vector<float>& images, std::vector<std::int32_t>& labels) const {
  const auto stride = static_cast<std::size_t>(pixels());
  const std::size_t start = images.size();
  images.resize(start + count * stride);
  labels.reserve(labels.size() + count);
  for (std::size_t i = 0; i < count; ++i) {
    labels.push_back(
        sample(split, first + i, std::span<float>(images.data() + start + i * stride, stride)));
  }
}

}  // namespace layers
