#pragma once

// Shared by the optimizer tests: seeded random data (never zero), conversions, tolerances by
// precision, and plain double-precision references of SGD and AdamW (PyTorch's rules).

#include <cohort/core/dtype.hpp>
#include <cohort/core/float16.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/schedule.hpp>
#include <cohort/optim/sgd.hpp>

#include "support/test_helpers.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

namespace cohort_test {

/// Values with magnitude in [low, high] and a random sign: never zero.
template <typename T>
std::vector<T> random_values(std::size_t count, std::uint32_t seed, double low = 0.1,
                             double high = 1.0) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> magnitude(low, high);
  std::bernoulli_distribution negative(0.5);
  std::vector<T> values(count);
  for (auto& value : values) {
    const double m = magnitude(engine);
    value = from_double<T>(negative(engine) ? -m : m);
  }
  return values;
}

template <typename T>
std::vector<double> to_doubles(const std::vector<T>& values) {
  std::vector<double> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[i] = to_double(values[i]);
  }
  return out;
}

/// Relative precision of a storage type: half an ulp at 1.
template <typename T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, cohort::bfloat16>) {
    return 1.0 / 256.0;
  } else if constexpr (std::is_same_v<T, cohort::half>) {
    return 1.0 / 2048.0;
  } else {
    return 1.0 / 16777216.0;
  }
}

/// Tolerance of fp32 optimizer arithmetic against the double reference after a few steps.
inline double f32_tolerance(double reference) {
  return 4e-6 * (1.0 + std::fabs(reference));
}

/// PyTorch's SGD in double.
class ReferenceSgd {
 public:
  ReferenceSgd(std::vector<double> params, const cohort::SgdOptions& options)
      : params_(std::move(params)), buffer_(params_.size(), 0.0), options_(options) {}

  void step(const std::vector<double>& grads, double grad_multiplier = 1.0) {
    ++step_;
    const double lr =
        static_cast<double>(options_.lr) * static_cast<double>(options_.schedule.factor(step_));
    const auto momentum = static_cast<double>(options_.momentum);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      double g =
          grads[i] * grad_multiplier + static_cast<double>(options_.weight_decay) * params_[i];
      if (momentum != 0.0) {
        buffer_[i] = step_ == 1 ? g
                                : momentum * buffer_[i] +
                                      (1.0 - static_cast<double>(options_.dampening)) * g;
        g = options_.nesterov ? g + momentum * buffer_[i] : buffer_[i];
      }
      params_[i] -= lr * g;
    }
  }
  const std::vector<double>& params() const { return params_; }

 private:
  std::vector<double> params_;
  std::vector<double> buffer_;
  cohort::SgdOptions options_;
  std::int64_t step_ = 0;
};

/// PyTorch's AdamW in double.
class ReferenceAdamW {
 public:
  ReferenceAdamW(std::vector<double> params, const cohort::AdamWOptions& options)
      : params_(std::move(params)),
        m_(params_.size(), 0.0),
        v_(params_.size(), 0.0),
        options_(options) {}

  void step(const std::vector<double>& grads, double grad_multiplier = 1.0) {
    ++step_;
    const double lr =
        static_cast<double>(options_.lr) * static_cast<double>(options_.schedule.factor(step_));
    const auto beta1 = static_cast<double>(options_.beta1);
    const auto beta2 = static_cast<double>(options_.beta2);
    const double t = static_cast<double>(step_);
    const double correction1 = 1.0 - std::pow(beta1, t);
    const double correction2 = 1.0 - std::pow(beta2, t);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const double g = grads[i] * grad_multiplier;
      params_[i] *= 1.0 - lr * static_cast<double>(options_.weight_decay);
      m_[i] = beta1 * m_[i] + (1.0 - beta1) * g;
      v_[i] = beta2 * v_[i] + (1.0 - beta2) * g * g;
      const double denominator =
          std::sqrt(v_[i]) / std::sqrt(correction2) + static_cast<double>(options_.eps);
      params_[i] -= lr / correction1 * m_[i] / denominator;
    }
  }
  const std::vector<double>& params() const { return params_; }

 private:
  std::vector<double> params_;
  std::vector<double> m_;
  std::vector<double> v_;
  cohort::AdamWOptions options_;
  std::int64_t step_ = 0;
};

inline double l2_norm(const std::vector<double>& values) {
  double sum = 0.0;
  for (double v : values) {
    sum += v * v;
  }
  return std::sqrt(sum);
}

}  // namespace cohort_test
