// SGD and AdamW on the host backend against double-precision references, for every supported
// pair of param and grad dtypes; schedules; the loss scaler's state machine; norm clipping; the
// host kernels; state accounting; argument checks. One rank (multi-rank: test_multirank.cpp).

#include "optim_test_util.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/kernels/launch.hpp>
#include <cohort/memory/memory_report.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/clip.hpp>
#include <cohort/optim/loss_scaler.hpp>
#include <cohort/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <span>
#include <string>
#include <vector>

namespace cohort_test {
namespace {

using cohort::bfloat16;
using cohort::half;

constexpr std::size_t kCount = 1003;  // odd: vector bodies and scalar tails
constexpr int kSteps = 6;

template <typename P, typename G>
struct StepTypes {
  using Param = P;
  using Grad = G;
};

using AllStepTypes =
    ::testing::Types<StepTypes<float, float>, StepTypes<bfloat16, bfloat16>,
                     StepTypes<bfloat16, float>, StepTypes<half, half>, StepTypes<half, float>>;

class StepTypeNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::string(cohort::to_string(cohort::dtype_of<typename T::Param>())) + "_params_" +
           std::string(cohort::to_string(cohort::dtype_of<typename T::Grad>())) + "_grads";
  }
};

const std::vector<float>* find_state(const std::vector<cohort::OptimizerStateView>& views,
                                     const std::string& name, std::vector<float>& storage) {
  for (const auto& view : views) {
    if (view.name == name) {
      const auto* data = static_cast<const float*>(view.view.data());
      storage.assign(data, data + view.view.count());
      return &storage;
    }
  }
  return nullptr;
}

/// The params (and for 16-bit params the fp32 master weights) against the reference: the master
/// within fp32 tolerance, each 16-bit param exactly the rounding of its master weight.
template <typename Param>
void expect_params_match(const std::vector<Param>& params, const cohort::Optimizer& optimizer,
                         const std::vector<double>& reference) {
  ASSERT_EQ(params.size(), reference.size());
  std::vector<float> master_storage;
  const auto* master = find_state(optimizer.state(), "master", master_storage);
  if constexpr (std::is_same_v<Param, float>) {
    ASSERT_EQ(master, nullptr) << "f32 params are their own master weights";
  } else {
    ASSERT_NE(master, nullptr);
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double value = to_double(params[i]);
    if constexpr (std::is_same_v<Param, float>) {
      ASSERT_NEAR(value, reference[i], f32_tolerance(reference[i])) << "element " << i;
    } else {
      const double master_value = static_cast<double>((*master)[i]);
      ASSERT_NEAR(master_value, reference[i], f32_tolerance(reference[i])) << "master weight " << i;
      ASSERT_EQ(params[i].bits, Param((*master)[i]).bits)
          << "param " << i << " is not its master weight rounded";
      ASSERT_NEAR(value, reference[i], 2 * unit_roundoff<Param>() * std::fabs(reference[i]) + 1e-6)
          << "param " << i;
    }
  }
}

/// Gradient magnitudes drawn in [low, high].
struct GradRange {
  double low = 0.1;
  double high = 1.0;
};

template <typename Param, typename Grad, typename Optimizer, typename Reference, typename Options>
void expect_matches_reference(const Options& options, std::uint32_t seed, int steps = kSteps,
                              GradRange range = {}) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<Param> params = random_values<Param>(kCount, seed);
  std::vector<Grad> grads(kCount);
  Reference reference(to_doubles(params), options);
  Optimizer optimizer(
      {.params = std::span<Param>(params), .grads = std::span<Grad>(grads), .stream = stream},
      options);
  for (int step = 0; step < steps; ++step) {
    stream.synchronize();  // the last step has read the grads
    const auto fresh = random_values<Grad>(kCount, seed + 100 + static_cast<std::uint32_t>(step),
                                           range.low, range.high);
    std::copy(fresh.begin(), fresh.end(), grads.begin());
    optimizer.step();
    reference.step(to_doubles(grads));
  }
  EXPECT_EQ(optimizer.steps_taken(), steps);
  expect_params_match(params, optimizer, reference.params());
}

template <typename T>
class OptimizerTest : public ::testing::Test {};
TYPED_TEST_SUITE(OptimizerTest, AllStepTypes, StepTypeNames);

