// The CUDA kernels against the host loops (the same functors), and a whole optimizer on a GPU
// against the same optimizer on the host. Every test skips without a GPU.

#include "optim_test_util.hpp"

#include <cohort/core/device.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/kernels/launch.hpp>
#include <cohort/memory/managed.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/clip.hpp>
#include <cohort/optim/loss_scaler.hpp>
#include <cohort/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#if COHORT_WITH_CUDA
#include "support/cuda_copy.hpp"

#include <cuda_runtime_api.h>
#endif

namespace cohort_test {
namespace {

#define SKIP_WITHOUT_GPU()                                           \
  if (cohort::cuda_device_count() == 0) {                            \
    GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason(); \
  }

#if COHORT_WITH_CUDA

void check(cudaError_t status) {
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
}

/// A device copy of a host vector, copied back by `to_host`. Copies wait for the whole device
/// before and after: cudaMemcpy runs on the legacy stream, which cohort's non-blocking streams do
/// not wait for, and a pageable upload may return before it lands.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : count_(host.size()) {
    check(cudaMalloc(&data_, std::max<std::size_t>(1, count_) * sizeof(T)));
    upload(host);
  }
  void upload(const std::vector<T>& host) const {
    check(cohort_test::copy_with_device_idle(data_, host.data(), count_ * sizeof(T),
                                             cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { (void)cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() const { return static_cast<T*>(data_); }
  cohort::TensorView view() const {
    return cohort::TensorView::of(data(), count_, cohort::Device::cuda(0));
  }
  std::vector<T> to_host() const {
    std::vector<T> host(count_);
    check(cohort_test::copy_with_device_idle(host.data(), data_, count_ * sizeof(T),
                                             cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* data_ = nullptr;
  std::size_t count_;
};

template <typename Param, typename Grad>
void expect_kernel_matches_host(const cohort::kernels::UpdateHyper& hyper, std::size_t count,
                                std::uint32_t seed) {
  namespace k = cohort::kernels;
  std::vector<Param> params = random_values<Param>(count, seed);
  const std::vector<Grad> grads = random_values<Grad>(count, seed + 1);
  std::vector<float> master(count);
  for (std::size_t i = 0; i < count; ++i) {
    master[i] = static_cast<float>(to_double(params[i]));
  }
  std::vector<float> state0 = random_values<float>(count, seed + 2);
  std::vector<float> state1 = random_values<float>(count, seed + 3, 0.01, 1.0);
  for (auto& v : state1) {
    v = std::fabs(v);
  }
  const bool has_master = !std::is_same_v<Param, float>;
  const bool has_state0 = hyper.rule == k::UpdateRule::adamw || hyper.sgd.momentum != 0.0f;
  const bool has_state1 = hyper.rule == k::UpdateRule::adamw;

  k::StepScalars scalars;
  k::PrepareArgs args;
  args.base_lr = 1e-2f;
  args.hyper = hyper;
  scalars.step = 2;  // not the first step
  k::prepare_step(scalars, nullptr, args);
  scalars.grad_multiplier = 0.5f;

  DeviceArray<Param> d_params(params);
  const DeviceArray<Grad> d_grads(grads);
  DeviceArray<float> d_master(master);
  DeviceArray<float> d_state0(state0);
  DeviceArray<float> d_state1(state1);
  DeviceArray<k::StepScalars> d_scalars(std::vector<k::StepScalars>{scalars});
  k::cuda::optimizer_step(
      {d_params.view(), d_grads.view(), has_master ? d_master.data() : nullptr,
       has_state0 ? d_state0.data() : nullptr, has_state1 ? d_state1.data() : nullptr},
      hyper, d_scalars.data(), nullptr);
  check(cudaDeviceSynchronize());
  std::vector<Grad> host_grads = grads;
  k::host::optimizer_step(
      {std::span<Param>(params), std::span<Grad>(host_grads), has_master ? master.data() : nullptr,
       has_state0 ? state0.data() : nullptr, has_state1 ? state1.data() : nullptr},
      hyper, scalars);
  const auto device_params = d_params.to_host();
  const auto device_master = d_master.to_host();
  const auto device_state0 = d_state0.to_host();
  const auto device_state1 = d_state1.to_host();
  for (std::size_t i = 0; i < count; ++i) {
    const double expected = has_master ? static_cast<double>(master[i]) : to_double(params[i]);
    const double actual =
        has_master ? static_cast<double>(device_master[i]) : to_double(device_params[i]);
    ASSERT_NEAR(actual, expected, 1e-6 * (1.0 + std::fabs(expected))) << "element " << i;
    if constexpr (!std::is_same_v<Param, float>) {
      ASSERT_EQ(device_params[i].bits, Param(device_master[i]).bits) << "element " << i;
    }
    const auto expected_state = static_cast<double>(state0[i]);
    ASSERT_NEAR(static_cast<double>(device_state0[i]), expected_state,
                1e-6 * (1.0 + std::fabs(expected_state)))
        << "exp_avg (or the momentum buffer) at " << i;
    // AdamW's exp_avg_sq: relative to itself, since it is about g^2 (small where g is).
    const auto expected_square = static_cast<double>(state1[i]);
    ASSERT_NEAR(static_cast<double>(device_state1[i]), expected_square,
                1e-6 * std::fabs(expected_square) + 1e-30)
        << "exp_avg_sq at " << i;
  }
}

template <typename P, typename G>
struct StepTypes {
  using Param = P;
  using Grad = G;
};
using AllStepTypes =
    ::testing::Types<StepTypes<float, float>, StepTypes<cohort::bfloat16, cohort::bfloat16>,
                     StepTypes<cohort::bfloat16, float>, StepTypes<cohort::half, cohort::half>,
                     StepTypes<cohort::half, float>>;

template <typename T>
class CudaKernelTest : public ::testing::Test {};
TYPED_TEST_SUITE(CudaKernelTest, AllStepTypes);

TYPED_TEST(CudaKernelTest, StepsMatchTheHostLoops) {
  SKIP_WITHOUT_GPU();
  using P = typename TypeParam::Param;
  using G = typename TypeParam::Grad;
  namespace k = cohort::kernels;
  for (std::size_t count : {std::size_t{1}, std::size_t{1003}, std::size_t{1} << 20}) {
    SCOPED_TRACE(testing::Message() << count << " elements");
    expect_kernel_matches_host<P, G>({k::UpdateRule::adamw, {}, {0.9f, 0.99f, 1e-8f, 0.1f}}, count,
                                     1);
    expect_kernel_matches_host<P, G>({k::UpdateRule::sgd, {0.9f, 0.1f, 0.01f, false}, {}}, count,
                                     2);
    expect_kernel_matches_host<P, G>({k::UpdateRule::sgd, {0.9f, 0.0f, 0.0f, true}, {}}, count, 3);
    expect_kernel_matches_host<P, G>({k::UpdateRule::sgd, {}, {}}, count, 4);
  }
}

/// Every field of the step scalars and of the loss scaler's state, device against host.
void expect_same_scalars(const cohort::kernels::StepScalars& got,
                         const cohort::kernels::StepScalars& want,
                         const cohort::kernels::LossScalerState& got_scaler,
                         const cohort::kernels::LossScalerState& want_scaler) {
  auto close = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) ||
           std::fabs(static_cast<double>(a) - static_cast<double>(b)) <=
               1e-6 * std::fabs(static_cast<double>(b));
  };
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.skip, want.skip);
  EXPECT_EQ(got.first_step, want.first_step);
  EXPECT_PRED2(close, got.lr, want.lr);
  EXPECT_PRED2(close, got.grad_multiplier, want.grad_multiplier);
  EXPECT_PRED2(close, got.grad_norm, want.grad_norm);
  EXPECT_PRED2(close, got.step_size, want.step_size);
  EXPECT_PRED2(close, got.inv_sqrt_bias_correction2, want.inv_sqrt_bias_correction2);
  EXPECT_PRED2(close, got.decay, want.decay);
  EXPECT_EQ(got_scaler.scale, want_scaler.scale);
  EXPECT_EQ(got_scaler.growth_tracker, want_scaler.growth_tracker);
  EXPECT_EQ(got_scaler.skipped_steps, want_scaler.skipped_steps);
  EXPECT_EQ(got_scaler.last_found_inf, want_scaler.last_found_inf);
}

// prepare_step on one GPU thread against the host: clipping, an overflow that skips the step and
// backs the scale off, growth at the interval, the warm-up/cosine schedule and AdamW's bias
// corrections, over several steps in a row.
TEST(CudaKernels, PrepareStepMatchesTheHost) {
  SKIP_WITHOUT_GPU();
  namespace k = cohort::kernels;
  for (const k::UpdateRule rule : {k::UpdateRule::adamw, k::UpdateRule::sgd}) {
    SCOPED_TRACE(rule == k::UpdateRule::adamw ? "AdamW" : "SGD");
    k::PrepareArgs args;
    args.base_lr = 3e-3f;
    args.schedule = cohort::LrSchedule::warmup_cosine(2, 7);
    args.hyper.rule = rule;
    args.hyper.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
    args.max_grad_norm = 4.0f;
    args.stats_valid = true;
    args.use_scaler = true;
    args.scaler.growth_interval = 2;
    k::StepScalars host_scalars;
    k::LossScalerState host_scaler;
    host_scaler.scale = 1024.0f;
    DeviceArray<k::StepScalars> d_scalars(std::vector<k::StepScalars>{host_scalars});
    DeviceArray<k::LossScalerState> d_scaler(std::vector<k::LossScalerState>{host_scaler});
    for (int step = 0; step < 8; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step);
      // Norms below and above the clip, an overflow at step 3; the scale is 2^k, so exact.
      auto device_scalars = d_scalars.to_host();
      for (k::StepScalars* s : {&host_scalars, &device_scalars[0]}) {
        s->stats.sum_of_squares =
            std::pow(static_cast<double>(host_scaler.scale) * (step % 2 == 0 ? 1.5 : 9.0), 2.0);
        s->stats.nonfinite = step == 3 ? 1.0 : 0.0;
      }
      d_scalars.upload(device_scalars);
      k::cuda::prepare_step(d_scalars.data(), d_scaler.data(), args, nullptr);
      k::prepare_step(host_scalars, &host_scaler, args);
      expect_same_scalars(d_scalars.to_host()[0], host_scalars, d_scaler.to_host()[0], host_scaler);
    }
    EXPECT_EQ(host_scaler.skipped_steps, 1);
    EXPECT_EQ(host_scalars.step, 7);
  }
}

TEST(CudaKernels, GradStatsAndCastsMatchTheHost) {
  SKIP_WITHOUT_GPU();
  namespace k = cohort::kernels;
  std::vector<float> grads = random_values<float>((1 << 20) + 3, 9);
  grads[12345] = std::numeric_limits<float>::infinity();
  const DeviceArray<float> d_grads(grads);
  DeviceArray<k::GradStats> d_stats(std::vector<k::GradStats>(1));
  k::cuda::grad_stats(d_grads.view(), d_stats.data(), nullptr);
  const auto stats = d_stats.to_host()[0];
  const auto expected = k::host::grad_stats(std::span<float>(grads));
  EXPECT_EQ(stats.nonfinite, 1.0);
  EXPECT_NEAR(stats.sum_of_squares, expected.sum_of_squares, 1e-6 * expected.sum_of_squares);

  const std::vector<float> source = random_values<float>(100003, 10, 1e-3, 1e3);
  const DeviceArray<float> d_source(source);
  DeviceArray<cohort::bfloat16> d_b(std::vector<cohort::bfloat16>(source.size()));
  DeviceArray<cohort::half> d_h(std::vector<cohort::half>(source.size()));
  k::cuda::cast(d_source.view(), d_b.view(), nullptr);
  k::cuda::cast(d_source.view(), d_h.view(), nullptr);
  const auto b = d_b.to_host();
  const auto h = d_h.to_host();
  for (std::size_t i = 0; i < source.size(); ++i) {
    ASSERT_EQ(b[i].bits, cohort::bfloat16(source[i]).bits) << i;
    ASSERT_EQ(h[i].bits, cohort::half(source[i]).bits) << i;
  }
}

TEST(CudaKernels, CastsMatchTheHostOnAlignedAndUnalignedViewsBothWays) {
  SKIP_WITHOUT_GPU();
  namespace k = cohort::kernels;
  // Odd counts and an offset of one element exercise the vector body, its tail, and the scalar
  // path of the one cast kernel that the optimizers and DataParallel's wire compression share.
  const std::vector<float> source = random_values<float>(4099, 11, 1e-3, 1e3);
  const DeviceArray<float> d_source(source);
  for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
    const std::size_t count = source.size() - offset - 2;
    const cohort::bfloat16 poison = cohort::bfloat16::from_bits(0x7FC1);  // a NaN
    DeviceArray<cohort::bfloat16> d_b(std::vector<cohort::bfloat16>(source.size(), poison));
    k::cuda::cast(d_source.view().slice(offset, count), d_b.view().slice(offset, count), nullptr);
    DeviceArray<float> d_back(std::vector<float>(source.size(), -1.0f));
    k::cuda::cast(d_b.view().slice(offset, count), d_back.view().slice(offset, count), nullptr);
    const auto b = d_b.to_host();
    const auto back = d_back.to_host();
    for (std::size_t i = 0; i < source.size(); ++i) {
      const bool inside = i >= offset && i < offset + count;
      if (!inside) {
        ASSERT_EQ(b[i].bits, poison.bits) << "written outside the view at " << i;
        continue;
      }
      ASSERT_EQ(b[i].bits, cohort::bfloat16(source[i]).bits) << "offset " << offset << ", " << i;
      ASSERT_EQ(back[i], static_cast<float>(cohort::bfloat16(source[i]))) << i;
    }
  }
}

TEST(CudaKernels, ALaunchIsNotBlamedForAnEarlierUnrelatedError) {
  SKIP_WITHOUT_GPU();
  namespace k = cohort::kernels;
  const std::vector<float> source = random_values<float>(1000, 12);
  const DeviceArray<float> d_source(source);
  DeviceArray<cohort::half> d_h(std::vector<cohort::half>(source.size()));
  // A failed call whose error its caller ignored stays pending; the cast after it must neither
  // throw that error as its own nor clear it.
  const int host_value = 1;
  // fails on purpose: a copy to nullptr leaves its error pending
  ASSERT_NE(cudaMemcpy(nullptr, &host_value, sizeof(host_value), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_NO_THROW(k::cuda::cast(d_source.view(), d_h.view(), nullptr));
  EXPECT_NE(cudaPeekAtLastError(), cudaSuccess) << "the launch cleared another call's error";
  (void)cudaGetLastError();
  const auto h = d_h.to_host();
  EXPECT_EQ(h[999].bits, cohort::half(source[999]).bits);
}

TEST(CudaOptimizer, AdamWWithScalerAndClippingMatchesTheHostOptimizer) {
  SKIP_WITHOUT_GPU();
  constexpr std::size_t kCount = (1 << 16) + 5;
  const auto host_stream = cohort::Stream::create(cohort::Device::host());
  const auto device_stream = cohort::Stream::create(cohort::Device::cuda(0));
  std::vector<cohort::bfloat16> host_params = random_values<cohort::bfloat16>(kCount, 20);
  std::vector<float> host_grads(kCount);
  DeviceArray<cohort::bfloat16> device_params(host_params);
  DeviceArray<float> device_grads(host_grads);
  const cohort::AdamWOptions options{.lr = 1e-2f,
                                     .schedule = cohort::LrSchedule::warmup_cosine(1, 4)};
  cohort::AdamW host_optimizer(
      {std::span<cohort::bfloat16>(host_params), std::span<float>(host_grads), host_stream},
      options);
  cohort::AdamW device_optimizer({device_params.view(), device_grads.view(), device_stream},
                                 options);
  cohort::LossScaler host_scaler(cohort::Device::host(), {.growth_interval = 2});
  cohort::LossScaler device_scaler(cohort::Device::cuda(0), {.growth_interval = 2});
  host_optimizer.set_loss_scaler(&host_scaler);
  device_optimizer.set_loss_scaler(&device_scaler);
  for (std::uint32_t step = 0; step < 5; ++step) {
    host_stream.synchronize();
    device_stream.synchronize();
    const float scale = host_scaler.read(host_stream).scale;
    ASSERT_EQ(device_scaler.read(device_stream).scale, scale);
    auto grads = random_values<float>(kCount, 30 + step);
    for (auto& g : grads) {
      g *= scale;
    }
    if (step == 2) {
      grads[77] = std::numeric_limits<float>::quiet_NaN();
    }
    std::copy(grads.begin(), grads.end(), host_grads.begin());
    device_grads.upload(grads);
    const auto host_norm = cohort::clip_grad_norm(host_optimizer, 50.0f);
    const auto device_norm = cohort::clip_grad_norm(device_optimizer, 50.0f);
    host_optimizer.step();
    device_optimizer.step();
    if (step != 2) {
      const auto expected_norm = static_cast<double>(host_norm.value());
      EXPECT_NEAR(static_cast<double>(device_norm.value()), expected_norm, 1e-5 * expected_norm);
    }
  }
  EXPECT_EQ(device_optimizer.steps_taken(), 4);
  EXPECT_EQ(device_scaler.read(device_stream).skipped_steps, 1);
  host_stream.synchronize();
  const auto result = device_params.to_host();
  std::size_t different = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    different += result[i].bits != host_params[i].bits ? 1u : 0u;
    // The fp32 master weights agree to about 1e-6, so a bf16 value differs from the host's by
    // a flipped rounding at most: one bf16 step (at most 2^-7 of the value), never more.
    const double want = to_double(host_params[i]);
    ASSERT_LE(std::fabs(to_double(result[i]) - want), std::ldexp(std::fabs(want), -7) + 1e-30)
        << "param " << i << " drifted by more than one bf16 rounding";
  }
  // fp32 rounding differences may flip a bf16 rounding now and then, never often.
  EXPECT_LT(different, kCount / 1000) << different << " of " << kCount << " params differ";
}

cudaMemoryType memory_type(const void* pointer) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, pointer);
  EXPECT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
  return attributes.type;
}

template <typename T>
std::vector<T> download(const cohort::TensorView& view) {
  std::vector<T> host(view.count());
  check(cohort_test::copy_with_device_idle(host.data(), view.data(), view.bytes(),
                                           cudaMemcpyDeviceToHost));
  return host;
}

std::size_t bits_differing(const std::vector<cohort::bfloat16>& a,
                           const std::vector<cohort::bfloat16>& b) {
  std::size_t different = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    different += a[i].bits != b[i].bits ? 1u : 0u;
  }
  return different;
}

