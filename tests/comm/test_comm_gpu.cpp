// NCCL through run_local on every GPU found: each collective against the host's closed form; and
// two processes sharing one GPU (comm_gpu_worker), so that one GPU is enough to see a wrong op
// or dtype mapping.
#include "support/gpu_ranks.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>

#if COHORT_WITH_CUDA
#include <cohort/memory/detail/stream_copy.hpp>

#include <cuda_runtime.h>
#endif

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

class NcclCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cohort::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
    }
  }
};

#if COHORT_WITH_CUDA
template <typename T>
std::vector<T> to_host(const T* device, std::size_t count, const cohort::Stream& stream) {
  std::vector<T> host(count);
  if (count > 0) {
    cohort::detail::read_after(host.data(), device, count * sizeof(T), stream);
  }
  return host;
}
#endif

// Two ranks as processes on the first GPU (each its own NCCL host, sockets over lo): with one
// rank every collective returns its input, so this is the test that sees the results on a
// machine with one GPU. If NCCL cannot place them there, the test fails and says why.
TEST_F(NcclCollectives, TwoProcessesSharingAGpuMatchTheClosedForms) {
  const auto ranks =
      cohort_test::run_gpu_ranks(2, "tests/comm/comm_gpu_worker", {}, {}, "comm-gpu");
  const std::string failed = cohort_test::ranks_failed(ranks);
  EXPECT_TRUE(failed.empty()) << failed;
}

// NCCL's failure paths with two ranks on the first GPU: a collective that rank 1 skips fails on
// rank 0 at its 8 s deadline (not before) and the failure reaches rank 1; an abort ends an
// in-flight collective long before its 60 s deadline. comm_gpu_worker checks each.
TEST_F(NcclCollectives, TwoProcessesSharingAGpuTimeOutAtTheDeadlineAndAbort) {
  for (const auto& [mode, timeout] : {std::pair{"timeout", "8s"}, std::pair{"abort", "60s"}}) {
    SCOPED_TRACE(mode);
    const auto ranks = cohort_test::run_gpu_ranks(2, "tests/comm/comm_gpu_worker", {mode},
                                                  {std::string("COHORT_TIMEOUT=") + timeout},
                                                  std::string("comm-gpu-") + mode);
    const std::string failed = cohort_test::ranks_failed(ranks);
    EXPECT_TRUE(failed.empty()) << failed;
  }
}

// Note [Sharing NCCL's resources]: what a World costs, measured by world_cost as two ranks
// sharing GPU 0 (one node): its JSON goes to the test's output for the GPU check's report. On
// one node a World makes four NCCL communicators per rank (global and local, each a control and
// a blocking one, sharing resources) and none for cross, whose groups have one member each;
// before, it made six.
TEST_F(NcclCollectives, AWorldOnOneNodeMakesFourNcclCommunicators) {
  const auto ranks = cohort_test::run_gpu_ranks(2, "tests/comm/world_cost", {}, {}, "world-cost");
  const std::string failed = cohort_test::ranks_failed(ranks);
  ASSERT_TRUE(failed.empty()) << failed;
  const std::string output = cohort_test::read_file(ranks[0].output);
  const auto json = output.find("{\"program\": \"world_cost\"");
  ASSERT_NE(json, std::string::npos) << output;
  std::printf("%s\n", output.substr(json, output.find('\n', json) - json).c_str());
  std::size_t fours = 0;
  for (auto at = output.find("\"nccl_communicators\": 4}"); at != std::string::npos;
       at = output.find("\"nccl_communicators\": 4}", at + 1)) {
    ++fours;
  }
  EXPECT_EQ(fours, 2u) << "each rank should make 4 NCCL communicators: " << output;
}

// Note [Watchdog device]: two ranks as processes, one per GPU; after collectives that the
// watchdog polled, each process holds a CUDA context on its own GPU only.
TEST_F(NcclCollectives, EachRankCreatesAContextOnItsOwnGpuOnly) {
  const int gpus = cohort::cuda_device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "two GPUs needed (one per rank, to see a context on the other's GPU); " << gpus
                 << " visible";
  }
  const auto ranks = cohort_test::run_process_ranks(
      2, cohort_test::build_path("tests/comm/comm_gpu_worker"), {"contexts"},
      {"COHORT_TIMEOUT=60s", "NCCL_SOCKET_IFNAME=lo", "NCCL_IB_DISABLE=1"}, "comm-gpu-contexts");
  const std::string failed = cohort_test::ranks_failed(ranks);
  EXPECT_TRUE(failed.empty()) << failed;
}