TYPED_TEST(OptimizerTest, PlainSgdMatchesReference) {
  using P = typename TypeParam::Param;
  using G = typename TypeParam::Grad;
  expect_matches_reference<P, G, cohort::Sgd, ReferenceSgd>(cohort::SgdOptions{.lr = 0.1f}, 11);
}

TYPED_TEST(OptimizerTest, SgdWithMomentumDampeningAndWeightDecayMatchesReference) {
  using P = typename TypeParam::Param;
  using G = typename TypeParam::Grad;
  expect_matches_reference<P, G, cohort::Sgd, ReferenceSgd>(
      cohort::SgdOptions{.lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f},
      12);
}

TYPED_TEST(OptimizerTest, NesterovSgdMatchesReference) {
  using P = typename TypeParam::Param;
  using G = typename TypeParam::Grad;
  expect_matches_reference<P, G, cohort::Sgd, ReferenceSgd>(
      cohort::SgdOptions{.lr = 0.05f, .momentum = 0.8f, .weight_decay = 1e-3f, .nesterov = true},
      13);
}

TYPED_TEST(OptimizerTest, AdamWMatchesReference) {
  using P = typename TypeParam::Param;
  using G = typename TypeParam::Grad;
  expect_matches_reference<P, G, cohort::AdamW, ReferenceAdamW>(
      cohort::AdamWOptions{.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.95f, .weight_decay = 0.1f}, 14);
}

TYPED_TEST(OptimizerTest, AdamWWithWarmupCosineScheduleMatchesReference) {
  using P = typename TypeParam::Param;
  using G = typename TypeParam::Grad;
  expect_matches_reference<P, G, cohort::AdamW, ReferenceAdamW>(
      cohort::AdamWOptions{.lr = 2e-2f, .schedule = cohort::LrSchedule::warmup_cosine(2, 6, 0.1f)},
      15, 8);
}

// AdamW divides the gradient by its own root mean square, so gradients of magnitude 0.1 to 1
// hide `eps` (1e-8) and any error in the gradient's scale. Gradients near eps make both count:
// dropping eps, or multiplying the gradient by a constant, moves every parameter by about lr.
TYPED_TEST(OptimizerTest, AdamWWithGradientsNearEpsMatchesReference) {
  using P = typename TypeParam::Param;
  using G = typename TypeParam::Grad;
  cohort::AdamWOptions options{.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.95f, .weight_decay = 0.1f};
  GradRange range{1e-9, 1e-8};
  if constexpr (std::is_same_v<G, half>) {  // 1e-9 underflows in f16: scale eps up instead
    options.eps = 1e-3f;
    range = {1e-4, 1e-3};
  }
  expect_matches_reference<P, G, cohort::AdamW, ReferenceAdamW>(options, 16, kSteps, range);
}

// ---- schedules ----

TEST(LrSchedule, ConstantIsOneForEveryStep) {
  const auto schedule = cohort::LrSchedule::constant();
  for (std::int64_t step : {1, 2, 1000, 1000000}) {
    EXPECT_EQ(schedule.factor(step), 1.0f);
  }
}

TEST(LrSchedule, WarmupThenCosineFollowsTheClosedForm) {
  const auto schedule = cohort::LrSchedule::warmup_cosine(4, 12, 0.1f);
  EXPECT_FLOAT_EQ(schedule.factor(1), 0.25f);
  EXPECT_FLOAT_EQ(schedule.factor(2), 0.5f);
  EXPECT_FLOAT_EQ(schedule.factor(4), 1.0f);
  const double pi = std::numbers::pi;
  EXPECT_FLOAT_EQ(schedule.factor(5),
                  static_cast<float>(0.1 + 0.9 * 0.5 * (1.0 + std::cos(pi / 8.0))));
  EXPECT_FLOAT_EQ(schedule.factor(8), 0.55f);
  EXPECT_FLOAT_EQ(schedule.factor(12), 0.1f);
  EXPECT_FLOAT_EQ(schedule.factor(500), 0.1f);
  for (std::int64_t step = 5; step < 12; ++step) {
    EXPECT_LT(schedule.factor(step + 1), schedule.factor(step)) << "decays at step " << step;
  }
}

TEST(LrSchedule, BadSchedulesAreRejected) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<float> params(8, 1.0f);
  std::vector<float> grads(8, 1.0f);
  const cohort::OptimizerTarget target{std::span<float>(params), std::span<float>(grads), stream};
  EXPECT_THROW(cohort::AdamW(target, {.schedule = cohort::LrSchedule::warmup_cosine(10, 5)}),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::Sgd(target, {.schedule = cohort::LrSchedule::warmup_cosine(0, 0)}),
               cohort::InvalidArgument);
}

