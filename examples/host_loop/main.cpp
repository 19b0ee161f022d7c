/// host_loop: the training program a newcomer writes first. A two-layer classifier whose forward
/// and backward are plain C++ loops over cohort's parameter and gradient views, trained
/// data-parallel on host ranks with AdamW. Nothing in it synchronizes a stream: on the host,
/// every cohort call has finished its work when it returns (Note [Stream contract] in
/// cohort/ddp/data_parallel.hpp), while the gradient all-reduces run behind backward.
///
///     cohortrun --nproc-per-node 4 ./host_loop       # or torchrun / srun: see getting-started.md
///     ./host_loop                                    # one rank
///
/// It exits with 1 unless the loss falls to a third of its first value and every rank ends with
/// the same parameters (the tests run it on 1 and 4 ranks).

#include <cohort/cohort.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

namespace {

constexpr std::size_t kIn = 16, kHidden = 32, kClasses = 4;
constexpr std::size_t kGlobalBatch = 64;
constexpr int kSteps = 150;

/// Sample `s` of a fixed data set: inputs in [-1, 1], and a label a hidden rule gives them.
std::size_t sample(std::size_t s, std::vector<float>& x) {
  for (std::size_t j = 0; j < kIn; ++j) {
    x[j] = std::sin(0.7f * static_cast<float>(s) + 1.3f * static_cast<float>(j * j));
  }
  std::size_t label = 0;
  float best = -1e30f;
  for (std::size_t k = 0; k < kClasses; ++k) {
    float score = 0.0f;
    for (std::size_t j = 0; j < kIn; ++j)
      score += std::cos(0.9f * static_cast<float>(k * kIn + j)) * x[j];
    if (score > best) best = score, label = k;
  }
  return label;
}

}  // namespace

int main() try {
  // Host ranks: this program computes on the CPU, even on a machine with GPUs.
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  cohort::World world = cohort::init(options);
  cohort::ParamRegistry params;  // in forward order
  const auto w1 = params.add("fc1.weight", {kHidden, kIn});
  const auto b1 = params.add("fc1.bias", {kHidden});
  const auto w2 = params.add("fc2.weight", {kClasses, kHidden});
  const auto b2 = params.add("fc2.bias", {kClasses});
  cohort::DataParallel dp(
      world, params, {.init = [&](cohort::DataParallel& d) {
        for (const auto h : {w1, w2}) {  // biases start at zero; rank 0's weights are broadcast
          std::span<float> w = d.param(h).span<float>();
          for (std::size_t i = 0; i < w.size(); ++i)
            w[i] = 0.3f * std::sin(static_cast<float>(i) * 2.1f);
        }
      }});
  cohort::AdamW opt(cohort::target_of(dp), {.lr = 1e-2f, .weight_decay = 0.0f});

  const auto ranks = static_cast<std::size_t>(world.size()),
             rank = static_cast<std::size_t>(world.rank());
  const std::size_t batch = kGlobalBatch / ranks;  // this rank's share of each global batch
  std::vector<float> x(kIn), h(kHidden), p(kClasses), dh(kHidden);
  double first_loss = 0.0, loss = 0.0;
  for (int step = 0; step < kSteps; ++step) {
    std::span<const float> W1 = dp.param(w1).span<const float>(),
                           B1 = dp.param(b1).span<const float>();
    std::span<const float> W2 = dp.param(w2).span<const float>(),
                           B2 = dp.param(b2).span<const float>();
    std::span<float> gW1 = dp.grad(w1).span<float>(), gB1 = dp.grad(b1).span<float>();
    std::span<float> gW2 = dp.grad(w2).span<float>(), gB2 = dp.grad(b2).span<float>();
    dp.zero_grads();  // the loops below accumulate over the batch
    double loss_sum = 0.0;
    for (std::size_t n = 0; n < batch; ++n) {
      const std::size_t label =
          sample(static_cast<std::size_t>(step) * kGlobalBatch + rank * batch + n, x);
      for (std::size_t a = 0; a < kHidden; ++a) {  // h = tanh(W1 x + b1)
        float sum = B1[a];
        for (std::size_t j = 0; j < kIn; ++j) sum += W1[a * kIn + j] * x[j];
        h[a] = std::tanh(sum);
      }
      float max_logit = -1e30f, total = 0.0f;
      for (std::size_t k = 0; k < kClasses; ++k) {  // p = softmax(W2 h + b2)
        float sum = B2[k];
        for (std::size_t a = 0; a < kHidden; ++a) sum += W2[k * kHidden + a] * h[a];
        p[k] = sum;
        max_logit = std::max(max_logit, sum);
      }
      for (std::size_t k = 0; k < kClasses; ++k) total += p[k] = std::exp(p[k] - max_logit);
      for (std::size_t k = 0; k < kClasses; ++k) p[k] /= total;
      loss_sum -= std::log(static_cast<double>(p[label]));
      // Backward of the mean loss over this rank's batch (DataParallel averages over ranks).
      std::fill(dh.begin(), dh.end(), 0.0f);
      for (std::size_t k = 0; k < kClasses; ++k) {
        const float e = (p[k] - (k == label ? 1.0f : 0.0f)) / static_cast<float>(batch);
        gB2[k] += e;
        for (std::size_t a = 0; a < kHidden; ++a) {
          gW2[k * kHidden + a] += e * h[a];
          dh[a] += e * W2[k * kHidden + a];
        }
      }
      for (std::size_t a = 0; a < kHidden; ++a) {
        const float d = dh[a] * (1.0f - h[a] * h[a]);
        gB1[a] += d;
        for (std::size_t j = 0; j < kIn; ++j) gW1[a * kIn + j] += d * x[j];
      }
    }
    for (const auto handle : {b2, w2, b1, w1}) dp.grad_ready(handle);  // backward's order
    dp.sync_grads();  // every gradient is now the average over the ranks
    opt.step();

    loss = loss_sum / static_cast<double>(batch);
    if (step == 0) first_loss = loss;
    if (world.rank() == 0 && step % 50 == 0)
      std::printf("step %3d  loss %.4f (rank 0's batch)\n", step, loss);
  }

  // Every rank must hold the same parameters: compare the smallest and largest checksum. The
  // losses are averaged over the ranks: the loss of each step's whole global batch.
  double checksum = 0.0;
  for (const float v : dp.param_arena().span<const float>()) checksum += static_cast<double>(v);
  std::vector<double> low{checksum}, high{checksum}, losses{first_loss, loss};
  world.comm().all_reduce(std::span<double>(low), cohort::ReduceOp::min, dp.compute_stream());
  world.comm().all_reduce(std::span<double>(high), cohort::ReduceOp::max, dp.compute_stream());
  world.comm().all_reduce(std::span<double>(losses), cohort::ReduceOp::avg, dp.compute_stream());
  const bool agree = low[0] == high[0], learned = losses[1] < losses[0] / 3.0;
  if (world.rank() == 0) {
    std::printf("%d ranks: loss %.4f -> %.4f%s; parameter checksums %s (%.9g)\n", world.size(),
                losses[0], losses[1], learned ? "" : " (did not fall to a third)",
                agree ? "agree" : "DIFFER", checksum);
  }
  return agree && learned ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "host_loop: %s\n", error.what());
  return cohort::exit_status_for(error);  // 78 when a restart cannot fix it, else 1
}
