#include "comm/context.hpp"

#include "comm/watchdog.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/version.hpp>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t unix_millis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// "node 1 (ranks 2, 3)": node `node` and the global ranks of its members in `context`.
std::string node_with_ranks(const CommContext& context, int node) {
  std::string ranks;
  int count = 0;
  for (int member = 0; member < context.size(); ++member) {
    if (context.member_nodes[static_cast<std::size_t>(member)] == node) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(context.global_rank(member));
      ++count;
    }
  }
  return "node " + std::to_string(node) + (count == 1 ? " (rank " : " (ranks ") + ranks + ")";
}

/// Note [Naming an unreachable node]: a node whose every member is silent is named as a whole,
/// since that is what a cut link or a dead host looks like; `silent[m]` says whether member m
/// did not answer. Empty when the nodes are unknown (NCCL communicators do not record them).
std::string silent_nodes(const CommContext& context, const std::vector<bool>& silent) {
  if (context.member_nodes.size() != static_cast<std::size_t>(context.size())) return "";
  const int mine = context.member_nodes[static_cast<std::size_t>(context.rank())];
  std::vector<int> nodes(context.member_nodes);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::string text;
  for (const int node : nodes) {
    bool all_silent = node != mine;
    for (int member = 0; member < context.size() && all_silent; ++member) {
      if (context.member_nodes[static_cast<std::size_t>(member)] == node) {
        all_silent = silent[static_cast<std::size_t>(member)];
      }
    }
    if (all_silent) {
      text += node_with_ranks(context, node) + " does not answer at all: that host, or the "
              "network between it and this rank's node " + std::to_string(mine) + ", is down. ";
    }
  }
  return text;
}

/// Where the store is, for a rank that cannot reach it: the node of global rank 0 (the store's
/// host under cohortrun and torchrun), when that is another node. Global rank 0 need not be a
/// member (a hierarchical communicator's `across` part has one rank per node).
std::string store_node(const CommContext& context) {
  if (context.member_nodes.size() != static_cast<std::size_t>(context.size()) ||
      context.store_node < 0) {
    return "";
  }
  const int mine = context.member_nodes[static_cast<std::size_t>(context.rank())];
  if (context.store_node == mine) {
    return "";
  }
  const bool several = context.store_node_ranks.find(',') != std::string::npos;
  return " Or node " + std::to_string(context.store_node) + (several ? " (ranks " : " (rank ") +
         context.store_node_ranks + "), where the store runs beside rank 0, is unreachable from "
         "this rank's node " + std::to_string(mine) +
         ": that host, or the network between them, is down.";
}

}  // namespace

CommContext::CommContext(StoreGroup members) : group(std::move(members)) {
  group.set_interrupt([this](std::string_view key) {
    COHORT_CHECK(!aborted(), Error,
                 "rank " + std::to_string(global_rank(rank())) + ": " + describe() +
                     " was aborted while waiting at '" + std::string(key) + "': " + abort_reason());
  });
}

std::string CommContext::describe() const {
  return "communicator '" + name + "' (rank " + std::to_string(rank()) + " of " +
         std::to_string(size()) + ", global rank " + std::to_string(global_rank(rank())) + ")";
}

std::string versions_line(const CommContext& context) {
  return std::string("cohort ") + COHORT_VERSION_STRING + ", " + context.backend_version;
}

void CommContext::set_backend_abort(std::function<void()> fn) {
  const std::lock_guard<std::mutex> lock(mutex_);
  backend_abort_ = std::move(fn);
}

bool CommContext::mark_aborted(const std::string& reason) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_.load()) {
    return false;
  }
  try {
    abort_reason_ = reason;
  } catch (...) {
    abort_reason_.clear();  // out of memory for the text: aborted all the same
  }
  aborted_.store(true);
  backend_abort_due_ = true;
  return true;
}

void CommContext::finish_abort() noexcept {
  std::function<void()> backend_abort;
  std::string reason;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!backend_abort_due_) {
      return;
    }
    backend_abort_due_ = false;
    backend_abort = backend_abort_;
    reason = abort_reason_;
  }
  COHORT_LOG(warn) << "aborting " << describe() << ": " << reason;
  if (backend_abort) {
    try {
      backend_abort();
    } catch (const std::exception& error) {
      COHORT_LOG(error) << "aborting " << describe() << " failed: " << error.what();
    }
  }
}

bool CommContext::abort(const std::string& reason) noexcept {
  if (!mark_aborted(reason)) {
    return false;
  }
  finish_abort();
  return true;
}

std::string CommContext::abort_reason() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return abort_reason_;
}