// Issue 28, item 3: AdamW whose state lives in managed memory (prefetched before each step) steps
// exactly as with the state in the device pool, and its scalars, which NCCL reads for clipping
// and the loss scaler, stay in device memory (Note [Optimizer scalars in device memory]).
TEST(CudaOptimizer, AdamWWithManagedStateIsBitwiseEqualToTheDevicePool) {
  SKIP_WITHOUT_GPU();
  constexpr std::size_t kCount = (1 << 20) + 3;
  const auto stream = cohort::Stream::create(cohort::Device::cuda(0));
  const auto initial = random_values<cohort::bfloat16>(kCount, 40);
  DeviceArray<cohort::bfloat16> pool_params(initial);
  DeviceArray<cohort::bfloat16> managed_params(initial);
  const std::vector<float> zeros(kCount);
  DeviceArray<float> pool_grads(zeros);
  DeviceArray<float> managed_grads(zeros);
  const cohort::AdamWOptions options{.lr = 1e-2f};
  cohort::AdamW on_pool({pool_params.view(), pool_grads.view(), stream}, options);
  const auto managed = cohort::make_managed_resource({.device = 0});
  cohort::AdamWOptions managed_options = options;
  managed_options.state_resource = managed;
  cohort::AdamW on_managed({managed_params.view(), managed_grads.view(), stream}, managed_options);
  // bf16 parameters: f32 master weights and two moments, all managed; the scalars are not.
  ASSERT_EQ(on_managed.state().size(), 3u);
  EXPECT_EQ(managed->bytes_in_use(), 3 * kCount * sizeof(float));
  for (const cohort::OptimizerStateView& state : on_managed.state()) {
    EXPECT_EQ(memory_type(state.view.data()), cudaMemoryTypeManaged) << state.name;
  }
  EXPECT_EQ(memory_type(on_managed.steps_taken_view().data()), cudaMemoryTypeDevice)
      << "the optimizer's scalars (read by NCCL) are not device memory";
  for (std::uint32_t step = 0; step < 5; ++step) {
    const auto grads = random_values<float>(kCount, 41 + step);
    pool_grads.upload(grads);
    managed_grads.upload(grads);
    const auto pool_norm = cohort::clip_grad_norm(on_pool, 50.0f);
    const auto managed_norm = cohort::clip_grad_norm(on_managed, 50.0f);
    on_pool.step();
    on_managed.step();  // prefetches the managed state to cuda:0 first
    EXPECT_EQ(managed_norm.value(), pool_norm.value()) << "step " << step;
  }
  stream.synchronize();
  EXPECT_EQ(on_managed.steps_taken(), 5);
  EXPECT_EQ(bits_differing(managed_params.to_host(), pool_params.to_host()), 0u);
  const auto pool_state = on_pool.state();
  const auto managed_state = on_managed.state();
  ASSERT_EQ(pool_state.size(), managed_state.size());
  for (std::size_t i = 0; i < pool_state.size(); ++i) {
    const auto expected = download<std::uint32_t>(cohort::TensorView(
        pool_state[i].view.data(), kCount, cohort::DType::f32, cohort::Device::cuda(0)));
    const auto actual = download<std::uint32_t>(cohort::TensorView(
        managed_state[i].view.data(), kCount, cohort::DType::f32, cohort::Device::cuda(0)));
    EXPECT_TRUE(expected == actual) << pool_state[i].name << " differs bit for bit";
  }
}

