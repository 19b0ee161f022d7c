#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>

#include <gtest/gtest.h>

#if COHORT_WITH_CUDA
#include <cohort/core/detail/cuda_device_scope.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/pinned_host.hpp>

#include <cuda_runtime_api.h>

#include <unistd.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

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
  // fails on purpose: sets a pending error
  ASSERT_NE(cudaMemcpy(nullptr, &host_value, 1, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_TRUE(event.ready());
  EXPECT_NE(cudaPeekAtLastError(), cudaSuccess) << "ready() cleared another call's error";
  (void)cudaGetLastError();
}
#endif

#if COHORT_WITH_CUDA
// ---- Note [Every call binds its device] and Note [Restoring an unbound thread] ----

/// Every kind of call cohort makes on a stream or an event of `device`: creating them, a host
/// task, a record, a wait, a query, synchronizing, the legacy stream wrapped, device and pinned
/// memory. Returns the value the host tasks left (3 when every task ran, in order).
int exercise(cohort::Device device) {
  std::atomic<int> value{0};
  const cohort::Stream stream = cohort::Stream::create(device);
  const cohort::Stream other = cohort::Stream::create(device);
  cohort::Event event = cohort::Event::create(device);
  stream.enqueue([&value] { value = 1; });
  event.record(stream);
  other.wait(event);
  other.enqueue([&value] { value = value * 2; });
  (void)event.ready();
  (void)stream.capturing();
  event.synchronize();
  other.synchronize();
  const cohort::Stream legacy = cohort::Stream::wrap_cuda(device, nullptr);
  legacy.enqueue([&value] { value = value + 1; });
  event.record(legacy);
  event.synchronize();
  legacy.synchronize();
  cohort::DevicePoolOptions pool;
  pool.device = device.index();
  {
    const cohort::Buffer on_device(cohort::make_device_pool_resource(pool), 4096, stream);
    const cohort::Buffer pinned(cohort::make_pinned_host_resource(), 4096);
    stream.synchronize();
  }
  return value.load();
}

int current_device() {
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  return device;
}

// A thread that bound no device (cudaGetDevice answers 0 there) makes every kind of call on the
// last GPU's objects: each runs, in order, and the thread's device is 0 after them as it was
// before. On one GPU the last GPU is GPU 0; two GPUs: the child test below.
TEST_F(CudaStreamTest, AFreshThreadsCallsRunAndLeaveItsDeviceAsItWas) {
  const cohort::Device own = cohort::Device::cuda(cohort::cuda_device_count() - 1);
  int before = -1;
  int after = -1;
  int value = 0;
  std::thread fresh([&] {
    before = current_device();
    value = exercise(own);
    after = current_device();
  });
  fresh.join();
  EXPECT_EQ(value, 3);
  EXPECT_EQ(before, 0);
  if (own.index() == 0) {
    EXPECT_EQ(after, before);
  }
}

// A thread that chose a device keeps it, whatever device cohort's objects are on.
TEST_F(CudaStreamTest, AThreadsOwnChoiceOfDeviceIsPutBack) {
  const int gpus = cohort::cuda_device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "two GPUs needed (a device chosen, the objects on another); " << gpus
                 << " visible";
  }
  for (const int chosen : {0, 1}) {
    ASSERT_EQ(cudaSetDevice(chosen), cudaSuccess);
    EXPECT_EQ(exercise(cohort::Device::cuda(1 - chosen)), 3);
    EXPECT_EQ(current_device(), chosen);
  }
}

// Note [Every call binds its device]: the legacy default stream is the current device's, so a
// wrapped legacy stream of GPU 1 must still be GPU 1's with GPU 0 current: a GPU 1 event records
// on it, and its host task runs before the event completes.
TEST_F(CudaStreamTest, AWrappedLegacyStreamKeepsItsDevice) {
  const int gpus = cohort::cuda_device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "two GPUs needed (the legacy stream of one, the other current); " << gpus
                 << " visible";
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const cohort::Stream legacy = cohort::Stream::wrap_cuda(cohort::Device::cuda(1), nullptr);
  std::atomic<int> value{0};
  legacy.enqueue([&value] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    value = 3;
  });
  cohort::Event done = cohort::Event::create(cohort::Device::cuda(1));
  EXPECT_NO_THROW(done.record(legacy));
  done.synchronize();
  EXPECT_EQ(value.load(), 3);
  EXPECT_EQ(current_device(), 0);
}

// Note [Restoring an unbound thread]: in a process that uses GPU 1 only, from threads that never
// chose a device (this one and a fresh one), no call creates a context on GPU 0. Run as a child
// process (DISABLED_ here, so that it runs only when asked for), where no other test has used
// GPU 0 yet.
TEST_F(CudaStreamTest, NoCallCreatesAContextOnAnotherGpu) {
  const int gpus = cohort::cuda_device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "two GPUs needed (the process on one, the other watched); " << gpus
                 << " visible";
  }
  char self[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(length, 0);
  const std::string command = std::string(self) +
                              " --gtest_also_run_disabled_tests"
                              " --gtest_filter=CudaStreamChild.DISABLED_OnlyTheSecondGpu 2>&1";
  FILE* child = popen(command.c_str(), "r");
  ASSERT_NE(child, nullptr);
  std::string output;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), child) != nullptr) output += buffer;
  const int status = pclose(child);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
}

TEST(CudaStreamChild, DISABLED_OnlyTheSecondGpu) {
  ASSERT_GE(cohort::cuda_device_count(), 2);
  ASSERT_FALSE(cohort::detail::primary_context_active(0)) << "GPU 0 was in use already";
  const cohort::Device own = cohort::Device::cuda(1);
  int value = 0;
  std::thread fresh([&] { value = exercise(own); });
  fresh.join();
  EXPECT_EQ(value, 3);
  EXPECT_EQ(exercise(own), 3);  // this thread bound no device either
  EXPECT_TRUE(cohort::detail::primary_context_active(1));
  EXPECT_FALSE(cohort::detail::primary_context_active(0)) << "a call created a context on GPU 0";
}
#endif

}  // namespace
