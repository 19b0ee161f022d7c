// Every collective, dtype and reduce op on the host backend (each transport), with ranks as
// threads, over world sizes 1 to 8, with counts 0, 1, odd and large, against closed-form results.
#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>

#include "support/test_helpers.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using cohort_test::from_double;
using cohort_test::to_double;
using ::testing::HasSubstr;

constexpr std::size_t kCounts[] = {0, 1, 1001, 65537};
constexpr cohort::ReduceOp kOps[] = {cohort::ReduceOp::sum, cohort::ReduceOp::avg,
                                     cohort::ReduceOp::min, cohort::ReduceOp::max};

cohort::WorldOptions host_options() {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  options.timeout = std::chrono::seconds(60);
  return options;
}

// Rank r contributes (r + 1) + (i % 3) at element i: small integers, exact in every dtype, with
// sums that fit in u8 for 8 ranks.
double contribution(int rank, std::size_t i) {
  return rank + 1 + static_cast<double>(i % 3);
}

double expected(cohort::ReduceOp op, int ranks, std::size_t i, bool integer) {
  const double k = static_cast<double>(i % 3);
  const double sum = ranks * (ranks + 1) / 2.0 + ranks * k;
  switch (op) {
    case cohort::ReduceOp::sum:
      return sum;
    case cohort::ReduceOp::avg:
      return integer ? std::trunc(sum / ranks) : sum / ranks;
    case cohort::ReduceOp::min:
      return 1 + k;
    case cohort::ReduceOp::max:
      return ranks + k;
  }
  return 0;
}

template <typename T>
std::vector<T> filled(int rank, std::size_t count) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) {
    data[i] = from_double<T>(contribution(rank, i));
  }
  return data;
}

/// Checks every collective for one dtype on one world; returns the number of wrong elements.
template <typename T>
void check_dtype(cohort::World& world, const cohort::Stream& stream) {
  constexpr bool kInteger = std::is_integral_v<T>;
  const int n = world.size();
  const int r = world.rank();
  const std::string dtype(cohort::to_string(cohort::dtype_of<T>()));
  for (std::size_t count : kCounts) {
    for (cohort::ReduceOp op : kOps) {
      const std::string what = dtype + " " + std::string(cohort::to_string(op)) + " count " +
                               std::to_string(count) + " on " + std::to_string(n) + " ranks";
      // In place.
      std::vector<T> data = filled<T>(r, count);
      world.comm().all_reduce(std::span<T>(data), op, stream);
      stream.synchronize();
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(to_double(data[i]), expected(op, n, i, kInteger))
            << "all_reduce in place, " << what << ", element " << i;
      }
      // Out of place: the input stays as it was.
      const std::vector<T> input = filled<T>(r, count);
      std::vector<T> copy = input;
      std::vector<T> output(count, from_double<T>(99));
      world.comm().all_reduce(std::span<T>(copy), std::span<T>(output), op, stream).wait();
      stream.synchronize();
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(to_double(output[i]), expected(op, n, i, kInteger))
            << "all_reduce out of place, " << what << ", element " << i;
        ASSERT_EQ(to_double(copy[i]), to_double(input[i])) << "input changed, " << what;
      }
      // Reduce-scatter: each rank keeps its block of the reduced vector of n * count elements.
      std::vector<T> whole = filled<T>(r, count * static_cast<std::size_t>(n));
      std::vector<T> block(count);
      world.comm().reduce_scatter(std::span<T>(whole), std::span<T>(block), op, stream);
      stream.synchronize();
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t global = static_cast<std::size_t>(r) * count + i;
        ASSERT_EQ(to_double(block[i]), expected(op, n, global, kInteger))
            << "reduce_scatter, " << what << ", element " << i;
      }
    }
    // All-gather: rank q's block is q's contribution.
    std::vector<T> mine = filled<T>(r, count);
    std::vector<T> gathered(count * static_cast<std::size_t>(n));
    world.comm().all_gather(std::span<T>(mine), std::span<T>(gathered), stream);
    stream.synchronize();
    for (int q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(to_double(gathered[static_cast<std::size_t>(q) * count + i]), contribution(q, i))
            << "all_gather " << dtype << " count " << count << ", block " << q;
      }
    }
    // Broadcast from the last rank (and from 0 in one-rank worlds).
    const int root = n - 1;
    std::vector<T> shared = filled<T>(r, count);
    world.comm().broadcast(std::span<T>(shared), root, stream);
    stream.synchronize();
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(to_double(shared[i]), contribution(root, i))
          << "broadcast " << dtype << " count " << count << " from " << root;
    }
  }
}

