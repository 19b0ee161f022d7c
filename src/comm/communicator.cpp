#include "comm_context.hpp"
#include "flight_recorder.hpp"
#include "watchdog.hpp"
#include "work_state.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/core/error.hpp>
#include <cohort/memory/memory_report.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace cohort {

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "unknown";
}

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::gloo: return "gloo";
    case Backend::nccl: return "nccl";
    case Backend::shm: return "shm";
    case Backend::hierarchical: return "hierarchical";
  }
  return "unknown";
}

std::string_view to_string(HostTransport transport) noexcept {
  switch (transport) {
    case HostTransport::automatic: return "automatic";
    case HostTransport::shm: return "shm";
    case HostTransport::gloo: return "gloo";
  }
  return "unknown";
}

std::string_view to_string(CollectiveOp op) noexcept {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::barrier: return "barrier";
  }
  return "unknown";
}

std::string CollectiveRecord::describe() const {
  std::ostringstream out;
  out << '#' << sequence << ' ' << to_string(op);
  if (op != CollectiveOp::barrier) {
    out << ' ' << count << " x " << to_string(dtype) << " (" << format_bytes(bytes) << ')';
  }
  if (op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter) {
    out << ' ' << to_string(reduce);
  }
  if (op == CollectiveOp::broadcast) {
    out << " from root " << root;
  }
  switch (state) {
    case State::issued:
      out << ": in flight for " << static_cast<long long>(issued_seconds_ago * 1000.0) << " ms";
      break;
    case State::completed: {
      char text[48];
      std::snprintf(text, sizeof(text), ": completed in %.3f ms", duration_ms);
      out << text;
      break;
    }
    case State::failed:
      out << ": failed";
      break;
  }
  return out.str();
}

namespace detail {

void FlightRecorder::issued(const CollectiveRecord& record, Clock::time_point at) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[record.sequence % kCapacity];
  entry.record = record;
  entry.record.state = CollectiveRecord::State::issued;
  entry.issued_at = at;
  entry.used = true;
}

void FlightRecorder::finished(std::uint64_t sequence, CollectiveRecord::State state,
                              Clock::time_point at) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[sequence % kCapacity];
  if (entry.used && entry.record.sequence == sequence) {
    entry.record.state = state;
    entry.finished_at = at;
  }
  if (sequence > last_finished_.load()) {
    last_finished_.store(sequence);
  }
}

std::vector<CollectiveRecord> FlightRecorder::snapshot() const {
  const auto now = Clock::now();
  std::vector<CollectiveRecord> records;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& entry : entries_) {
    if (!entry.used) {
      continue;
    }
    CollectiveRecord record = entry.record;
    record.issued_seconds_ago = std::chrono::duration<double>(now - entry.issued_at).count();
    if (record.state != CollectiveRecord::State::issued) {
      record.duration_ms =
          std::chrono::duration<double, std::milli>(entry.finished_at - entry.issued_at).count();
    }
    records.push_back(record);
  }
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.sequence < b.sequence; });
  return records;
}

std::string FlightRecorder::dump(const std::string& indent) const {
  std::string text;
  for (const auto& record : snapshot()) {
    text += indent + record.describe() + "\n";
  }
  return text.empty() ? indent + "(none)\n" : text;
}

