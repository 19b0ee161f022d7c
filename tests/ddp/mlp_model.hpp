#pragma once

// A tiny two-layer linear model (y = W2 (W1 x + b1) + b2) with a squared-error loss whose
// gradient is computed by hand on the host, for data-parallel tests that need exact expectations.
// Deterministic data: sample s has inputs sin(0.37 s + 0.91 j) and targets cos(0.23 s - 0.71 k).

#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/param_registry.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort::test {

struct Mlp {
  static constexpr std::size_t kIn = 24;
  static constexpr std::size_t kHidden = 16;
  static constexpr std::size_t kOut = 6;

  ParamHandle w1, b1, w2, b2;

  /// Registers the four parameters in forward order.
  explicit Mlp(ParamRegistry& registry)
      : w1(registry.add("fc1.weight", {kHidden, kIn})),
        b1(registry.add("fc1.bias", {kHidden})),
        w2(registry.add("fc2.weight", {kOut, kHidden})),
        b2(registry.add("fc2.bias", {kOut})) {}
};

/// Host copies of the four parameters (or gradients), in registration order.
struct MlpTensors {
  std::vector<float> w1 = std::vector<float>(Mlp::kHidden * Mlp::kIn);
  std::vector<float> b1 = std::vector<float>(Mlp::kHidden);
  std::vector<float> w2 = std::vector<float>(Mlp::kOut * Mlp::kHidden);
  std::vector<float> b2 = std::vector<float>(Mlp::kOut);
};

/// The initial parameters, shifted by `shift` (ranks other than 0 use a shift to show that the
/// broadcast replaced them).
inline MlpTensors mlp_initial(float shift) {
  MlpTensors p;
  auto fill = [shift](std::vector<float>& v, double phase) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<float>(0.2 * std::sin(1.3 * static_cast<double>(i) + phase)) + shift;
    }
  };
  fill(p.w1, 0.1);
  fill(p.b1, 0.7);
  fill(p.w2, 1.9);
  fill(p.b2, 2.3);
  return p;
}

inline double mlp_input(std::size_t sample, std::size_t j) {
  return std::sin(0.37 * static_cast<double>(sample) + 0.91 * static_cast<double>(j));
}
inline double mlp_target(std::size_t sample, std::size_t k) {
  return std::cos(0.23 * static_cast<double>(sample) - 0.71 * static_cast<double>(k));
}

/// Gradients of loss = 1 / (2 m) sum over samples [begin, end) of |y - t|^2, m = end - begin,
/// accumulated in double and rounded to float once.
inline MlpTensors mlp_gradients(const float* w1, const float* b1, const float* w2, const float* b2,
                                std::size_t begin, std::size_t end) {
  constexpr std::size_t I = Mlp::kIn, H = Mlp::kHidden, O = Mlp::kOut;
  std::vector<double> gw1(H * I), gb1(H), gw2(O * H), gb2(O);
  const double scale = 1.0 / static_cast<double>(end - begin);
  for (std::size_t s = begin; s < end; ++s) {
    double x[I], h[H], e[O], dh[H];
    for (std::size_t j = 0; j < I; ++j) x[j] = mlp_input(s, j);
    for (std::size_t a = 0; a < H; ++a) {
      double sum = static_cast<double>(b1[a]);
      for (std::size_t j = 0; j < I; ++j) sum += static_cast<double>(w1[a * I + j]) * x[j];
      h[a] = sum;
    }
    for (std::size_t k = 0; k < O; ++k) {
      double sum = static_cast<double>(b2[k]);
      for (std::size_t a = 0; a < H; ++a) sum += static_cast<double>(w2[k * H + a]) * h[a];
      e[k] = (sum - mlp_target(s, k)) * scale;
    }
    for (std::size_t a = 0; a < H; ++a) {
      double sum = 0.0;
      for (std::size_t k = 0; k < O; ++k) sum += static_cast<double>(w2[k * H + a]) * e[k];
      dh[a] = sum;
    }
    for (std::size_t k = 0; k < O; ++k) {
      gb2[k] += e[k];
      for (std::size_t a = 0; a < H; ++a) gw2[k * H + a] += e[k] * h[a];
    }
    for (std::size_t a = 0; a < H; ++a) {
      gb1[a] += dh[a];
      for (std::size_t j = 0; j < I; ++j) gw1[a * I + j] += dh[a] * x[j];
    }
  }
  MlpTensors g;
  auto narrow = [](const std::vector<double>& from, std::vector<float>& to) {
    for (std::size_t i = 0; i < from.size(); ++i) to[i] = static_cast<float>(from[i]);
  };
  narrow(gw1, g.w1);
  narrow(gb1, g.b1);
  narrow(gw2, g.w2);
  narrow(gb2, g.b2);
  return g;
}