class EveryCollective : public ::testing::TestWithParam<int> {};

TEST_P(EveryCollective, MatchesClosedFormResults) {
  const int ranks = GetParam();
  cohort::run_local(
      ranks,
      [](cohort::World& world) {
        EXPECT_EQ(world.backend(), cohort_test::expected_host_backend());
        EXPECT_EQ(world.device(), cohort::Device::host());
        EXPECT_EQ(world.comm().size(), world.size());
        EXPECT_EQ(world.comm().rank(), world.rank());
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        check_dtype<float>(world, stream);
        check_dtype<double>(world, stream);
        check_dtype<cohort::half>(world, stream);
        check_dtype<cohort::bfloat16>(world, stream);
        check_dtype<std::int32_t>(world, stream);
        check_dtype<std::int64_t>(world, stream);
        check_dtype<std::uint8_t>(world, stream);
        world.comm().barrier(stream).wait();
      },
      host_options());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, EveryCollective, ::testing::Range(1, 9),
                         [](const auto& param_info) {
                           return std::to_string(param_info.param) + "ranks";
                         });

// All-reduces of several chunks and a part of one, at each chunk size the shared-memory path
// picks (64, 128, 256 and 512 KiB: a quarter of the all-reduce), and of several slots: every
// chunk and every rank's share of it lands in the right place, exactly.
TEST(World, AllReduceOfSeveralChunksIsExact) {
  const std::size_t counts[] = {
      (std::size_t{300} << 10) / sizeof(float) + 1, (std::size_t{700} << 10) / sizeof(float) + 3,
      (std::size_t{1} << 20) / sizeof(float) + 5, (std::size_t{10} << 20) / sizeof(float) + 7};
  cohort::run_local(
      3,
      [&](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        for (const std::size_t count : counts) {
          std::vector<float> values(count);
          for (std::size_t i = 0; i < count; ++i) {
            values[i] = static_cast<float>((i % 1009) * static_cast<std::size_t>(world.rank() + 1));
          }
          world.comm().all_reduce(std::span<float>(values), cohort::ReduceOp::sum, stream);
          stream.synchronize();
          for (std::size_t i = 0; i < count; ++i) {
            ASSERT_EQ(values[i], static_cast<float>((i % 1009) * 6))
                << "element " << i << " of " << count;
          }
        }
      },
      host_options());
}

// 6 ranks as 3 simulated hosts of 2: the global communicator all-reduces hierarchically (shared
// memory within a host, Gloo across) unless Gloo is forced; every collective stays exact.
TEST(World, HostsWithSeveralRanksEachGetTheHierarchicalPath) {
  cohort::WorldOptions options = host_options();
  options.ranks_per_node = 2;
  cohort::run_local(
      6,
      [](cohort::World& world) {
        const bool gloo = cohort_test::expected_host_backend() == cohort::Backend::gloo;
        EXPECT_EQ(world.backend(), gloo ? cohort::Backend::gloo : cohort::Backend::hierarchical);
        EXPECT_EQ(world.local().backend(), gloo ? cohort::Backend::gloo : cohort::Backend::shm);
        EXPECT_EQ(world.cross().backend(), cohort::Backend::gloo);
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        check_dtype<float>(world, stream);
        check_dtype<cohort::bfloat16>(world, stream);
        check_dtype<std::int32_t>(world, stream);
        check_dtype<std::uint8_t>(world, stream);
      },
      options);
}

// Note [The backend, decided once] (world.cpp): the old name of BackendChoice::host still
// compiles, with a deprecation warning, and still means the host; the world's backend, decided
// before any communicator existed, is its global communicator's.
TEST(World, TheOldBackendNameStillMeansTheHost) {
  cohort::WorldOptions options = host_options();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  options.backend = cohort::BackendChoice::gloo;
#pragma GCC diagnostic pop
  EXPECT_EQ(options.backend, cohort::BackendChoice::host);
  cohort::run_local(
      2,
      [](cohort::World& world) {
        EXPECT_TRUE(world.device().is_host());
        EXPECT_EQ(world.backend(), cohort_test::expected_host_backend());
        EXPECT_EQ(world.comm().backend(), world.backend());
      },
      options);
}

// WorldOptions::device picks the GPU of an NCCL world; on the host backend a GPU asked for is a
// mistake, said before any communicator exists (the NCCL side: NcclCollectives.
// AWorldWorksOnTheGpuItAsksFor).
TEST(World, AGpuIsChosenOnlyForTheNcclBackend) {
  cohort::WorldOptions options = host_options();
  options.device = cohort::Device::cuda(0);
  try {
    cohort::run_local(
        2, [](cohort::World&) { FAIL() << "the world formed"; }, options);
    FAIL() << "no error";
  } catch (const cohort::InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("WorldOptions::device asks for cuda:0"));
    EXPECT_THAT(error.what(), HasSubstr("runs on the host backend"));
  }
  options.device = cohort::Device::host();  // the host's own device is no mistake
  cohort::run_local(
      2, [](cohort::World& world) { EXPECT_TRUE(world.device().is_host()); }, options);
}

