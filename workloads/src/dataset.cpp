#include <layers/dataset.hpp>

#include "random.hpp"

#include <cohort/core/error.hpp>

#include <cmath>
#include <numbers>

namespace layers {
using detail::Generator;
using detail::mix;

GaussianMixture::GaussianMixture(const MixtureOptions& options) : options_(options) {
  COHORT_EXPECTS(options.features > 0 && options.classes > 1 && options.clusters_per_class > 0,
                 "a mixture needs features > 0, classes > 1 and clusters_per_class > 0");
  const int clusters = options.classes * options.clusters_per_class;
  centres_.resize(static_cast<std::size_t>(clusters) * static_cast<std::size_t>(options.features));
  Generator generator(options.seed * 0x2545f4914f6cdd1dULL + 17);
  for (float& value : centres_) value = options.centre_spread * generator.normal();
}

std::int32_t GaussianMixture::sample(Split split, std::uint64_t index,
                                     std::span<float> features) const {
  COHORT_EXPECTS(features.size() == static_cast<std::size_t>(options_.features),
                 "a sample has " + std::to_string(options_.features) + " features");
  const std::uint64_t stream = split == Split::train ? 0x7472616eULL : 0x74657374ULL;
  Generator generator(mix(options_.seed ^ (stream << 32)) ^ mix(index));
  const auto clusters = static_cast<std::uint64_t>(options_.classes) *
                        static_cast<std::uint64_t>(options_.clusters_per_class);
  const std::uint64_t cluster = generator.next() % clusters;
  const float* centre = centres_.data() + cluster * static_cast<std::uint64_t>(options_.features);
  for (std::size_t f = 0; f < features.size(); ++f) {
    features[f] = centre[f] + options_.noise * generator.normal();
  }
  return static_cast<std::int32_t>(cluster % static_cast<std::uint64_t>(options_.classes));
}

void GaussianMixture::append_rows(Split split, std::uint64_t first, std::size_t count,
                                  std::vector<float>& features,
                                  std::vector<std::int32_t>& labels) const {
  const auto width = static_cast<std::size_t>(options_.features);
  const std::size_t start = features.size();
  features.resize(start + count * width);
  labels.reserve(labels.size() + count);
  for (std::size_t i = 0; i < count; ++i) {
    labels.push_back(
        sample(split, first + i, std::span<float>(features).subspan(start + i * width, width)));
  }
}

}  // namespace layers