// ---- loss scaler ----

template <typename Optimizer = cohort::AdamW, typename Reference = ReferenceAdamW,
          typename Options = cohort::AdamWOptions>
struct ScaledRun {
  cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  std::vector<float> params = random_values<float>(kCount, 21);
  std::vector<float> grads = std::vector<float>(kCount);
  Options options{.lr = 1e-2f};
  Reference reference{to_doubles(params), options};
  Optimizer optimizer{
      {.params = std::span<float>(params), .grads = std::span<float>(grads), .stream = stream},
      options};

  /// Gradients as a backward pass on a loss multiplied by the current scale would give them,
  /// with `poison` (inf or NaN) at one element when asked.
  void step(std::uint32_t seed, float poison = 0.0f, cohort::LossScaler* scaler = nullptr) {
    const float scale = scaler != nullptr ? scaler->read(stream).scale : 1.0f;
    const auto fresh = random_values<float>(kCount, seed);
    for (std::size_t i = 0; i < kCount; ++i) {
      grads[i] = fresh[i] * scale;
    }
    if (poison != 0.0f) {
      grads[kCount / 2] = poison;
    } else {
      reference.step(to_doubles(fresh));
    }
    optimizer.step();
  }
};

TEST(LossScaler, GrowsAfterCleanStepsHalvesAndSkipsOnOverflow) {
  ScaledRun<> run;
  cohort::LossScaler scaler(cohort::Device::host(), {.growth_interval = 3});
  run.optimizer.set_loss_scaler(&scaler);
  const float initial = 65536.0f;
  EXPECT_EQ(scaler.read(run.stream).scale, initial);

  run.step(1, 0.0f, &scaler);
  run.step(2, 0.0f, &scaler);
  auto state = scaler.read(run.stream);
  EXPECT_EQ(state.scale, initial);
  EXPECT_EQ(state.growth_tracker, 2);
  run.step(3, 0.0f, &scaler);
  state = scaler.read(run.stream);
  EXPECT_EQ(state.scale, 2 * initial) << "doubles after growth_interval clean steps";
  EXPECT_EQ(state.growth_tracker, 0);

  const std::vector<float> before = run.params;
  run.step(4, std::numeric_limits<float>::infinity(), &scaler);
  state = scaler.read(run.stream);
  EXPECT_EQ(state.scale, initial) << "halves on overflow";
  EXPECT_EQ(state.growth_tracker, 0);
  EXPECT_EQ(state.skipped_steps, 1);
  EXPECT_TRUE(state.last_step_skipped);
  EXPECT_EQ(run.params, before) << "a step with inf is skipped";
  EXPECT_EQ(run.optimizer.steps_taken(), 3);

  run.step(5, std::numeric_limits<float>::quiet_NaN(), &scaler);
  state = scaler.read(run.stream);
  EXPECT_EQ(state.scale, initial / 2) << "halves on NaN";
  EXPECT_EQ(state.skipped_steps, 2);
  EXPECT_EQ(run.params, before);

  run.step(6, 0.0f, &scaler);
  run.step(7, 0.0f, &scaler);
  state = scaler.read(run.stream);
  EXPECT_FALSE(state.last_step_skipped);
  EXPECT_EQ(state.growth_tracker, 2);
  EXPECT_EQ(run.optimizer.steps_taken(), 5);
  // The step unscaled the gradients: the params are those of the unscaled reference.
  expect_params_match(run.params, run.optimizer, run.reference.params());
}

TEST(LossScaler, ScaleStaysWithinItsBounds) {
  ScaledRun<> run;
  cohort::LossScaler scaler(
      cohort::Device::host(),
      {.initial_scale = 4.0f, .growth_interval = 1, .min_scale = 1.0f, .max_scale = 16.0f});
  run.optimizer.set_loss_scaler(&scaler);
  for (std::uint32_t i = 0; i < 4; ++i) {
    run.step(i, std::numeric_limits<float>::infinity(), &scaler);
  }
  EXPECT_EQ(scaler.read(run.stream).scale, 1.0f);
  for (std::uint32_t i = 0; i < 6; ++i) {
    run.step(10 + i, 0.0f, &scaler);
  }
  EXPECT_EQ(scaler.read(run.stream).scale, 16.0f);
  EXPECT_EQ(scaler.scale_view().count(), 1u);
  EXPECT_EQ(*static_cast<const float*>(scaler.scale_view().data()), 16.0f);
}

