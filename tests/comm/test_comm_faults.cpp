// What happens when ranks misbehave: a rank that never arrives, a rank that fails, mismatched
// calls, a rank that never joins. Ranks are threads; see test_comm_processes for killed processes.
#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/launch/memory_store.hpp>

#include "support/process_ranks.hpp"
#include "support/test_helpers.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

cohort::WorldOptions options_with_timeout(std::chrono::milliseconds timeout) {
  cohort::WorldOptions options;
  options.backend = cohort::BackendChoice::host;
  options.timeout = timeout;
  return options;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Faults, RankThatNeverArrivesIsNamedAtTheDeadline) {
  const auto timeout = std::chrono::milliseconds(2500);
  std::string message;
  // Each rank's time from issuing the collective rank 2 skipped until it failed. The first rank
  // to fail was failed by its own deadline; the others may hear of it a little sooner.
  std::vector<double> waited(4, 0.0);
  try {
    cohort::run_local(
        4,
        [&](cohort::World& world) {
          const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
          std::vector<float> data(1024, 1.0f);
          world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream).wait();
          if (world.rank() == 2) {
            // Rank 2 skips the second collective and waits for the others to give up.
            while (!world.comm().aborted()) {
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            return;
          }
          const auto issued = Clock::now();
          try {
            world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream).wait();
          } catch (const cohort::Error&) {
            waited[static_cast<std::size_t>(world.rank())] = seconds_since(issued);
            throw;
          }
        },
        options_with_timeout(timeout));
    FAIL() << "the collective that rank 2 skipped did not fail";
  } catch (const cohort::TimeoutError& error) {
    message = error.what();
  }
  // The deadline is what fired: not before it (a watchdog at half its deadline would pass an
  // upper bound alone), and not long after (it polls; diagnosis waits up to 1.5 s).
  EXPECT_GE(*std::max_element(waited.begin(), waited.end()), 2.5);
  for (int r : {0, 1, 3}) {
    EXPECT_LT(waited[static_cast<std::size_t>(r)], 2.5 + 5.0) << "rank " << r;
  }
  EXPECT_THAT(message, HasSubstr("#2 all_reduce 1024 x f32 (4.00 KiB) sum"));
  EXPECT_THAT(message, HasSubstr("did not complete within 2500 ms"));
  EXPECT_THAT(message, HasSubstr("ranks that had not arrived: rank 2 (last issued #1)"));
  // The rank's recent collectives are in a file the error names (Note [One report per failure]),
  // beside the versions.
  std::smatch recent;
  ASSERT_TRUE(std::regex_search(
      message, recent, std::regex(R"(Recent collectives of rank \d \(([^\n]*)\): (/\S+))")))
      << message;
  EXPECT_THAT(
      recent[1].str(),
      HasSubstr(cohort_test::expected_host_backend() == cohort::Backend::gloo ? "Gloo 0.5"
                                                                              : "shared memory"));
  EXPECT_THAT(cohort_test::read_file(recent[2].str()),
              HasSubstr("#1 all_reduce 1024 x f32 (4.00 KiB) sum: completed"));
}

TEST(Faults, RankThatRaisesStopsTheOthersLongBeforeTheDeadline) {
  const auto start = Clock::now();
  try {
    cohort::run_local(
        4,
        [](cohort::World& world) {
          const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
          std::vector<double> data(100, 1.0);
          if (world.rank() == 1) {
            throw std::runtime_error("out of data on rank 1");
          }
          world.comm().all_reduce(std::span<double>(data), cohort::ReduceOp::sum, stream).wait();
        },
        options_with_timeout(std::chrono::seconds(60)));
    FAIL() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "out of data on rank 1");  // the first error, not its echoes
  }
  EXPECT_LT(seconds_since(start), 10.0);
}