/// Plain SGD on host arrays: p -= lr * g.
inline void sgd(float* params, const float* grads, std::size_t count, float lr) {
  for (std::size_t i = 0; i < count; ++i) params[i] -= lr * grads[i];
}

/// The single-rank reference: `steps` full-batch SGD steps over samples [0, batch).
inline MlpTensors mlp_reference(std::size_t batch, int steps, float lr) {
  MlpTensors p = mlp_initial(0.0f);
  for (int step = 0; step < steps; ++step) {
    const MlpTensors g =
        mlp_gradients(p.w1.data(), p.b1.data(), p.w2.data(), p.b2.data(), 0, batch);
    sgd(p.w1.data(), g.w1.data(), p.w1.size(), lr);
    sgd(p.b1.data(), g.b1.data(), p.b1.size(), lr);
    sgd(p.w2.data(), g.w2.data(), p.w2.size(), lr);
    sgd(p.b2.data(), g.b2.data(), p.b2.size(), lr);
  }
  return p;
}

inline float* host_data(const TensorView& view) {
  return static_cast<float*>(view.data());
}

/// Writes the initial parameters into a host DataParallel's arena.
inline void mlp_init(DataParallel& dp, const Mlp& mlp, float shift) {
  const MlpTensors p = mlp_initial(shift);
  std::copy(p.w1.begin(), p.w1.end(), host_data(dp.param(mlp.w1)));
  std::copy(p.b1.begin(), p.b1.end(), host_data(dp.param(mlp.b1)));
  std::copy(p.w2.begin(), p.w2.end(), host_data(dp.param(mlp.w2)));
  std::copy(p.b2.begin(), p.b2.end(), host_data(dp.param(mlp.b2)));
}

/// Writes the gradients of samples [begin, end) at the current parameters into a host
/// DataParallel's gradient arena (backward, as a task runs it on the compute stream).
inline void mlp_write_gradients(DataParallel& dp, const Mlp& mlp, std::size_t begin,
                                std::size_t end) {
  const MlpTensors g =
      mlp_gradients(host_data(dp.param(mlp.w1)), host_data(dp.param(mlp.b1)),
                    host_data(dp.param(mlp.w2)), host_data(dp.param(mlp.b2)), begin, end);
  std::copy(g.w1.begin(), g.w1.end(), host_data(dp.grad(mlp.w1)));
  std::copy(g.b1.begin(), g.b1.end(), host_data(dp.grad(mlp.b1)));
  std::copy(g.w2.begin(), g.w2.end(), host_data(dp.grad(mlp.w2)));
  std::copy(g.b2.begin(), g.b2.end(), host_data(dp.grad(mlp.b2)));
}

/// `steps` data-parallel SGD steps on a host DataParallel: rank r of n computes the gradient of
/// samples [r B / n, (r + 1) B / n) and SGD updates the whole arena; backward and SGD run as
/// tasks on the compute stream, so the engine's stream ordering is what makes the result right.
/// Returns the parameter arena.
inline std::vector<float> mlp_train(DataParallel& dp, const Mlp& mlp, std::size_t batch, int steps,
                                    float lr) {
  const auto n = static_cast<std::size_t>(dp.world().size());
  const auto r = static_cast<std::size_t>(dp.world().rank());
  const std::size_t begin = r * batch / n;
  const std::size_t end = (r + 1) * batch / n;
  const Stream& stream = dp.compute_stream();
  for (int step = 0; step < steps; ++step) {
    stream.enqueue([&dp, &mlp, begin, end] { mlp_write_gradients(dp, mlp, begin, end); });
    dp.grad_ready(mlp.b2);
    dp.grad_ready(mlp.w2);
    dp.grad_ready(mlp.b1);
    dp.grad_ready(mlp.w1);
    dp.sync_grads();
    stream.enqueue([&dp, lr] {
      sgd(host_data(dp.param_arena()), host_data(dp.grad_arena()), dp.param_arena().count(), lr);
    });
  }
  stream.synchronize();
  const float* arena = host_data(dp.param_arena());
  return std::vector<float>(arena, arena + dp.param_arena().count());
}

/// The parameters of a trained arena, unpacked per tensor.
inline MlpTensors mlp_unpack(DataParallel& dp, const Mlp& mlp) {
  MlpTensors p;
  auto copy = [](const TensorView& view, std::vector<float>& to) {
    std::copy(host_data(view), host_data(view) + view.count(), to.begin());
  };
  copy(dp.param(mlp.w1), p.w1);
  copy(dp.param(mlp.b1), p.b1);
  copy(dp.param(mlp.w2), p.w2);
  copy(dp.param(mlp.b2), p.b2);
  return p;
}

}  // namespace cohort::test
