#include "comm/context.hpp"
#include "comm/watchdog.hpp"
#include "comm/work_state.hpp"

#include <cohort/comm/communicator.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace cohort {

// ---- Communicator ----

Communicator::Communicator(std::shared_ptr<detail::CommContext> context)
    : context_(std::move(context)) {}

Communicator::~Communicator() = default;

int Communicator::rank() const noexcept {
  return context_->rank();
}
int Communicator::size() const noexcept {
  return context_->size();
}
Device Communicator::device() const noexcept {
  return context_->device;
}
Backend Communicator::backend() const noexcept {
  return context_->backend;
}
const std::string& Communicator::name() const noexcept {
  return context_->name;
}

std::vector<CollectiveRecord> Communicator::recent_collectives() const {
  return context_->recorder->snapshot();
}

bool Communicator::aborted() const noexcept {
  return context_->aborted();
}

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
  COHORT_EXPECTS(
      view.data() != nullptr || view.count() == 0,
      std::string(what) + " has " + std::to_string(view.count()) + " elements but a null pointer");
}

std::string signature(const CollectiveRecord& record) {
  std::ostringstream out;
  out << to_string(record.op) << " count=" << record.count << " dtype=" << to_string(record.dtype)
      << " op=" << to_string(record.reduce) << " root=" << record.root;
  return out.str();
}

// Note [Debug collectives]
// With COHORT_DEBUG_COLLECTIVES=1 each rank checks, through the communicator's StoreGroup, that
// every member issues the same collective (op, count, dtype, reduce op, root) before running it.
// One key serves every call: StoreGroup numbers its rounds and keeps at most two in the store.
void check_same_call_everywhere(detail::CommContext& context, const CollectiveRecord& record) {
  const std::string mine = signature(record);
  const std::string where = std::string(env::kDebugCollectives) + ": collective #" +
                            std::to_string(record.sequence) + " (" + mine + ") on " +
                            context.describe() + ": ";
  try {
    context.group.check_same("collective", mine);
  } catch (const TimeoutError& error) {
    COHORT_FAIL(TimeoutError, where + error.what());
  } catch (const InvalidArgument& error) {
    COHORT_FAIL(
        InvalidArgument,
        where + error.what() + ". Every rank must issue the same collectives in the same order.");
  }
}

}  // namespace

Work Communicator::issue(const Call& call, const Stream& stream) {
  detail::CommContext& context = *context_;
  COHORT_CHECK(!context.aborted(), Error,
               "rank " + std::to_string(context.global_rank(context.rank())) + ": " +
                   std::string(to_string(call.op)) + " on " + context.describe() +
                   " cannot run: the communicator was aborted: " + context.abort_reason());
  COHORT_EXPECTS(stream.device() == context.device,
                 "the stream is on " + stream.device().to_string() + " but " + context.describe() +
                     " works on " + context.device.to_string());
  // Note [Graph capture]
  // A collective is never recorded into a CUDA graph: its completion event would be a captured
  // event, which the watchdog cannot query (cudaErrorCapturedEvent), a replay would not be
  // tracked or deadline-watched at all, and the optimizers take their learning rate by value,
  // so a replayed step would keep the captured one. Capture is refused here, before anything is
  // enqueued, rather than failing in the watchdog later.
  COHORT_CHECK(!stream.capturing(), InvalidArgument,
               std::string(to_string(call.op)) + " on " + context.describe() +
                   ": the stream is being captured into a CUDA graph "
                   "(cudaStreamBeginCapture), and cohort's collectives cannot be captured. "
                   "Capture forward and backward alone, end the capture, and call "
                   "sync_grads() and the optimizer's step() outside it.");

  const auto size = static_cast<std::size_t>(context.size());
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
      COHORT_EXPECTS(call.root >= 0 && call.root < context.size(),
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
  // Note [One clock for a collective] (work.cpp): the work and its recorder entry share `now`.
  auto work =
      std::make_shared<detail::WorkState>(record, now, now + context.timeout(), context.recorder);
  // Tracked before the backend sees it: a collective stuck inside the backend's enqueue is then
  // failed by the watchdog at its deadline like any other (Note [NCCL communicators]).
  context.track(work);
  try {
    run(call, stream, work);  // sets a completion probe, if the backend has one
  } catch (...) {
    work->fail(std::current_exception());  // so the watchdog does not wait for it
    throw;
  }
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
  COHORT_CHECK(
      !context_->aborted(), Error,
      context_->describe() + " was aborted and cannot be split: " + context_->abort_reason());
  return do_split(color, key, std::move(name));
}

}  // namespace cohort