TEST(LossScaler, RejectsBadOptions) {
  EXPECT_THROW(cohort::LossScaler(cohort::Device::host(), {.initial_scale = 0.0f}),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::LossScaler(cohort::Device::host(), {.backoff_factor = 1.0f}),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::LossScaler(cohort::Device::host(), {.growth_interval = 0}),
               cohort::InvalidArgument);
}

// ---- clipping ----

TEST(ClipGradNorm, ReturnsTheNormAndClipsInTheStep) {
  for (const double fraction : {0.5, 2.0}) {  // clipped, then not
    const auto stream = cohort::Stream::create(cohort::Device::host());
    std::vector<float> params = random_values<float>(kCount, 31);
    std::vector<float> grads = random_values<float>(kCount, 32);
    const cohort::SgdOptions options{.lr = 0.1f, .momentum = 0.9f};
    ReferenceSgd reference(to_doubles(params), options);
    cohort::Sgd optimizer({std::span<float>(params), std::span<float>(grads), stream}, options);
    const double norm = l2_norm(to_doubles(grads));
    const auto max_norm = static_cast<float>(norm * fraction);
    const cohort::GradNorm measured = cohort::clip_grad_norm(optimizer, max_norm);
    EXPECT_NEAR(measured.value(), norm, 1e-5 * norm) << "before the step";
    optimizer.step();
    EXPECT_NEAR(measured.value(), norm, 1e-5 * norm) << "after the step";
    const double multiplier =
        norm > static_cast<double>(max_norm) ? static_cast<double>(max_norm) / (norm + 1e-6) : 1.0;
    reference.step(to_doubles(grads), multiplier);
    expect_params_match(params, optimizer, reference.params());
  }
}

// SGD, because AdamW would hide a wrong unscale or clip factor (it divides it out).
TEST(ClipGradNorm, NormIsOfTheUnscaledGradients) {
  ScaledRun<cohort::Sgd, ReferenceSgd, cohort::SgdOptions> run;
  cohort::LossScaler scaler(cohort::Device::host());
  run.optimizer.set_loss_scaler(&scaler);
  const auto fresh = random_values<float>(kCount, 41);
  for (std::size_t i = 0; i < kCount; ++i) {
    run.grads[i] = fresh[i] * 65536.0f;
  }
  const double norm = l2_norm(to_doubles(fresh));
  const cohort::GradNorm measured = cohort::clip_grad_norm(run.optimizer, 1.0f);
  EXPECT_NEAR(measured.value(), norm, 1e-5 * norm);
  run.optimizer.step();
  EXPECT_NEAR(measured.value(), norm, 1e-5 * norm);
  run.reference.step(to_doubles(fresh), 1.0 / (norm + 1e-6));
  expect_params_match(run.params, run.optimizer, run.reference.params());
}

TEST(ClipGradNorm, RejectsANonPositiveMaximum) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<float> params(4, 1.0f);
  std::vector<float> grads(4, 1.0f);
  cohort::Sgd optimizer({std::span<float>(params), std::span<float>(grads), stream});
  EXPECT_THROW(cohort::clip_grad_norm(optimizer, 0.0f), cohort::InvalidArgument);
}

// ---- host kernels ----

TEST(HostKernels, GradStatsCountsNonFiniteAndSumsTheRest) {
  std::vector<float> grads = random_values<float>(10001, 51);
  grads[7] = std::numeric_limits<float>::infinity();
  grads[9000] = std::numeric_limits<float>::quiet_NaN();
  double expected = 0.0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (i != 7 && i != 9000) {
      expected += static_cast<double>(grads[i]) * static_cast<double>(grads[i]);
    }
  }
  const auto stats = cohort::kernels::host::grad_stats(std::span<float>(grads));
  EXPECT_EQ(stats.nonfinite, 2.0);
  EXPECT_NEAR(stats.sum_of_squares, expected, 1e-6 * expected);

  std::vector<bfloat16> low = random_values<bfloat16>(333, 52);
  const auto low_stats = cohort::kernels::host::grad_stats(std::span<bfloat16>(low));
  double low_expected = 0.0;
  for (auto v : low) {
    low_expected += to_double(v) * to_double(v);
  }
  EXPECT_EQ(low_stats.nonfinite, 0.0);
  EXPECT_NEAR(low_stats.sum_of_squares, low_expected, 1e-6 * low_expected);
}