// The waits of the others end soon after the failure, with their buffers given back: the abort
// that the failure causes ends Gloo's operations at once (Note [Aborting Gloo]), which would
// otherwise block until Gloo's own timeout (here 62 s). Once, each wait gave up on the buffers only
// after kReleasePatience (4 s), and then the caller freed a vector Gloo still reduced into
// (ThreadSanitizer saw it in CI).
TEST(Faults, TheOthersSeeWhichRankFailed) {
  std::vector<std::string> messages(3);
  std::vector<double> waited(3, 0.0);
  try {
    cohort::run_local(
        3,
        [&](cohort::World& world) {
          const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
          std::vector<std::int32_t> data(10, 1);
          if (world.rank() == 0) {
            throw std::runtime_error("bad batch");
          }
          const auto start = std::chrono::steady_clock::now();
          try {
            world.comm()
                .all_reduce(std::span<std::int32_t>(data), cohort::ReduceOp::sum, stream)
                .wait();
          } catch (const cohort::Error& error) {
            messages[static_cast<std::size_t>(world.rank())] = error.what();
            waited[static_cast<std::size_t>(world.rank())] = seconds_since(start);
            throw;
          }
        },
        options_with_timeout(std::chrono::seconds(60)));
  } catch (const std::runtime_error&) {
  }
  for (int r : {1, 2}) {
    EXPECT_THAT(messages[static_cast<std::size_t>(r)], HasSubstr("rank 0 raised: bad batch"))
        << "rank " << r;
    EXPECT_LT(waited[static_cast<std::size_t>(r)], 3.0)
        << "rank " << r << " waited for buffers the backend should have given back";
  }
}

TEST(Faults, MismatchedCallsAreCaughtByTheDebugCheck) {
  cohort::WorldOptions options = options_with_timeout(std::chrono::seconds(30));
  options.debug_collectives = true;
  std::string message;
  try {
    cohort::run_local(
        3,
        [](cohort::World& world) {
          const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
          std::vector<float> data(world.rank() == 1 ? 5 : 4, 1.0f);
          world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream).wait();
        },
        options);
    FAIL() << "mismatched counts were not caught";
  } catch (const cohort::InvalidArgument& error) {
    message = error.what();
  }
  EXPECT_THAT(message, HasSubstr("differs between ranks"));
  EXPECT_THAT(message, HasSubstr("count=5"));
  EXPECT_THAT(message, HasSubstr("count=4"));
  EXPECT_THAT(message, HasSubstr("rank 1"));
}

// Without the debug check, ranks that call different counts fail, naming both calls, on every
// transport: shared memory compares the calls each round (Note [Shared-memory call signatures]);
// over Gloo the calls' messages meet nowhere (Note [Gloo tags from the call]), so they fail at
// the deadline and the diagnosis names them (Note [Different calls at one point]). Before, Gloo
// ended the process from its own thread on the longer message.
TEST(Faults, RanksThatCallDifferentCountsAreNamedWithBothCalls) {
  const auto timeout = std::chrono::milliseconds(2000);
  for (const cohort::CollectiveOp op :
       {cohort::CollectiveOp::all_reduce, cohort::CollectiveOp::all_gather}) {
    SCOPED_TRACE(std::string(cohort::to_string(op)));
    std::vector<std::string> messages(3);
    std::vector<double> waited(3, -1.0);
    try {
      cohort::run_local(
          3,
          [&](cohort::World& world) {
            const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
            const auto r = static_cast<std::size_t>(world.rank());
            const std::size_t count = world.rank() == 1 ? 5 : 4;
            std::vector<float> data(count, 1.0f);
            std::vector<float> gathered(count * 3);
            world.comm().barrier(stream).wait();
            const auto issued = Clock::now();
            try {
              if (op == cohort::CollectiveOp::all_reduce) {
                world.comm()
                    .all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream)
                    .wait();
              } else {
                world.comm()
                    .all_gather(std::span<float>(data), std::span<float>(gathered), stream)
                    .wait();
              }
            } catch (const cohort::Error& error) {
              waited[r] = seconds_since(issued);
              messages[r] = error.what();
              throw;
            }
          },
          options_with_timeout(timeout));
      ADD_FAILURE() << "mismatched counts were not caught";
    } catch (const cohort::Error&) {
    }
    const std::string called = std::string(cohort::to_string(op)) + " of ";
    for (std::size_t r = 0; r < 3; ++r) {
      EXPECT_GE(waited[r], 0.0) << "rank " << r << " did not fail";
      EXPECT_LT(waited[r], 2.0 + 5.0) << "rank " << r;
      EXPECT_THAT(messages[r], HasSubstr(called + "5 x f32")) << "rank " << r;
      EXPECT_THAT(messages[r], HasSubstr(called + "4 x f32")) << "rank " << r;
      EXPECT_THAT(messages[r], HasSubstr("rank 1")) << "rank " << r;
    }
  }
}