// Note [Tracking in-flight work]
// A host stream never blocks the thread that issues onto it, so a training loop can issue
// thousands of collectives ahead of the ones running (every bucket of every step, until its
// first read of a result). Sweeping every finished work out of the list on every issue then
// costs O(in flight) per collective, quadratic over the run: with small buckets that took more
// CPU than the collectives themselves, starving the threads that run them, and looked like a
// hang. Works finish mostly in issue order, so the finished ones at the front go in O(1) each, and
// the whole list is swept only when it has doubled since the last sweep: O(1) amortized per issue
// (tracking_steps() counts the works looked at, for the test that holds this).
void CommContext::track(const std::shared_ptr<WorkState>& work) {
  const std::lock_guard<std::mutex> lock(mutex_);
  while (!works_.empty() && works_.front()->finished()) {
    works_.pop_front();
    ++tracking_steps_;
  }
  ++tracking_steps_;  // the unfinished front, if any
  if (works_.size() >= sweep_at_) {
    tracking_steps_ += works_.size();
    std::erase_if(works_, [](const std::shared_ptr<WorkState>& w) { return w->finished(); });
    sweep_at_ = std::max<std::size_t>(64, 2 * works_.size());
  }
  works_.push_back(work);
}

std::uint64_t CommContext::tracking_steps() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return tracking_steps_;
}

std::vector<std::shared_ptr<WorkState>> CommContext::in_flight() {
  // A work's probe may fail it and abort this context (NCCL's asynchronous errors), which takes
  // this mutex: poll outside it.
  std::vector<std::shared_ptr<WorkState>> works;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    works.assign(works_.begin(), works_.end());
  }
  std::erase_if(works, [this](const std::shared_ptr<WorkState>& w) {
    try {
      return w->done();
    } catch (const std::exception& error) {
      // A probe that cannot tell (a sticky CUDA error) will never tell: fail the work now,
      // publish it and abort, instead of logging the same error every tick until the deadline.
      fail_collective(*this, *w, /*timed_out=*/false,
                      std::string("its completion could not be checked: ") + error.what());
      return true;
    }
  });
  const std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(works_, [](const std::shared_ptr<WorkState>& w) { return w->finished(); });
  return works;
}

void CommContext::fail_in_flight(const std::exception_ptr& error) {
  for (const auto& work : in_flight()) {
    work->fail(error);
  }
}

void publish_progress(CommContext& context) noexcept {
  try {
    const auto watchdog = context.watchdog.lock();
    const std::int64_t answered = watchdog ? watchdog->answered_request() : 0;
    context.monitor_store->set("progress/" + std::to_string(context.rank()),
                               std::to_string(context.issued.load()) + " " +
                                   std::to_string(context.recorder->last_finished()) + " " +
                                   std::to_string(unix_millis()) + " " +
                                   std::to_string(answered));
  } catch (const std::exception& error) {
    COHORT_LOG(debug) << "could not publish progress of " << context.describe() << ": "
                      << error.what();
  }
}

