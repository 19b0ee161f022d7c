#include "comm/context.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/version.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

namespace cohort::detail {

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

void expect_backend(const CommContext& context, Backend backend) {
  COHORT_EXPECTS(context.backend == backend,
                 context.describe() + " was decided for the " +
                     std::string(to_string(context.backend)) + " backend, but a " +
                     std::string(to_string(backend)) + " communicator was made for it");
}

void CommContext::set_backend_abort(std::function<void()> fn) {
  const std::lock_guard<std::mutex> lock(mutex_);
  backend_abort_ = std::move(fn);
}

bool CommContext::mark_aborted(const std::string& reason, bool reported) noexcept {
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
  abort_reported_ = reported;
  return true;
}

void CommContext::finish_abort() noexcept {
  std::function<void()> backend_abort;
  std::string reason;
  bool reported = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!backend_abort_due_) {
      return;
    }
    backend_abort_due_ = false;
    backend_abort = backend_abort_;
    reason = abort_reason_;
    reported = abort_reported_;
  }
  if (reported) {
    COHORT_LOG(debug) << "aborting " << describe() << ": " << reason;
  } else {
    COHORT_LOG(warn) << "aborting " << describe() << ": " << reason;
  }
  if (backend_abort) {
    try {
      backend_abort();
    } catch (const std::exception& error) {
      COHORT_LOG(error) << "aborting " << describe() << " failed: " << error.what();
    }
  }
}

bool CommContext::abort(const std::string& reason, bool reported) noexcept {
  if (!mark_aborted(reason, reported)) {
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

std::vector<std::shared_ptr<WorkState>> CommContext::in_flight(
    const ProbeErrorHandler& on_probe_error) {
  // A work's probe may fail it and abort this context (NCCL's asynchronous errors), which takes
  // this mutex: poll outside it.
  std::vector<std::shared_ptr<WorkState>> works;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    works.assign(works_.begin(), works_.end());
  }
  std::erase_if(works, [&on_probe_error](const std::shared_ptr<WorkState>& w) {
    try {
      return w->done();
    } catch (const std::exception& error) {
      // A probe that cannot tell (a sticky CUDA error) will never tell: the watchdog's handler
      // fails the work now, publishes it and aborts (Note [Context and watchdog]).
      if (on_probe_error) {
        on_probe_error(*w, error);
        return true;
      }
      return false;
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
  std::map<int, std::size_t> group_sizes;
  for (const Entry& entry : entries) {
    if (entry.color >= 0) {
      plan.largest_group = std::max(plan.largest_group, ++group_sizes[entry.color]);
    }
  }
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
  child->placement.store_node = parent.placement.store_node;
  child->placement.store_node_ranks = parent.placement.store_node_ranks;
  const std::vector<int>& nodes = parent.placement.member_nodes;
  for (const int parent_rank : plan.parent_ranks) {
    if (static_cast<std::size_t>(parent_rank) < nodes.size()) {
      child->placement.member_nodes.push_back(nodes[static_cast<std::size_t>(parent_rank)]);
    }
  }
  child->monitor_store = rescope(parent.monitor_store);
  return child;
}

}  // namespace cohort::detail