TEST(Faults, DebugCheckPassesMatchingCalls) {
  cohort::WorldOptions options = options_with_timeout(std::chrono::seconds(30));
  options.debug_collectives = true;
  cohort::run_local(
      3,
      [](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        std::vector<float> data(6, static_cast<float>(world.rank() + 1));
        for (int i = 0; i < 5; ++i) {
          world.comm().all_reduce(std::span<float>(data), cohort::ReduceOp::max, stream);
        }
        stream.synchronize();
        EXPECT_EQ(data, std::vector<float>(6, 3.0f)) << "rank " << world.rank();
        EXPECT_EQ(world.comm().recent_collectives().size(), 5u);
      },
      options);
}

TEST(Faults, RankThatNeverJoinsIsNamed) {
  auto store = std::make_shared<cohort::MemoryStore>();
  std::vector<std::string> messages(2);
  std::vector<double> waited(2, -1.0);
  std::vector<std::thread> ranks;
  // One start for both: each rank's deadline runs from its own init, which is later, so the
  // failure that ends the first is at least 800 ms after it, and the other rank may end on that
  // failure a little before its own deadline.
  const auto start = Clock::now();
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      cohort::WorldOptions options = options_with_timeout(std::chrono::milliseconds(800));
      cohort::LaunchInfo launch;
      launch.rank = r;
      launch.world_size = 3;  // rank 2 never starts
      launch.local_world_size = 3;
      launch.local_rank = r;
      options.launch = launch;
      options.store = store;
      // The first rank to reach its deadline throws TimeoutError and publishes it; the other
      // may see that failure first (a cohort::Error naming it) when the machine is loaded.
      try {
        cohort::World world = cohort::init(options);
      } catch (const cohort::Error& error) {
        messages[static_cast<std::size_t>(r)] = error.what();
        waited[static_cast<std::size_t>(r)] = seconds_since(start);
      }
    });
  }
  for (auto& rank : ranks) rank.join();
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_THAT(messages[r], HasSubstr("rank 2 never arrived"));
    EXPECT_GE(waited[r], 0.8) << "rank " << r << " gave up before its 800 ms deadline";
    EXPECT_LT(waited[r], 5.0) << "rank " << r;
  }
}

/// A store that never records the keys ending in `dropped`: a member whose messages are lost.
class DroppingStore final : public cohort::ForwardingStore {
 public:
  DroppingStore(std::shared_ptr<cohort::Store> base, std::string dropped)
      : ForwardingStore(std::move(base), "DroppingStore"), dropped_(std::move(dropped)) {}
  void set(std::string_view key, std::string_view value) override {
    if (!key.ends_with(dropped_)) {
      ForwardingStore::set(key, value);
    }
  }
  std::unique_ptr<cohort::Store> clone() const override {
    return std::make_unique<DroppingStore>(std::shared_ptr<cohort::Store>(base()->clone()),
                                           dropped_);
  }
  std::string describe() const override { return "DroppingStore"; }

 private:
  std::string dropped_;
};