TEST(HostKernels, CastsRoundToNearestEven) {
  std::vector<float> source = random_values<float>(1000, 53, 1e-3, 1e3);
  std::vector<bfloat16> b(1000);
  std::vector<half> h(1000);
  std::vector<float> back(1000);
  cohort::kernels::host::cast(std::span<float>(source), std::span<bfloat16>(b));
  cohort::kernels::host::cast(std::span<float>(source), std::span<half>(h));
  for (std::size_t i = 0; i < source.size(); ++i) {
    ASSERT_EQ(b[i].bits, bfloat16(source[i]).bits);
    ASSERT_EQ(h[i].bits, half(source[i]).bits);
  }
  cohort::kernels::host::cast(std::span<bfloat16>(b), std::span<float>(back));
  for (std::size_t i = 0; i < source.size(); ++i) {
    ASSERT_EQ(back[i], static_cast<float>(b[i]));
  }
  EXPECT_THROW(
      cohort::kernels::host::cast(std::span<float>(source), std::span<float>(back).first(3)),
      cohort::InvalidArgument);
}

// ---- state and checks ----

std::size_t host_optimizer_state_bytes() {
  for (const auto& usage : cohort::memory_usage()) {
    if (usage.category == cohort::MemoryCategory::optimizer_state && usage.device.is_host()) {
      return usage.current_bytes;
    }
  }
  return 0;
}

TEST(OptimizerState, BytesFollowTheRuleAndTheDtypeAndAreReported) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<float> params(kCount, 1.0f);
  std::vector<float> grads(kCount, 1.0f);
  std::vector<bfloat16> low(kCount, bfloat16(1.0f));
  std::vector<bfloat16> low_grads(kCount, bfloat16(1.0f));
  const std::size_t before = host_optimizer_state_bytes();
  {
    cohort::AdamW adamw({std::span<float>(params), std::span<float>(grads), stream});
    EXPECT_EQ(adamw.state_bytes(), 2 * kCount * sizeof(float));
    EXPECT_EQ(host_optimizer_state_bytes() - before, adamw.state_bytes());
    EXPECT_EQ(adamw.shard_offset(), 0u);
    EXPECT_EQ(adamw.shard_count(), kCount);
  }
  cohort::AdamW mixed({std::span<bfloat16>(low), std::span<bfloat16>(low_grads), stream});
  EXPECT_EQ(mixed.state_bytes(), 3 * kCount * sizeof(float)) << "moments and master weights";
  cohort::Sgd plain({std::span<float>(params), std::span<float>(grads), stream});
  EXPECT_EQ(plain.state_bytes(), 0u);
  cohort::Sgd momentum({std::span<float>(params), std::span<float>(grads), stream},
                       {.momentum = 0.9f});
  EXPECT_EQ(momentum.state_bytes(), kCount * sizeof(float));
}

TEST(OptimizerChecks, RejectsWhatItCannotStep) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<double> wide(8, 1.0);
  std::vector<float> params(8, 1.0f);
  std::vector<float> short_grads(7, 1.0f);
  std::vector<half> half_grads(8, half(1.0f));
  EXPECT_THROW(cohort::AdamW({std::span<double>(wide), std::span<double>(wide), stream}),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::AdamW({std::span<float>(params), std::span<float>(short_grads), stream}),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::AdamW({std::span<float>(params), std::span<half>(half_grads), stream}),
               cohort::InvalidArgument)
      << "f16 grads for f32 params";
  std::vector<float> grads(8, 1.0f);
  const cohort::OptimizerTarget target{std::span<float>(params), std::span<float>(grads), stream};
  EXPECT_THROW(cohort::Sgd(target, {.momentum = 0.9f, .dampening = 0.5f, .nesterov = true}),
               cohort::InvalidArgument);
  EXPECT_THROW(cohort::AdamW(target, {.beta2 = 1.0f}), cohort::InvalidArgument);
  EXPECT_THROW(cohort::Sgd(target, {.lr = -1.0f}), cohort::InvalidArgument);
}

