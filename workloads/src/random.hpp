#pragma once

// The counter-based generator of the synthetic data sets (dataset.cpp, images.cpp): any sample
// can be drawn without the ones before it, identically on every platform (no std:: distribution,
// whose output is implementation-defined).

#include <cmath>
#include <cstdint>
#include <numbers>

namespace layers::detail {

/// SplitMix64's step.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Generator {
 public:
  explicit Generator(std::uint64_t state) : state_(mix(state)) {}
  std::uint64_t next() { return state_ = mix(state_); }
  /// Uniform in (0, 1).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  /// Standard normal (Box-Muller).
  float normal() {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    return static_cast<float>(radius * std::cos(2.0 * std::numbers::pi * uniform()));
  }

 private:
  std::uint64_t state_;
};

}  // namespace layers::detail