/// Device memory held for a test's life.
class Ballast {
 public:
  explicit Ballast(std::size_t bytes) { check(cudaMalloc(&data_, bytes)); }
  ~Ballast() { (void)cudaFree(data_); }
  Ballast(const Ballast&) = delete;
  Ballast& operator=(const Ballast&) = delete;

 private:
  void* data_ = nullptr;
};

// Issue 28, item 3: optimizer state larger than what the GPU has free, in managed memory that
// may oversubscribe it, is accepted (Note [Oversubscribed managed memory]) and steps bit for bit
// as the same state in the device pool. A ballast allocation leaves half the state's bytes free;
// the managed memory asked for (768 MiB) stays far below what the card had free before it.
TEST(CudaOptimizer, OversubscribedManagedStateConstructsAndSteps) {
  SKIP_WITHOUT_GPU();
  if (!cohort::managed::concurrent_access(0)) {
    GTEST_SKIP()
        << "cuda:0 lacks concurrent managed access: managed memory cannot oversubscribe it";
  }
  constexpr std::size_t kCount = std::size_t{64} << 20;
  constexpr std::size_t kStateBytes = 3 * kCount * sizeof(float);  // master, exp_avg, exp_avg_sq
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < 4 * kStateBytes) {
    GTEST_SKIP() << "cuda:0 has " << (free_bytes >> 20) << " MiB free; the test needs "
                 << (4 * kStateBytes >> 20);
  }
  const auto stream = cohort::Stream::create(cohort::Device::cuda(0));
  const auto initial = random_values<cohort::bfloat16>(kCount, 50);
  const DeviceArray<float> grads(random_values<float>(kCount, 51));
  const cohort::AdamWOptions options{.lr = 1e-2f};
  constexpr int kSteps = 3;
  DeviceArray<cohort::bfloat16> expected_params(initial);
  {
    cohort::AdamW reference({expected_params.view(), grads.view(), stream}, options);
    for (int step = 0; step < kSteps; ++step) reference.step();
    stream.synchronize();
  }
  const auto expected = expected_params.to_host();

  DeviceArray<cohort::bfloat16> params(initial);
  check(cudaMemGetInfo(&free_bytes, &total_bytes));
  const std::size_t keep_free = kStateBytes / 2;
  ASSERT_GT(free_bytes, kStateBytes + keep_free);
  const Ballast ballast(free_bytes - keep_free);
  check(cudaMemGetInfo(&free_bytes, &total_bytes));
  ASSERT_LT(free_bytes, kStateBytes) << "the ballast left the state room to fit";

  // Without oversubscription the state is refused before it is allocated...
  cohort::AdamWOptions refused = options;
  refused.state_resource = cohort::make_managed_resource({.device = 0});
  const auto make_refused = [&] {
    const cohort::AdamW optimizer({params.view(), grads.view(), stream}, refused);
  };
  EXPECT_THROW(make_refused(), cohort::OutOfMemory);
  // ...with it, the state is accepted and steps.
  const auto managed = cohort::make_managed_resource({.device = 0, .allow_oversubscription = true});
  ASSERT_TRUE(managed->oversubscribable());
  cohort::AdamWOptions oversubscribed = options;
  oversubscribed.state_resource = managed;
  cohort::AdamW optimizer({params.view(), grads.view(), stream}, oversubscribed);
  EXPECT_EQ(optimizer.state_bytes(), kStateBytes);
  for (int step = 0; step < kSteps; ++step) optimizer.step();
  stream.synchronize();
  EXPECT_EQ(optimizer.steps_taken(), kSteps);
  EXPECT_EQ(bits_differing(params.to_host(), expected), 0u);
}

#else

TEST(CudaKernels, NeedCohortBuiltWithCuda) {
  GTEST_SKIP() << "cohort was built without CUDA: " << cohort::cuda_unavailable_reason();
}

#endif

}  // namespace
}  // namespace cohort_test
