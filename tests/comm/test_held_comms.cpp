// Note [Communicators made halfway] (src/comm/nccl/communicator.cpp): the NCCL communicators of a
// cohort communicator are held from the moment NCCL gives them, and whatever throws before the
// cohort communicator is finished, what is held is aborted, once, the blocking one first. The
// rules are HeldComms (src/comm/nccl/held_comms.hpp), checked here with a fake communicator on
// the two failure paths that leaked before: an init that fails after NCCL made the control
// communicator, and an install that throws after both were split.

#include "comm/nccl/held_comms.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

/// A fake NCCL communicator: its name, and the aborts it saw.
struct FakeComm {
  std::string name;
};
std::vector<std::string> g_aborted;
void abort_fake(FakeComm* comm) {
  g_aborted.push_back(comm->name);
}

using Held = cohort::detail::HeldComms<FakeComm*, abort_fake>;

/// Makes a communicator the way NcclCommunicator does: the control one (which the init may hand
/// back even when it fails), the blocking one split from it, then the install; `fail_at` throws
/// at that step. Returns the holder when the communicator was finished.
std::unique_ptr<Held> make(FakeComm& control, FakeComm& blocking, const std::string& fail_at) {
  auto held = std::make_unique<Held>();
  held->control = &control;  // NCCL wrote the handle before saying whether it worked
  if (fail_at == "init") throw std::runtime_error("ncclCommInitRankConfig failed");
  held->comm = &blocking;
  if (fail_at == "install") throw std::runtime_error("cudaMalloc of the scratch: out of memory");
  return held;
}

class HeldComms : public ::testing::Test {
 protected:
  void SetUp() override { g_aborted.clear(); }
  FakeComm control{"control"};
  FakeComm blocking{"blocking"};
};

TEST_F(HeldComms, AnInitThatFailsAfterMakingTheControlOneAbortsIt) {
  EXPECT_THROW(make(control, blocking, "init"), std::runtime_error);
  EXPECT_EQ(g_aborted, std::vector<std::string>{"control"});
}

TEST_F(HeldComms, AnInstallThatThrowsAfterTheSplitAbortsBothBlockingFirst) {
  EXPECT_THROW(make(control, blocking, "install"), std::runtime_error);
  EXPECT_EQ(g_aborted, (std::vector<std::string>{"blocking", "control"}));
}

TEST_F(HeldComms, AFinishedCommunicatorIsAbortedOnlyByItsAbort) {
  auto held = make(control, blocking, "");
  EXPECT_TRUE(g_aborted.empty());
  held->abort_held();
  held->abort_held();  // the watchdog and a waiter may both abort
  EXPECT_TRUE(held->aborted());
  held.reset();  // and then it is destroyed
  EXPECT_EQ(g_aborted, (std::vector<std::string>{"blocking", "control"}));
}

TEST_F(HeldComms, OnesItsOwnerDestroyedAreNotAborted) {
  auto held = make(control, blocking, "");
  held->release();  // ncclCommDestroy and ncclCommFinalize ran
  held.reset();
  EXPECT_TRUE(g_aborted.empty());
}

TEST_F(HeldComms, AOneMemberCommunicatorHoldsNothingToAbort) {
  { Held solo; }
  EXPECT_TRUE(g_aborted.empty());
}

}  // namespace