TEST(World, RanksAndSubGroupsOfSimulatedNodes) {
  cohort::WorldOptions options = host_options();
  options.ranks_per_node = 3;  // 7 ranks: nodes of 3, 3 and 1
  cohort::run_local(
      7,
      [](cohort::World& world) {
        const int r = world.rank();
        EXPECT_EQ(world.size(), 7);
        EXPECT_EQ(world.num_nodes(), 3);
        EXPECT_EQ(world.node_rank(), r / 3);
        EXPECT_EQ(world.local_rank(), r % 3);
        EXPECT_EQ(world.local_world_size(), r < 6 ? 3 : 1);
        EXPECT_EQ(world.local().size(), world.local_world_size());
        EXPECT_EQ(world.local().rank(), world.local_rank());
        EXPECT_EQ(world.cross().size(), r % 3 == 0 ? 3 : 2);
        EXPECT_EQ(world.cross().rank(), world.node_rank());
        EXPECT_EQ(world.local().name(), "local");

        // Sums over each group name the group's members.
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        std::vector<std::int64_t> value{r};
        world.local().all_reduce(std::span<std::int64_t>(value), cohort::ReduceOp::sum, stream);
        stream.synchronize();
        const int node_first = world.node_rank() * 3;
        std::int64_t local_sum = 0;
        for (int q = node_first; q < node_first + world.local_world_size(); ++q) local_sum += q;
        EXPECT_EQ(value[0], local_sum);

        value[0] = r;
        world.cross().all_reduce(std::span<std::int64_t>(value), cohort::ReduceOp::sum, stream);
        stream.synchronize();
        std::int64_t cross_sum = 0;
        for (int q = world.local_rank(); q < 7; q += 3) cross_sum += q;
        EXPECT_EQ(value[0], cross_sum);
      },
      options);
}

// Rank 0 leaves as soon as its second split returns, destroying its communicators while the
// others still connect theirs: creation must end on every member before any can tear it down
// (Note [Connecting a Gloo mesh]). Before that, about one run in 30 hung in Gloo's connect.
TEST(Communicator, SplitByParityWithReversedKeys) {
  cohort::run_local(
      5,
      [](cohort::World& world) {
        const int r = world.rank();
        auto group = world.comm().split(r % 2, -r, "parity");
        ASSERT_NE(group, nullptr);
        const int members = r % 2 == 0 ? 3 : 2;
        EXPECT_EQ(group->size(), members);
        // Keys -r: the highest rank comes first.
        std::vector<int> evens{4, 2, 0};
        std::vector<int> odds{3, 1};
        const auto& order = r % 2 == 0 ? evens : odds;
        EXPECT_EQ(order[static_cast<std::size_t>(group->rank())], r);
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        std::vector<std::int32_t> gathered(static_cast<std::size_t>(members));
        std::vector<std::int32_t> mine{r};
        group->all_gather(std::span<std::int32_t>(mine), std::span<std::int32_t>(gathered), stream);
        stream.synchronize();
        EXPECT_EQ(std::vector<int>(gathered.begin(), gathered.end()), order);
        auto nobody = world.comm().split(r == 0 ? -1 : 1, 0, "all-but-0");
        EXPECT_EQ(nobody == nullptr, r == 0);
      },
      host_options());
}