SplitPlan plan_split(CommContext& context, int color, int key) {
  const std::uint64_t index = ++context.splits;
  const std::string prefix = "split" + std::to_string(index) + "/";
  context.store->set(prefix + std::to_string(context.rank),
                     std::to_string(color) + " " + std::to_string(key));
  std::vector<std::string> keys;
  for (int member = 0; member < context.size; ++member) {
    keys.push_back(prefix + std::to_string(member));
  }
  context.store->wait(keys, context.timeout);
  struct Entry {
    int color;
    int key;
    int rank;
  };
  std::vector<Entry> entries;
  for (int member = 0; member < context.size; ++member) {
    std::istringstream fields(context.store->get(keys[static_cast<std::size_t>(member)]));
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
    if (group[i].rank == context.rank) {
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
  auto child = std::make_shared<CommContext>();
  child->rank = plan.rank;
  child->size = static_cast<int>(plan.parent_ranks.size());
  child->device = parent.device;
  child->backend = parent.backend;
  child->backend_version = parent.backend_version;
  child->name = std::move(name);
  child->id = plan.id;
  child->global_ranks = plan.global_ranks;
  child->timeout = parent.timeout;
  child->debug_collectives = parent.debug_collectives;
  child->watchdog = parent.watchdog;
  child->host_transport = parent.host_transport;
  child->single_node_world = parent.single_node_world;
  for (const int parent_rank : plan.parent_ranks) {
    if (static_cast<std::size_t>(parent_rank) < parent.member_nodes.size()) {
      child->member_nodes.push_back(parent.member_nodes[static_cast<std::size_t>(parent_rank)]);
    }
  }
  // Scope both handles to the child's id under the world's scope (the parent's base).
  auto rescope = [&](const std::shared_ptr<Store>& scoped) -> std::shared_ptr<Store> {
    auto* prefix = dynamic_cast<PrefixStore*>(scoped.get());
    return std::make_shared<PrefixStore>(plan.id, prefix != nullptr ? prefix->base() : scoped);
  };
  child->store = rescope(parent.store);
  child->monitor_store = rescope(parent.monitor_store);
  return child;
}

void wait_for_members(CommContext& context, const std::string& what) {
  const std::string prefix = what + "/joined/";
  context.store->set(prefix + std::to_string(context.rank), "1");
  std::vector<std::string> keys;
  for (int member = 0; member < context.size; ++member) {
    keys.push_back(prefix + std::to_string(member));
  }
  try {
    context.store->wait(keys, context.timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    for (int member = 0; member < context.size; ++member) {
      if (!context.store->check({keys[static_cast<std::size_t>(member)]})) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(context.global_rank(member));
      }
    }
    COHORT_FAIL(TimeoutError,
                "rank " + std::to_string(context.global_rank(context.rank)) + ": creating " +
                    context.describe() + " timed out after " +
                    std::to_string(context.timeout.count()) + " ms: ranks " + missing +
                    " never joined. Check that they started, reached the same point, and use "
                    "the same store (MASTER_ADDR, MASTER_PORT, COHORT_STORE).");
  }
}

}  // namespace detail

// ---- Communicator ----

Communicator::Communicator(std::shared_ptr<detail::CommContext> context)
    : context_(std::move(context)) {}

Communicator::~Communicator() = default;

int Communicator::rank() const noexcept { return context_->rank; }
int Communicator::size() const noexcept { return context_->size; }
Device Communicator::device() const noexcept { return context_->device; }
Backend Communicator::backend() const noexcept { return context_->backend; }
const std::string& Communicator::name() const noexcept { return context_->name; }

std::vector<CollectiveRecord> Communicator::recent_collectives() const {
  return context_->recorder->snapshot();
}

bool Communicator::aborted() const noexcept { return context_->aborted(); }

void Communicator::abort(const std::string& reason) noexcept {
  if (context_->abort(reason)) {
    std::exception_ptr error;
    try {
      COHORT_FAIL(Error, context_->describe() + " was aborted: " + reason);
    } catch (...) {
      error = std::current_exception();
    }
    context_->fail_in_flight(error);
  }
}

namespace {

void check_view(const TensorView& view, const detail::CommContext& context, const char* what) {
  COHORT_EXPECTS(view.device() == context.device,
                 std::string(what) + " is on " + view.device().to_string() + " but " +
                     context.describe() + " works on " + context.device.to_string());
  COHORT_EXPECTS(view.data() != nullptr || view.count() == 0,
                 std::string(what) + " has " + std::to_string(view.count()) +
                     " elements but a null pointer");
}

std::string signature(const CollectiveRecord& record) {
  std::ostringstream out;
  out << to_string(record.op) << " count=" << record.count << " dtype=" << to_string(record.dtype)
      << " op=" << to_string(record.reduce) << " root=" << record.root;
  return out.str();
}

// Note [Debug collectives]
// With COHORT_DEBUG_COLLECTIVES=1 each rank publishes the signature of every collective it issues
// (op, count, dtype, reduce op, root) and compares it with every other rank's before running it.
// Keys of sequence n - 2 are deleted at sequence n: by then every rank has read them.
void check_same_call_everywhere(detail::CommContext& context, const CollectiveRecord& record) {
  const std::string prefix = "debug/" + std::to_string(record.sequence) + "/";
  const std::string mine = signature(record);
  context.store->set(prefix + std::to_string(context.rank), mine);
  std::vector<std::string> keys;
  for (int member = 0; member < context.size; ++member) {
    keys.push_back(prefix + std::to_string(member));
  }
  try {
    context.store->wait(keys, context.timeout);
  } catch (const TimeoutError& error) {
    COHORT_FAIL(TimeoutError, "COHORT_DEBUG_COLLECTIVES: rank " +
                                  std::to_string(context.global_rank(context.rank)) +
                                  " issued collective #" + std::to_string(record.sequence) +
                                  " (" + mine + ") but not every rank did: " + error.what());
  }
  for (int member = 0; member < context.size; ++member) {
    const std::string theirs = context.store->get(keys[static_cast<std::size_t>(member)]);
    if (theirs != mine) {
      COHORT_FAIL(InvalidArgument,
                  "COHORT_DEBUG_COLLECTIVES: collective #" + std::to_string(record.sequence) +
                      " on " + context.describe() + " differs between ranks: rank " +
                      std::to_string(context.global_rank(member)) + " called " + theirs +
                      " but rank " + std::to_string(context.global_rank(context.rank)) +
                      " called " + mine +
                      ". Every rank must issue the same collectives in the same order.");
    }
  }
  if (record.sequence > 2) {
    context.store->remove("debug/" + std::to_string(record.sequence - 2) + "/" +
                          std::to_string(context.rank));
  }
}

}  // namespace

Work Communicator::issue(const Call& call, const Stream& stream) {
  detail::CommContext& context = *context_;
  COHORT_CHECK(!context.aborted(), Error,
               context.describe() + " was aborted and cannot run collectives: " +
                   context.abort_reason());
  COHORT_EXPECTS(stream.device() == context.device,
                 "the stream is on " + stream.device().to_string() + " but " +
                     context.describe() + " works on " + context.device.to_string());

  const auto size = static_cast<std::size_t>(context.size);
  switch (call.op) {
    case CollectiveOp::all_reduce:
      check_view(call.input, context, "all_reduce input");
      check_view(call.output, context, "all_reduce output");
      COHORT_EXPECTS_EQ(call.input.count(), call.output.count(),
                        "all_reduce needs input and output of the same count");
      COHORT_EXPECTS(call.input.dtype() == call.output.dtype(),
                     "all_reduce needs input and output of the same dtype");
      break;
    case CollectiveOp::reduce_scatter:
      check_view(call.input, context, "reduce_scatter input");
      check_view(call.output, context, "reduce_scatter output");
      COHORT_EXPECTS_EQ(call.input.count(), call.output.count() * size,
                        "reduce_scatter input must hold size() x the output count");
      COHORT_EXPECTS(call.input.dtype() == call.output.dtype(),
                     "reduce_scatter needs input and output of the same dtype");
      break;
    case CollectiveOp::all_gather:
      check_view(call.input, context, "all_gather input");
      check_view(call.output, context, "all_gather output");
      COHORT_EXPECTS_EQ(call.output.count(), call.input.count() * size,
                        "all_gather output must hold size() x the input count");
      COHORT_EXPECTS(call.input.dtype() == call.output.dtype(),
                     "all_gather needs input and output of the same dtype");
      break;
    case CollectiveOp::broadcast:
      check_view(call.output, context, "broadcast data");
      COHORT_EXPECTS(call.root >= 0 && call.root < context.size,
                     "broadcast root " + std::to_string(call.root) + " is not a rank of " +
                         context.describe());
      break;
    case CollectiveOp::barrier:
      break;
  }

  CollectiveRecord record;
  record.sequence = context.issued.load() + 1;
  record.op = call.op;
  record.dtype = call.input.dtype();
  record.reduce = call.reduce;
  record.count = call.input.count();
  record.bytes = call.input.bytes();
  record.root = call.root;

  if (context.debug_collectives) {
    check_same_call_everywhere(context, record);
  }

  const auto now = detail::WorkState::Clock::now();
  context.issued.store(record.sequence);
  context.recorder->issued(record, now);
  auto work = std::make_shared<detail::WorkState>(record, now + context.timeout, context.recorder);
  run(call, stream, work);  // sets a completion probe, if the backend has one, before...
  context.track(work);      // ...the watchdog can see the work
  return Work(work);
}

Work Communicator::all_reduce(TensorView data, ReduceOp op, const Stream& stream) {
  return issue(Call{CollectiveOp::all_reduce, data, data, op, -1}, stream);
}

Work Communicator::all_reduce(TensorView input, TensorView output, ReduceOp op,
                              const Stream& stream) {
  return issue(Call{CollectiveOp::all_reduce, input, output, op, -1}, stream);
}

Work Communicator::reduce_scatter(TensorView input, TensorView output, ReduceOp op,
                                  const Stream& stream) {
  return issue(Call{CollectiveOp::reduce_scatter, input, output, op, -1}, stream);
}

Work Communicator::all_gather(TensorView input, TensorView output, const Stream& stream) {
  return issue(Call{CollectiveOp::all_gather, input, output, ReduceOp::sum, -1}, stream);
}

Work Communicator::broadcast(TensorView data, int root, const Stream& stream) {
  return issue(Call{CollectiveOp::broadcast, data, data, ReduceOp::sum, root}, stream);
}

Work Communicator::barrier(const Stream& stream) {
  const TensorView none(nullptr, 0, DType::u8, context_->device);
  return issue(Call{CollectiveOp::barrier, none, none, ReduceOp::sum, -1}, stream);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, std::string name) {
  COHORT_CHECK(!context_->aborted(), Error,
               context_->describe() + " was aborted and cannot be split: " +
                   context_->abort_reason());
  return do_split(color, key, std::move(name));
}

}  // namespace cohort
