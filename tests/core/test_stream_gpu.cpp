#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>

#include <gtest/gtest.h>

#if COHORT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <atomic>

namespace {

class CudaStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cohort::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
    }
  }
};

TEST_F(CudaStreamTest, HostTasksRunInStreamOrder) {
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::cuda(0));
  EXPECT_NE(stream.native_handle(), nullptr);
  std::atomic<int> counter{0};
  int first = -1;
  int second = -1;
  stream.enqueue([&] { first = counter++; });
  stream.enqueue([&] { second = counter++; });
  stream.synchronize();
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  EXPECT_TRUE(stream.ready());
}

TEST_F(CudaStreamTest, EventsJoinStreamsAndTime) {
  const cohort::Stream a = cohort::Stream::create(cohort::Device::cuda(0));
  const cohort::Stream b = cohort::Stream::create(cohort::Device::cuda(0));
  cohort::Event start = cohort::Event::create(cohort::Device::cuda(0), true);
  cohort::Event end = cohort::Event::create(cohort::Device::cuda(0), true);
  std::atomic<int> value{0};
  int seen = -1;
  start.record(a);
  a.enqueue([&] { value = 7; });
  end.record(a);
  b.wait(end);
  b.enqueue([&] { seen = value; });
  b.synchronize();
  EXPECT_EQ(seen, 7);
  EXPECT_GE(cohort::Event::elapsed_ms(start, end), 0.0f);
}

TEST_F(CudaStreamTest, MixingHostAndCudaIsRejected) {
  const cohort::Stream cuda = cohort::Stream::create(cohort::Device::cuda(0));
  cohort::Event host_event = cohort::Event::create(cohort::Device::host());
  EXPECT_THROW(host_event.record(cuda), cohort::InvalidArgument);
  EXPECT_THROW(cuda.wait(host_event), cohort::InvalidArgument);
}

#if COHORT_WITH_CUDA
TEST_F(CudaStreamTest, WrappingNullIsTheLegacyDefaultStream) {
  const cohort::Stream legacy = cohort::Stream::wrap_cuda(cohort::Device::cuda(0), nullptr);
  EXPECT_EQ(legacy.native_handle(), static_cast<void*>(cudaStreamLegacy));
  // Work on the legacy stream and the wrapped handle are one order: an event recorded on the
  // handle completes only after a host function enqueued on stream 0 before it.
  std::atomic<int> value{0};
  legacy.enqueue([&] { value = 3; });
  cohort::Event done = cohort::Event::create(cohort::Device::cuda(0));
  done.record(legacy);
  done.synchronize();
  EXPECT_EQ(value.load(), 3);
}

TEST_F(CudaStreamTest, ReadyLeavesAnUnrelatedPendingErrorInPlace) {
  // An invalid launch configuration leaves a pending error for its own check; polling an event
  // must neither clear it nor throw it.
  const int host_value = 1;
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::cuda(0));
  cohort::Event event = cohort::Event::create(cohort::Device::cuda(0));
  event.record(stream);
  event.synchronize();
  ASSERT_NE(cudaMemcpy(nullptr, &host_value, 1, cudaMemcpyHostToDevice), cudaSuccess);  // sets one
  EXPECT_TRUE(event.ready());
  EXPECT_NE(cudaPeekAtLastError(), cudaSuccess) << "ready() cleared another call's error";
  (void)cudaGetLastError();
}
#endif

}  // namespace