TEST(Communicator, StreamOrderingWithoutWaiting) {
  // Compute on one host stream, communicate on another joined by events, never blocking the
  // issuing thread: the pattern of gradient buckets overlapped with backward. The compute task
  // does not finish until the issuing thread has issued everything, so a call that waited for
  // the compute stream would hold it up: the task gives up after 20 s and says so.
  cohort::run_local(
      4,
      [](cohort::World& world) {
        const cohort::Stream compute = cohort::Stream::create(cohort::Device::host());
        const cohort::Stream comm = cohort::Stream::create(cohort::Device::host());
        std::vector<float> grads(4096, 0.0f);
        std::mutex mutex;
        std::condition_variable changed;
        bool issued = false;
        bool issuer_was_blocked = false;
        compute.enqueue([&] {
          std::unique_lock lock(mutex);
          issuer_was_blocked =
              !changed.wait_for(lock, std::chrono::seconds(20), [&] { return issued; });
          std::fill(grads.begin(), grads.end(), static_cast<float>(world.rank()));
        });
        cohort::Event produced = cohort::Event::create(cohort::Device::host());
        produced.record(compute);
        comm.wait(produced);
        cohort::Work work =
            world.comm().all_reduce(std::span<float>(grads), cohort::ReduceOp::sum, comm);
        cohort::Event reduced = cohort::Event::create(cohort::Device::host());
        reduced.record(comm);
        compute.wait(reduced);
        float seen = -1.0f;
        compute.enqueue([&] { seen = grads[17]; });
        EXPECT_FALSE(work.done()) << "the all-reduce finished before its input was produced";
        {
          std::lock_guard lock(mutex);
          issued = true;
        }
        changed.notify_all();
        compute.synchronize();
        EXPECT_FALSE(issuer_was_blocked) << "issuing the collective waited for the compute stream";
        EXPECT_EQ(seen, 6.0f);  // 0 + 1 + 2 + 3
        EXPECT_TRUE(work.done());
        EXPECT_GT(work.sequence(), 0u);
        EXPECT_EQ(work.op(), cohort::CollectiveOp::all_reduce);
      },
      host_options());
}

TEST(Communicator, BadArgumentsAreClearErrorsAndChangeNothing) {
  cohort::run_local(
      2,
      [](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        std::vector<float> a(8, 1.0f), b(7, 5.0f);
        try {
          world.comm().all_reduce(std::span<float>(a), std::span<float>(b), cohort::ReduceOp::sum,
                                  stream);
          ADD_FAILURE() << "mismatched counts were accepted";
        } catch (const cohort::InvalidArgument& error) {
          EXPECT_THAT(error.what(), HasSubstr("same count"));
          EXPECT_THAT(error.what(), HasSubstr("8 and 7"));
        }
        std::vector<double> d(8);
        EXPECT_THROW(world.comm().all_reduce(std::span<float>(a), std::span<double>(d),
                                             cohort::ReduceOp::sum, stream),
                     cohort::InvalidArgument);
        std::vector<float> small(3);
        EXPECT_THROW(world.comm().reduce_scatter(std::span<float>(a), std::span<float>(small),
                                                 cohort::ReduceOp::sum, stream),
                     cohort::InvalidArgument);
        EXPECT_THROW(world.comm().all_gather(std::span<float>(a), std::span<float>(b), stream),
                     cohort::InvalidArgument);
        EXPECT_THROW(world.comm().broadcast(std::span<float>(a), 2, stream),
                     cohort::InvalidArgument);
        EXPECT_THROW(world.comm().all_reduce(
                         cohort::TensorView(nullptr, 4, cohort::DType::f32, cohort::Device::host()),
                         cohort::ReduceOp::sum, stream),
                     cohort::InvalidArgument);
        EXPECT_THROW(world.comm().all_reduce(cohort::TensorView(a.data(), 8, cohort::DType::f32,
                                                                cohort::Device::cuda(0)),
                                             cohort::ReduceOp::sum, stream),
                     cohort::InvalidArgument);
        // Nothing was written and nothing was issued: the sequence numbers still agree, and a
        // real call works.
        stream.synchronize();
        EXPECT_EQ(a, std::vector<float>(8, 1.0f));
        EXPECT_EQ(b, std::vector<float>(7, 5.0f));
        world.comm().all_reduce(std::span<float>(a), cohort::ReduceOp::sum, stream).wait();
        stream.synchronize();
        EXPECT_EQ(a[0], 2.0f);
        EXPECT_EQ(world.comm().recent_collectives().size(), 1u);
      },
      host_options());
}

TEST(Communicator, FlightRecorderKeepsTheLast64) {
  cohort::run_local(
      2,
      [](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        std::vector<std::int32_t> x(3, 1);
        for (int i = 0; i < 70; ++i) {
          world.comm().all_reduce(std::span<std::int32_t>(x), cohort::ReduceOp::max, stream);
        }
        stream.synchronize();
        const auto records = world.comm().recent_collectives();
        ASSERT_EQ(records.size(), 64u);
        EXPECT_EQ(records.front().sequence, 7u);
        EXPECT_EQ(records.back().sequence, 70u);
        EXPECT_EQ(records.back().count, 3u);
        EXPECT_EQ(records.back().bytes, 12u);
        EXPECT_EQ(records.back().state, cohort::CollectiveRecord::State::completed);
        EXPECT_THAT(records.back().describe(), HasSubstr("#70 all_reduce 3 x i32 (12 B) max"));
      },
      host_options());
}

}  // namespace
