#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>

#include <gtest/gtest.h>

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

}  // namespace