std::string diagnose_stragglers(CommContext& context, std::uint64_t sequence) {
  struct Progress {
    bool published = false;
    std::uint64_t issued = 0;
    std::int64_t at = 0;
    std::int64_t answered = 0;
  };
  std::vector<Progress> progress(static_cast<std::size_t>(context.size()));
  try {
    // Ask for fresh progress and give every watchdog a moment to answer.
    const auto watchdog = context.watchdog.lock();
    const std::int64_t request = watchdog ? watchdog->request_progress() : 0;
    publish_progress(context);
    const auto give_up = Clock::now() + kAnswerWait;
    while (true) {
      // A member that left a request made ahead of the deadline unanswered for kAnswerWait
      // will not answer this one either: waiting for it only delays the error.
      const std::int64_t settled = watchdog ? watchdog->settled_request() : 0;
      bool all_answered = true;
      for (int member = 0; member < context.size(); ++member) {
        Progress& p = progress[static_cast<std::size_t>(member)];
        const std::string key = "progress/" + std::to_string(member);
        if (member == context.rank() || !context.monitor_store->check({key})) {
          all_answered = all_answered && member == context.rank();
          continue;
        }
        std::istringstream fields(context.monitor_store->get(key, std::chrono::seconds(2)));
        fields >> p.issued >> p.at >> p.at >> p.answered;  // issued, finished (unused), time
        p.published = true;
        all_answered = all_answered && (p.answered >= request || p.answered < settled);
      }
      if (watchdog) {
        watchdog->answer_progress_request();
      }
      if (all_answered || request == 0 || Clock::now() >= give_up) {
        for (Progress& p : progress) {
          p.answered = request == 0 ? 0 : (p.answered >= request ? 1 : -1);
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& error) {
    return "the store could not be read to find which ranks had not arrived (" +
           std::string(error.what()) +
           "); the process that hosts it (rank 0 or cohortrun) may have died." +
           store_node(context) + " ";
  }
  std::vector<bool> silent_members(static_cast<std::size_t>(context.size()), false);
  std::string not_arrived;
  std::string silent;
  for (int member = 0; member < context.size(); ++member) {
    if (member == context.rank()) {
      continue;
    }
    const Progress& p = progress[static_cast<std::size_t>(member)];
    const std::string name = "rank " + std::to_string(context.global_rank(member));
    if (!p.published || p.answered < 0) {
      silent += (silent.empty() ? "" : ", ") + name;
      silent_members[static_cast<std::size_t>(member)] = true;
      if (p.published && p.issued < sequence) {
        not_arrived += (not_arrived.empty() ? "" : ", ") + name + " (last issued #" +
                       std::to_string(p.issued) + ")";
      }
      continue;
    }
    if (p.issued < sequence) {
      not_arrived += (not_arrived.empty() ? "" : ", ") + name + " (last issued #" +
                     std::to_string(p.issued) + ")";
    }
  }
  std::string text;
  if (!not_arrived.empty()) {
    text += "ranks that had not arrived: " + not_arrived + ". ";
  }
  if (!silent.empty()) {
    text += "ranks not responding (their process died or is stuck): " + silent + ". ";
    text += silent_nodes(context, silent_members);
  }
  if (text.empty()) {
    text = "every rank had issued it; the backend itself stalled or failed (check "
           "NCCL_DEBUG=WARN output, the network, and the GPUs). ";
  }
  return text;
}

SplitPlan plan_split(CommContext& context, int color, int key) {
  const std::uint64_t index = ++context.splits;
  const std::vector<std::string> published =
      context.group.all_gather("split", std::to_string(color) + " " + std::to_string(key));
  struct Entry {
    int color;
    int key;
    int rank;
  };
  std::vector<Entry> entries;
  for (int member = 0; member < context.size(); ++member) {
    std::istringstream fields(published[static_cast<std::size_t>(member)]);
    Entry entry{0, 0, member};
    fields >> entry.color >> entry.key;
    entries.push_back(entry);
  }
  SplitPlan plan;
  if (color < 0) {
    return plan;
  }
  std::vector<Entry> group;
  for (const Entry& entry : entries) {
    if (entry.color == color) {
      group.push_back(entry);
    }
  }
  std::sort(group.begin(), group.end(), [](const Entry& a, const Entry& b) {
    return a.key != b.key ? a.key < b.key : a.rank < b.rank;
  });
  plan.member = true;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (group[i].rank == context.rank()) {
      plan.rank = static_cast<int>(i);
    }
    plan.parent_ranks.push_back(group[i].rank);
    plan.global_ranks.push_back(context.global_rank(group[i].rank));
  }
  plan.id = context.id + "/split" + std::to_string(index) + "c" + std::to_string(color);
  return plan;
}

std::shared_ptr<CommContext> make_child_context(const CommContext& parent, const SplitPlan& plan,
                                                std::string name) {
  // Scope both handles to the child's id under the world's scope (the parent's base).
  auto rescope = [&](const std::shared_ptr<Store>& scoped) -> std::shared_ptr<Store> {
    auto* prefix = dynamic_cast<PrefixStore*>(scoped.get());
    return std::make_shared<PrefixStore>(plan.id, prefix != nullptr ? prefix->base() : scoped);
  };
  auto child = std::make_shared<CommContext>(
      StoreGroup(rescope(parent.store()), plan.rank, static_cast<int>(plan.parent_ranks.size()),
                 parent.timeout(), plan.global_ranks, "communicator '" + name + "'"));
  child->device = parent.device;
  child->backend = parent.backend;
  child->backend_version = parent.backend_version;
  child->name = std::move(name);
  child->id = plan.id;
  child->debug_collectives = parent.debug_collectives;
  child->watchdog = parent.watchdog;
  child->host_transport = parent.host_transport;
  child->single_node_world = parent.single_node_world;
  child->store_host = parent.store_host;
  child->store_node = parent.store_node;
  child->store_node_ranks = parent.store_node_ranks;
  for (const int parent_rank : plan.parent_ranks) {
    if (static_cast<std::size_t>(parent_rank) < parent.member_nodes.size()) {
      child->member_nodes.push_back(parent.member_nodes[static_cast<std::size_t>(parent_rank)]);
    }
  }
  child->monitor_store = rescope(parent.monitor_store);
  return child;
}

}  // namespace cohort::detail