// Rank 3's Gloo addresses never arrive: every rank, rank 3 included, waits for them in the
// address exchange (Note [Connecting a Gloo mesh]) and must fail at its deadline naming rank 3,
// not several deadlines later inside Gloo's connect.
// Gloo is forced: ranks on one host would otherwise meet through shared memory, without Gloo
// addresses (a rank that never arrives there: RankThatNeverArrivesIsNamedAtTheDeadline).
TEST(Faults, ConnectThatNeverCompletesEndsAtTheDeadline) {
  constexpr auto kTimeout = std::chrono::milliseconds(1500);
  auto store = std::make_shared<DroppingStore>(std::make_shared<cohort::MemoryStore>(),
                                               "/global/gloo/address/0/3");
  constexpr int kRanks = 4;
  std::vector<std::string> messages(kRanks);
  std::vector<double> waited(kRanks, -1.0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      const auto start = Clock::now();
      cohort::WorldOptions options = options_with_timeout(kTimeout);
      cohort::LaunchInfo launch;
      launch.rank = r;
      launch.world_size = kRanks;
      launch.local_world_size = kRanks;
      launch.local_rank = r;
      options.launch = launch;
      options.store = store;
      options.host_transport = cohort::HostTransport::gloo;
      try {
        cohort::World world = cohort::init(options);
        messages[static_cast<std::size_t>(r)] = "init succeeded";
      } catch (const cohort::Error& error) {
        messages[static_cast<std::size_t>(r)] = error.what();
      }
      waited[static_cast<std::size_t>(r)] = seconds_since(start);
    });
  }
  for (auto& rank : ranks) rank.join();
  for (std::size_t r = 0; r < kRanks; ++r) {
    EXPECT_THAT(messages[r], HasSubstr("rank 3")) << "rank " << r;
    EXPECT_GE(waited[r], 1.4) << "rank " << r << " gave up before its 1.5 s deadline";
    EXPECT_LT(waited[r], 5.0) << "rank " << r << ": " << messages[r];
  }
  for (std::size_t r = 0; r < kRanks; ++r) {
    EXPECT_THAT(messages[r], HasSubstr("rank 3 never arrived")) << "rank " << r;
  }
}

TEST(Faults, AbortFailsLaterCollectivesAtOnce) {
  cohort::run_local(
      2,
      [](cohort::World& world) {
        const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
        world.comm().barrier(stream).wait();
        world.local().abort("the test said so");
        EXPECT_TRUE(world.local().aborted());
        std::vector<float> data(3, 1.0f);
        const auto start = Clock::now();
        try {
          world.local().all_reduce(std::span<float>(data), cohort::ReduceOp::sum, stream);
          ADD_FAILURE() << "an aborted communicator accepted a collective";
        } catch (const cohort::Error& error) {
          EXPECT_THAT(error.what(), HasSubstr("the test said so"));
        }
        // At once: no wait for the peer and nothing near the 30 s deadline.
        EXPECT_LT(seconds_since(start), 1.0);
        EXPECT_EQ(data, std::vector<float>(3, 1.0f));
      },
      options_with_timeout(std::chrono::seconds(30)));
}