// A target sharded by the data-parallel engine (ZeRO-2: this rank's pieces of the arena, the
// gradients as its shard): each piece steps exactly as the whole arena's optimizer steps those
// elements, the rest of the arena is not touched, and the hook runs after every step.
template <typename Param>
void expect_pieces_step_as_the_whole(bool adamw) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  constexpr std::size_t kSegment = 128, kSegments = 3, kPiece = 64;  // 2 ranks; this is rank 1
  const std::size_t arena = kSegment * kSegments;
  std::vector<Param> whole = random_values<Param>(arena, 11);
  std::vector<Param> sharded = whole;
  std::vector<Param> all_grads = random_values<Param>(arena, 12);
  std::vector<Param> shard_grads;
  std::vector<cohort::OptimizerPiece> pieces;
  for (std::size_t s = 0; s < kSegments; ++s) {
    pieces.push_back({s * kSegment + kPiece, s * kPiece, kPiece});
    shard_grads.insert(shard_grads.end(),
                       all_grads.begin() + static_cast<long>(s * kSegment + kPiece),
                       all_grads.begin() + static_cast<long>((s + 1) * kSegment));
  }
  int hooks = 0;
  const cohort::OptimizerTarget plain{std::span<Param>(whole), std::span<Param>(all_grads), stream};
  const cohort::OptimizerTarget target{
      std::span<Param>(sharded), std::span<Param>(shard_grads), stream, nullptr, true, pieces,
      [&] { ++hooks; }};
  std::unique_ptr<cohort::Optimizer> reference, optimizer;
  if (adamw) {
    reference = std::make_unique<cohort::AdamW>(plain, cohort::AdamWOptions{.lr = 0.01f});
    optimizer = std::make_unique<cohort::AdamW>(target, cohort::AdamWOptions{.lr = 0.01f});
  } else {
    reference =
        std::make_unique<cohort::Sgd>(plain, cohort::SgdOptions{.lr = 0.1f, .momentum = 0.9f});
    optimizer =
        std::make_unique<cohort::Sgd>(target, cohort::SgdOptions{.lr = 0.1f, .momentum = 0.9f});
  }
  EXPECT_TRUE(optimizer->is_sharded());
  EXPECT_EQ(optimizer->shard_count(), kSegments * kPiece);
  for (int step = 0; step < 3; ++step) {
    reference->step();
    optimizer->step();
  }
  stream.synchronize();
  EXPECT_EQ(hooks, 3);
  const std::vector<Param> before = random_values<Param>(arena, 11);
  for (std::size_t i = 0; i < arena; ++i) {
    const bool mine = i % kSegment >= kPiece;
    if (mine) {
      ASSERT_EQ(to_double(sharded[i]), to_double(whole[i])) << "element " << i;
    } else {
      ASSERT_EQ(to_double(sharded[i]), to_double(before[i])) << "element " << i << " not mine";
    }
  }
  EXPECT_NE(to_double(sharded[kPiece]), to_double(before[kPiece]));
}

TEST(ShardedTarget, F32PiecesStepAsTheWholeArenaWould) {
  expect_pieces_step_as_the_whole<float>(true);
  expect_pieces_step_as_the_whole<float>(false);
}

TEST(ShardedTarget, Bf16PiecesWithMasterWeightsStepAsTheWholeArenaWould) {
  expect_pieces_step_as_the_whole<bfloat16>(true);
}

TEST(ShardedTarget, RejectsPiecesThatDoNotCoverTheShard) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<float> params(256, 1.0f);
  std::vector<float> grads(128, 1.0f);
  auto target = [&](std::vector<cohort::OptimizerPiece> pieces) {
    return cohort::OptimizerTarget{std::span<float>(params),
                                   std::span<float>(grads),
                                   stream,
                                   nullptr,
                                   true,
                                   std::move(pieces),
                                   nullptr};
  };
  EXPECT_NO_THROW(cohort::AdamW(target({{0, 0, 64}, {192, 64, 64}})));
  EXPECT_THROW(cohort::AdamW(target({{0, 0, 64}})), cohort::InvalidArgument);  // short
  EXPECT_THROW(cohort::AdamW(target({{0, 0, 64}, {192, 32, 64}})), cohort::InvalidArgument);
  EXPECT_THROW(cohort::AdamW(target({{0, 0, 64}, {200, 64, 64}})), cohort::InvalidArgument);
}

TEST(OptimizerChecks, EmptyArenaStepsAsANoOp) {
  const auto stream = cohort::Stream::create(cohort::Device::host());
  std::vector<float> none;
  cohort::AdamW optimizer({std::span<float>(none), std::span<float>(none), stream});
  optimizer.step();
  EXPECT_EQ(optimizer.steps_taken(), 1);
}

}  // namespace
}  // namespace cohort_test