// Registered in every build, so that a host-only build counts it (and SetUp says why it skips).
TEST_F(NcclCollectives, EveryOpMatchesTheHostResult) {
#if COHORT_WITH_CUDA
  const int gpus = cohort::cuda_device_count();
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::nccl;
  options.timeout = std::chrono::seconds(120);
  cohort::run_local(
      gpus,
      [](cohort::World& world) {
        ASSERT_EQ(world.backend(), cohort::Backend::nccl);
        ASSERT_EQ(world.device(), cohort::Device::cuda(world.rank()));
        const cohort::Stream stream = cohort::Stream::create(world.device());
        const int n = world.size();
        const int r = world.rank();
        constexpr std::size_t kCount = 100'003;
        std::vector<float> host(kCount * static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < host.size(); ++i) {
          host[i] = static_cast<float>(r + 1) + static_cast<float>(i % 5);
        }
        float* data = nullptr;
        float* out = nullptr;
        ASSERT_EQ(cudaMalloc(&data, host.size() * sizeof(float)), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&out, host.size() * sizeof(float)), cudaSuccess);
        // In the stream's order: a plain cudaMemcpy runs on the legacy stream, which the
        // communicator's non-blocking stream does not wait for.
        auto upload = [&] {
          ASSERT_EQ(cudaMemcpyAsync(data, host.data(), host.size() * sizeof(float),
                                    cudaMemcpyHostToDevice,
                                    static_cast<cudaStream_t>(stream.native_handle())),
                    cudaSuccess);
        };
        const auto device = world.device();
        const double base = n * (n + 1) / 2.0;

        upload();
        world.comm().all_reduce(cohort::TensorView::of(data, kCount, device), cohort::ReduceOp::sum,
                                stream);
        auto result = to_host(data, kCount, stream);
        for (std::size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(result[i], static_cast<float>(base + n * static_cast<double>(i % 5))) << i;
        }
        upload();
        world.comm().all_reduce(cohort::TensorView::of(data, kCount, device),
                                cohort::TensorView::of(out, kCount, device), cohort::ReduceOp::max,
                                stream);
        result = to_host(out, kCount, stream);
        for (std::size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(result[i], static_cast<float>(n + static_cast<double>(i % 5))) << i;
        }
        upload();
        world.comm().reduce_scatter(
            cohort::TensorView::of(data, kCount * static_cast<std::size_t>(n), device),
            cohort::TensorView::of(out, kCount, device), cohort::ReduceOp::avg, stream);
        result = to_host(out, kCount, stream);
        for (std::size_t i = 0; i < kCount; ++i) {
          const std::size_t global = static_cast<std::size_t>(r) * kCount + i;
          ASSERT_FLOAT_EQ(result[i],
                          static_cast<float>(base / n + static_cast<double>(global % 5)));
        }
        upload();
        world.comm().all_gather(
            cohort::TensorView::of(data, kCount, device),
            cohort::TensorView::of(out, kCount * static_cast<std::size_t>(n), device), stream);
        result = to_host(out, kCount * static_cast<std::size_t>(n), stream);
        for (int q = 0; q < n; ++q) {
          for (std::size_t i = 0; i < kCount; ++i) {
            ASSERT_EQ(result[static_cast<std::size_t>(q) * kCount + i],
                      static_cast<float>(q + 1) + static_cast<float>(i % 5));
          }
        }
        upload();
        world.comm().broadcast(cohort::TensorView::of(data, kCount, device), n - 1, stream);
        result = to_host(data, kCount, stream);
        for (std::size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(result[i], static_cast<float>(n) + static_cast<float>(i % 5));
        }
        world.comm().barrier(stream).wait();
        cudaFree(data);
        cudaFree(out);
      },
      options);
#endif
}

TEST_F(NcclCollectives, ACollectiveInsideAGraphCaptureIsRefusedClearly) {
#if COHORT_WITH_CUDA
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::nccl;
  options.timeout = std::chrono::seconds(60);
  cohort::run_local(
      1,
      [](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(world.device());
        float* data = nullptr;
        ASSERT_EQ(cudaMalloc(&data, 64 * sizeof(float)), cudaSuccess);
        auto cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
        ASSERT_EQ(cudaStreamBeginCapture(cuda_stream, cudaStreamCaptureModeThreadLocal),
                  cudaSuccess);
        EXPECT_TRUE(stream.capturing());
        try {
          world.comm().all_reduce(cohort::TensorView::of(data, 64, world.device()),
                                  cohort::ReduceOp::sum, stream);
          ADD_FAILURE() << "a collective was captured into a CUDA graph";
        } catch (const cohort::InvalidArgument& error) {
          EXPECT_NE(std::string(error.what()).find("CUDA graph"), std::string::npos)
              << error.what();
        }
        cudaGraph_t graph = nullptr;
        EXPECT_EQ(cudaStreamEndCapture(cuda_stream, &graph), cudaSuccess);
        if (graph != nullptr) {
          (void)cudaGraphDestroy(graph);
        }
        EXPECT_FALSE(stream.capturing());
        // Refused before anything was enqueued: the communicator still works.
        world.comm()
            .all_reduce(cohort::TensorView::of(data, 64, world.device()), cohort::ReduceOp::sum,
                        stream)
            .wait();
        stream.synchronize();
        (void)cudaFree(data);
      },
      options);
#endif
}