// Note [Aborting Gloo], Note [Gloo on the caller's buffers]: an abort ends a collective blocked on
// a peer at once, on every host transport, and the failed wait gives back a buffer that nothing
// writes into afterwards. Rank 2 never issues the all-reduce; rank 0 aborts its communicator
// while blocked in it, 60 s before the deadline, and raises; the others learn of it and abort
// theirs. Each rank fills its buffer once its wait failed, and the fill must survive to the end.
// On Gloo, closing its connections alone left rank 0's worker blocked until Gloo's own timeout
// (62 s), and a peer in the middle of receiving a piece of the 4 MiB from rank 0 is not woken by
// Gloo even when its pairs are failed: the abort fails that collective itself.
TEST(Faults, AnAbortEndsABlockedCollectiveAndItsBufferIsLeftAlone) {
  std::vector<double> waited(4, -1.0);
  std::vector<std::string> messages(4);
  std::vector<std::vector<float>> buffers(4, std::vector<float>(std::size_t{1} << 20, 1.0f));
  const std::string reason = "the test aborted rank 0 in its all-reduce";
  const auto start = Clock::now();
  try {
    cohort::run_local(
        4,
        [&](cohort::World& world) {
          const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
          const auto r = static_cast<std::size_t>(world.rank());
          world.comm().barrier(stream).wait();
          if (world.rank() == 2) {
            while (!world.comm().aborted()) {
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            return;
          }
          std::thread aborter;
          if (world.rank() == 0) {
            aborter = std::thread([&world, &reason] {
              std::this_thread::sleep_for(std::chrono::milliseconds(300));
              world.comm().abort(reason);
            });
          }
          const struct Join {
            std::thread& thread;
            ~Join() {
              if (thread.joinable()) {
                thread.join();
              }
            }
          } join{aborter};
          const auto issued = Clock::now();
          try {
            world.comm()
                .all_reduce(std::span<float>(buffers[r]), cohort::ReduceOp::sum, stream)
                .wait();
          } catch (const cohort::Error& error) {
            waited[r] = seconds_since(issued);
            messages[r] = error.what();
            std::fill(buffers[r].begin(), buffers[r].end(), 7.0f);
            throw;
          }
        },
        options_with_timeout(std::chrono::seconds(60)));
    FAIL() << "no rank failed";
  } catch (const cohort::Error&) {
  }
  EXPECT_THAT(messages[0], HasSubstr(reason));
  // Every World is gone soon after too: no worker thread was left inside Gloo until its timeout
  // (a World waits 4 s for one, Note [Host worker teardown], before leaving it behind).
  EXPECT_LT(seconds_since(start), 3.5);
  for (int r : {0, 1, 3}) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_GE(waited[i], 0.0) << "rank " << r << "'s all-reduce did not fail";
    // Below kReleasePatience (4 s), after which a wait gives up on buffers it was not given back.
    EXPECT_LT(waited[i], 3.0) << "rank " << r << " (rank 0 aborted after 0.3 s, deadline 60 s)";
    EXPECT_TRUE(
        std::all_of(buffers[i].begin(), buffers[i].end(), [](float x) { return x == 7.0f; }))
        << "rank " << r << "'s buffer was written after its wait failed";
  }
}

// A rank that throws while another waits in the world's store (a benchmark gathering the
// ranks' results) ends every rank at once with the first rank's error, not at the waiting rank's
// deadline (Note [Waits that see another rank's failure]).
TEST(Faults, ARankThatThrowsEndsAnotherWaitingInTheStore) {
  std::string waiting_error;
  const auto start = Clock::now();
  std::string first_error;
  try {
    cohort::run_local(
        2,
        [&](cohort::World& world) {
          if (world.rank() == 0) {
            world.store().get("rank 1 is waiting");  // a handshake: rank 1 is about to block
            throw std::runtime_error("the benchmark's setup failed on rank 0");
          }
          world.store().set("rank 1 is waiting", "");
          try {
            world.store().get("results of rank 0", std::chrono::seconds(60));
          } catch (const cohort::Error& error) {
            waiting_error = error.what();
            throw;
          }
        },
        options_with_timeout(std::chrono::seconds(60)));
  } catch (const std::exception& error) {
    first_error = error.what();
  }
  EXPECT_LT(seconds_since(start), 10.0) << "rank 1 waited for its deadline";
  EXPECT_EQ(first_error, "the benchmark's setup failed on rank 0");
  EXPECT_THAT(waiting_error, HasSubstr("rank 1 stopped waiting for \"results of rank 0\""));
  EXPECT_THAT(waiting_error, HasSubstr("the benchmark's setup failed on rank 0"));
}

}  // namespace