// Note [Watchdog and graph capture]: a collective in flight on stream A while this thread records
// a graph on stream B in cudaStreamCaptureModeGlobal (most frameworks' default) for four of the
// watchdog's 50 ms ticks. The watchdog polls the collective all along; its queries must neither
// invalidate the capture nor be taken for a device fault: the graph instantiates and runs, the
// communicator is not aborted, and the collective completes with the right result.
TEST_F(NcclCollectives, AGlobalCaptureBesideACollectiveInFlight) {
#if COHORT_WITH_CUDA
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::nccl;
  options.timeout = std::chrono::seconds(60);
  cohort::run_local(
      1,
      [](cohort::World& world) {
        const cohort::Stream a = cohort::Stream::create(world.device());
        const cohort::Stream b = cohort::Stream::create(world.device());
        constexpr std::size_t kCount = 1024;
        float* data = nullptr;
        float* captured = nullptr;
        ASSERT_EQ(cudaMalloc(&data, kCount * sizeof(float)), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&captured, kCount * sizeof(float)), cudaSuccess);
        const std::vector<float> values(kCount, 3.0f);
        cohort::detail::write_now(data, values.data(), kCount * sizeof(float), a);
        // Stream A is held until the capture has ended, so the collective stays in flight (and
        // polled by the watchdog) all through it.
        std::atomic<bool> release{false};
        a.enqueue([&release] {
          while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
        cohort::Work work = world.comm().all_reduce(
            cohort::TensorView::of(data, kCount, world.device()), cohort::ReduceOp::sum, a);
        auto cuda_b = static_cast<cudaStream_t>(b.native_handle());
        ASSERT_EQ(cudaStreamBeginCapture(cuda_b, cudaStreamCaptureModeGlobal), cudaSuccess);
        EXPECT_EQ(cudaMemsetAsync(captured, 0, kCount * sizeof(float), cuda_b), cudaSuccess);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // four watchdog ticks
        cudaGraph_t graph = nullptr;
        const cudaError_t ended = cudaStreamEndCapture(cuda_b, &graph);
        EXPECT_EQ(ended, cudaSuccess) << cudaGetErrorName(ended) << ": the capture was invalidated";
        cudaGraphExec_t exec = nullptr;
        if (graph != nullptr) {
          EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
          if (exec != nullptr) {
            EXPECT_EQ(cudaGraphLaunch(exec, cuda_b), cudaSuccess);
          }
        }
        b.synchronize();
        EXPECT_FALSE(world.comm().aborted()) << world.comm().name() << " was aborted";
        EXPECT_FALSE(work.done());  // still held on stream A
        release.store(true);
        EXPECT_NO_THROW(work.wait());
        EXPECT_FALSE(world.comm().aborted());
        const std::vector<float> result = to_host(data, kCount, a);
        EXPECT_EQ(result, values);  // one rank: the sum is its own
        if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
        if (graph != nullptr) (void)cudaGraphDestroy(graph);
        (void)cudaFree(data);
        (void)cudaFree(captured);
      },
      options);
#endif
}

TEST_F(NcclCollectives, ASplitChildWorksWhateverDeviceIsCurrentWhenItIsMade) {
#if COHORT_WITH_CUDA
  const int gpus = cohort::cuda_device_count();
  if (gpus < 2) {
    GTEST_SKIP() << "two GPUs needed (to make another device current); " << gpus << " visible";
  }
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::nccl;
  options.timeout = std::chrono::seconds(120);
  cohort::run_local(
      gpus,
      [gpus](cohort::World& world) {
        // Another rank's device is current while the child is made: its barrier scratch must
        // still land on this rank's device, or the child's barrier fails in NCCL.
        ASSERT_EQ(cudaSetDevice((world.rank() + 1) % gpus), cudaSuccess);
        std::unique_ptr<cohort::Communicator> child = world.comm().split(0, world.rank(), "child");
        ASSERT_EQ(cudaSetDevice(world.device().index()), cudaSuccess);
        const cohort::Stream stream = cohort::Stream::create(world.device());
        child->barrier(stream).wait();
        stream.synchronize();
      },
      options);
#endif
}

// WorldOptions::device: a world binds the GPU it asks for, not its local rank's (with two GPUs or
// more, the last one instead of cuda:0), and a GPU that is not visible is refused by name.
TEST_F(NcclCollectives, AWorldWorksOnTheGpuItAsksFor) {
#if COHORT_WITH_CUDA
  const int gpus = cohort::cuda_device_count();
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::nccl;
  options.timeout = std::chrono::seconds(60);
  options.device = cohort::Device::cuda(gpus - 1);
  cohort::run_local(
      1,
      [gpus](cohort::World& world) {
        EXPECT_EQ(world.local_rank(), 0);
        EXPECT_EQ(world.device(), cohort::Device::cuda(gpus - 1));
        const cohort::Stream stream = cohort::Stream::create(world.device());
        world.comm().barrier(stream).wait();
        stream.synchronize();
      },
      options);
  options.device = cohort::Device::cuda(gpus);
  try {
    cohort::run_local(
        1, [](cohort::World&) { FAIL() << "the world formed"; }, options);
    FAIL() << "no error";
  } catch (const cohort::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("visible GPUs"), std::string::npos) << error.what();
  }
#endif
}

}  // namespace
