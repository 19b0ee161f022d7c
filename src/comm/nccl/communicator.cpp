#include "comm/nccl/communicator.hpp"

#include "comm/nccl/held_comms.hpp"
#include "comm/watchdog.hpp"

#include <cohort/comm/detail/nccl_check.hpp>
#include <cohort/comm/detail/nccl_counts.hpp>
#include <cohort/core/backoff.hpp>
#include <cohort/core/detail/cuda_check.hpp>
#include <cohort/core/detail/cuda_device_scope.hpp>
#include <cohort/core/detail/event_pool.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/core/stream.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace cohort::detail {

// Note [NCCL communicators]
// Each cohort communicator holds two NCCL communicators over the same ranks:
// - `control`, non-blocking (config.blocking = 0): created by ncclCommInitRankConfig and polled
//   against the deadline, so a rank that never arrives makes init fail in time and the half-made
//   communicator can be aborted. Splits go through it the same way. It runs no collective, so
//   (NCCL connects peers on first use) it holds no channel buffers.
// - `comm`, blocking (config.blocking = 1), split from `control` (that split is polled against
//   the deadline too): every collective runs on it. NCCL 2.28 sends each collective on a
//   non-blocking communicator of more than one rank through its non-blocking group path, which
//   starts a thread for it and returns ncclInProgress (group.cc); polling that with sleeps put a
//   thread creation and tens of microseconds on the thread that drives backward. On a blocking
//   communicator the collective is enqueued inline: a few microseconds, no thread.
// What the blocking communicator gives up is that a collective stuck inside its enqueue (NCCL
// connecting to a peer that died before its first collective) holds the issuing thread. Such a
// collective is still seen: Communicator::issue tracks the work before calling the backend, so
// the watchdog fails it at its deadline, publishes the failure (every other rank aborts at once)
// and aborts this rank's communicators. NCCL is not thread-safe per communicator, so the abort
// never calls into a communicator another thread is inside: it takes the handle's lock if it
// can, and otherwise leaves a request that the issuing thread carries out as it comes out of
// NCCL (which gives up connecting on its own, after NCCL_SOCKET_RETRY_CNT retries).

// Note [Sharing NCCL's resources]
// A World's communicators (global, local, cross) and the control and blocking halves of each
// would otherwise be six NCCL communicators per rank, each with its own bootstrap, proxy threads
// and, once used, its own buffers for every peer, `local` a second copy of `global` on one node.
// So every control communicator is made with splitShare = 1: what is split from it (its blocking
// half, the World's local and cross, a program's splits) shares its proxy threads and the
// buffers of the peers they have in common (NCCL: the split's parent config decides, init.cc).
// Sharing has two consequences that NCCL states and cohort keeps:
// - Communicators that share resources run their collectives one after the other (NCCL orders
//   their launches on a shared internal stream), so collectives on two of them issued in
//   different orders on different ranks wait for each other until the deadline instead of
//   overlapping: loud, never a wrong result.
// - They share NCCL's abort flag: aborting one stops the kernels of all, and NCCL would still
//   accept collectives on the others, which would then end early and look complete. So aborting
//   one cohort communicator aborts every one it shares with (`Sharing::abort_all_but`), each
//   failing its collectives with an error that says why. Every failure aborts all of a rank's
//   communicators anyway (Note [Watchdog]); only a program's own abort() of one is wider.
// A group that one rank alone forms (cross on one node, local with one GPU per node) needs no
// NCCL at all: its collectives are copies on the stream (`solo`), and when every group of a split
// has one member no rank calls NCCL for it (Note [One-member communicators]).
//
// Note [Communicators made halfway]
// NCCL may hand back a communicator even from a call that failed (a non-blocking init that
// errors after allocating it), and a communicator whose split succeeded may still fail to be
// installed (its barrier scratch out of memory). Such a communicator keeps its proxy threads and
// buffers for the life of the process unless someone aborts it, so a Handle holds each one from
// the moment NCCL gives it (HeldComms, held_comms.hpp): whatever throws before the cohort
// communicator is finished, the Handle's destruction aborts what it holds, and the normal
// destruction releases them once it has destroyed them itself.

namespace {

void abort_nccl(ncclComm_t comm) {
  (void)ncclCommAbort(comm);
}

std::atomic<std::uint64_t> g_nccl_communicators{0};

/// Counts a communicator NCCL made (null: none made).
void count_nccl_communicator(ncclComm_t comm) noexcept {
  if (comm != nullptr) g_nccl_communicators.fetch_add(1, std::memory_order_relaxed);
}

/// The cohort communicators whose NCCL communicators share resources, and so NCCL's abort flag
/// (Note [Sharing NCCL's resources]).
class Sharing {
 public:
  void add(const std::shared_ptr<CommContext>& context) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(members_, [](const std::weak_ptr<CommContext>& m) { return m.expired(); });
    members_.push_back(context);
  }
  /// Aborts every member but `aborted`, failing their collectives in flight.
  void abort_all_but(const CommContext& aborted) noexcept {
    std::vector<std::shared_ptr<CommContext>> others;
    try {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& member : members_) {
        if (auto context = member.lock(); context && context.get() != &aborted) {
          others.push_back(std::move(context));
        }
      }
    } catch (...) {
      return;  // out of memory: their collectives fail at their deadlines instead
    }
    for (const auto& other : others) {
      std::string reason;
      try {
        reason = aborted.describe() +
                 " was aborted, and it shares NCCL's resources (and abort "
                 "flag) with this communicator: " +
                 aborted.abort_reason();
      } catch (...) {
      }
      if (!other->abort(reason, /*reported=*/true)) continue;
      std::exception_ptr error;
      try {
        COHORT_FAIL(Error, other->describe() + " was aborted: " + reason);
      } catch (...) {
        error = std::current_exception();
      }
      try {
        other->fail_in_flight(error);
      } catch (...) {
      }
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::weak_ptr<CommContext>> members_;
};

}  // namespace

struct NcclCommunicator::Handle {
  std::mutex mutex;  // held around every NCCL call on either communicator
  /// control: non-blocking (init, split, abort); comm: blocking (collectives). Both null for a
  /// one-member communicator. Aborted on destruction unless released (Note [Communicators made
  /// halfway]). Under mutex.
  HeldComms<ncclComm_t, abort_nccl> held;
  std::atomic<bool> abort_requested{false};  // set when the abort found the lock taken
  Device device = Device::host();
  bool solo = false;         // one member: no NCCL, collectives are copies on the stream
  float* scratch = nullptr;  // one float for barriers, on `device`
  EventPool events;          // completion events of the collectives, reused
  /// The communicators sharing NCCL's resources with this one; null for a solo one.
  std::shared_ptr<Sharing> sharing;

  explicit Handle(Device on) : device(on), events(on, /*timing=*/false) {}
  ~Handle() {
    // Only a communicator never finished gets here holding anything (Note [Communicators made
    // halfway]); its abort comes before cudaFree, which waits for the device.
    held.abort_held();
    if (scratch != nullptr) {
      const CudaDeviceScope scope(device.index());
      COHORT_CUDA_CHECK_NOEXCEPT(cudaFree(scratch));
    }
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  bool aborted() const noexcept { return held.aborted(); }
  /// Aborts both communicators. Call with `mutex` held.
  void abort_locked() { held.abort_held(); }
  /// Aborts now if no thread is inside NCCL, else asks the one that is to do it on its way out.
  /// The request is left first and the lock then tried for a while: a thread that held the lock
  /// only for a moment (a completion probe, a poll of a pending split) may have let it go
  /// without seeing the request, and nothing else would carry it out until the next collective.
  void abort() {
    abort_requested.store(true);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    do {
      std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
      if (lock.owns_lock()) {
        honour_abort_request_locked();
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } while (std::chrono::steady_clock::now() < give_up);
  }
  /// Carries out an abort requested while this thread was inside NCCL. Call with `mutex` held.
  void honour_abort_request_locked() {
    if (abort_requested.load()) {
      abort_locked();
    }
  }
};

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t to_nccl(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

/// Polls a non-blocking communicator until its pending call settles or `deadline` passes.
/// Returns the settled result, or ncclInProgress at the deadline. With `guard`, each poll holds
/// its mutex and nothing else does, so the watchdog's abort can come in between (Note [NCCL
/// communicators]); the guard's abort ends the wait with ncclRemoteError.
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline,
                    NcclCommunicator::Handle* guard = nullptr) {
  ncclResult_t state = ncclInProgress;
  Backoff backoff(std::chrono::microseconds(10), std::chrono::microseconds(2000));
  while (true) {
    {
      std::unique_lock<std::mutex> lock;
      if (guard != nullptr) {
        lock = std::unique_lock<std::mutex>(guard->mutex);
        if (guard->aborted()) {
          return ncclRemoteError;
        }
      }
      const ncclResult_t polled = ncclCommGetAsyncError(comm, &state);
      if (polled != ncclSuccess) {
        return polled;
      }
    }
    if (state != ncclInProgress || Clock::now() >= deadline) {
      return state;
    }
    backoff.sleep();
  }
}

/// Throws NcclError for a failed call on `comm`, TimeoutError when it did not settle in time.
void check_settled(ncclResult_t result, const char* call, ncclComm_t comm, const std::string& what,
                   std::chrono::milliseconds timeout) {
  if (result == ncclSuccess) {
    return;
  }
  if (result == ncclInProgress) {
    COHORT_FAIL(TimeoutError, what + ": " + call + " did not complete within " +
                                  std::to_string(timeout.count()) + " ms");
  }
  COHORT_FAIL(NcclError, what + ": " + describe_nccl_error(call, result, comm));
}

/// A control communicator (non-blocking) shares its resources with whatever is split from it;
/// a blocking one is split from nothing (Note [Sharing NCCL's resources]).
ncclConfig_t config_for(bool control) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = control ? 0 : 1;
  if (control) {
    config.splitShare = 1;
  }
  return config;
}

/// Splits `control` (non-blocking) with `color` into a new control communicator, or the blocking
/// one (`control_child` false), polling it against `deadline`; with `guard`, as `settle`.
/// Returns the result and the child (null for NCCL_SPLIT_NOCOLOR). When the parent's split
/// failed, the parent has a split in flight and must be aborted, and the child's slot is left to
/// NCCL, which may still write it; when the parent's split succeeded and the child's own start
/// failed, the child is returned all the same, for its caller to abort (Note [Communicators
/// made halfway]).
std::pair<ncclResult_t, ncclComm_t> split_settled(ncclComm_t control, int color, int key,
                                                  bool control_child, Clock::time_point deadline,
                                                  NcclCommunicator::Handle* guard) {
  auto* slot = new ncclComm_t(nullptr);
  ncclConfig_t config = config_for(control_child);
  ncclResult_t result = ncclSuccess;
  {
    std::unique_lock<std::mutex> lock;
    if (guard != nullptr) {
      lock = std::unique_lock<std::mutex>(guard->mutex);
      if (guard->aborted()) {
        delete slot;
        return {ncclRemoteError, nullptr};
      }
    }
    result = ncclCommSplit(control, color, key, slot, &config);
  }
  if (result == ncclInProgress || result == ncclSuccess) {
    result = settle(control, deadline, guard);
    if (result != ncclSuccess) {
      return {result, nullptr};
    }
    ncclComm_t child = *slot;
    delete slot;
    if (child != nullptr) {
      result = settle(child, deadline);
    }
    return {result, child};
  }
  return {result, nullptr};
}

/// A collective of a communicator of one member: its result is its input, copied where the
/// output is elsewhere, on the stream (Note [One-member communicators]).
void run_alone(const Communicator::Call& call, cudaStream_t stream) {
  const TensorView& input = call.input;
  const TensorView& output = call.output;
  switch (call.op) {
    case CollectiveOp::all_reduce:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_gather:
      if (input.data() != output.data() && output.bytes() > 0) {
        COHORT_CUDA_TRY(cudaMemcpyAsync(output.data(), input.data(), output.bytes(),
                                        cudaMemcpyDeviceToDevice, stream));
      }
      break;
    case CollectiveOp::broadcast:  // the root's data is already there
    case CollectiveOp::barrier:    // nobody to wait for
      break;
  }
}

}  // namespace

std::uint64_t nccl_communicators_created() noexcept {
  return g_nccl_communicators.load(std::memory_order_relaxed);
}

void bind_cuda_device(Device device) {
  COHORT_EXPECTS(device.is_cuda(), "cannot bind " + device.to_string() + " as a CUDA device");
  COHORT_CUDA_TRY(cudaSetDevice(device.index()));
}

void prepare_watchdog_thread(Device device) {
  bind_cuda_device(device);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  COHORT_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&mode));
}

std::string nccl_version_string() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) {
    return "NCCL (unknown version)";
  }
  return "NCCL " + std::to_string(version / 10000) + "." + std::to_string((version / 100) % 100) +
         "." + std::to_string(version % 100);
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<CommContext> context)
    : Communicator(std::move(context)) {
  CommContext& ctx = this->context();
  expect_backend(ctx, Backend::nccl);  // Note [The backend, decided once]
  ctx.backend_version = nccl_version_string();
  handle_ = std::make_shared<Handle>(ctx.device);
  handle_->sharing = std::make_shared<Sharing>();
  bind_cuda_device(ctx.device);
  ctx.group.barrier("nccl/joined");

  ncclUniqueId id;
  if (ctx.rank() == 0) {
    COHORT_NCCL_TRY(ncclGetUniqueId(&id));
    ctx.store()->set("nccl/unique_id", std::string_view(id.internal, sizeof(id.internal)));
  } else {
    const std::string bytes = ctx.store()->get("nccl/unique_id", ctx.timeout());
    COHORT_CHECK(bytes.size() == sizeof(id.internal), Error,
                 "the NCCL unique id in the store has " + std::to_string(bytes.size()) +
                     " bytes, expected " + std::to_string(sizeof(id.internal)));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  const std::string what =
      "rank " + std::to_string(ctx.global_rank(ctx.rank())) + ": creating " + ctx.describe();
  const auto deadline = Clock::now() + ctx.timeout();
  ncclConfig_t config = config_for(/*control=*/true);
  // Held from here on, even when the init fails: NCCL may have made it (Note [Communicators made
  // halfway]); whatever throws below, the Handle aborts what it holds.
  const ncclResult_t started =
      ncclCommInitRankConfig(&handle_->held.control, ctx.size(), id, ctx.rank(), &config);
  count_nccl_communicator(handle_->held.control);
  if (started != ncclSuccess && started != ncclInProgress) {
    COHORT_FAIL(NcclError,
                what + ": " + describe_nccl_error("ncclCommInitRankConfig", started, nullptr));
  }
  const ncclResult_t settled = settle(handle_->held.control, deadline);
  check_settled(settled, "ncclCommInitRankConfig", nullptr,
                what +
                    " (every rank had joined the store; NCCL's own bootstrap stalled: "
                    "check NCCL_SOCKET_IFNAME and NCCL_DEBUG=INFO)",
                ctx.timeout());
  const auto [result, comm] = split_settled(handle_->held.control, 0, ctx.rank(),
                                            /*control_child=*/false, deadline, nullptr);
  handle_->held.comm = comm;
  count_nccl_communicator(comm);
  check_settled(result, "ncclCommSplit (the blocking communicator for collectives)", nullptr, what,
                ctx.timeout());
  install();
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<CommContext> context,
                                   std::shared_ptr<Handle> handle)
    : Communicator(std::move(context)), handle_(std::move(handle)) {
  expect_backend(this->context(), Backend::nccl);  // inherited from the parent
  install();
}

void NcclCommunicator::install() {
  CommContext& ctx = context();
  if (!handle_->solo) {
    // The barrier's scratch lives on the communicator's device, whatever is current here.
    const CudaDeviceScope scope(handle_->device.index());
    COHORT_CUDA_TRY(cudaMalloc(&handle_->scratch, sizeof(float)));
  }
  // Note [Sharing NCCL's resources]: an abort of this one aborts those it shares with.
  ctx.set_backend_abort([handle = handle_, self = std::weak_ptr<CommContext>(shared_context())] {
    handle->abort();
    if (handle->sharing) {
      if (const auto context = self.lock()) handle->sharing->abort_all_but(*context);
    }
  });
  if (handle_->sharing) {
    handle_->sharing->add(shared_context());
  }
  if (auto watchdog = ctx.watchdog.lock()) {
    watchdog->add(shared_context());
  }
  publish_progress(ctx);
}

NcclCommunicator::~NcclCommunicator() {
  CommContext& ctx = context();
  ctx.set_backend_abort(nullptr);
  // The blocking communicator's destroy flushes outstanding work without a deadline: let the
  // collectives in flight finish first (the watchdog fails them at their deadline), and abort
  // instead when they do not.
  const auto deadline = Clock::now() + ctx.timeout();
  bool drained = false;
  while (true) {
    try {
      drained = ctx.in_flight().empty();
    } catch (const std::exception&) {
      drained = false;
      break;
    }
    if (drained || ctx.aborted() || Clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    const std::lock_guard<std::mutex> lock(handle_->mutex);
    handle_->honour_abort_request_locked();
    if (!handle_->aborted() && !drained) {
      COHORT_LOG(warn) << "destroying " << ctx.describe()
                       << " with collectives still in flight; aborting it";
      handle_->abort_locked();
      if (handle_->sharing) handle_->sharing->abort_all_but(ctx);
    }
    if (!handle_->aborted()) {
      const CudaDeviceScope scope(handle_->device.index());
      // Destroy is an intra-node collective, so the World destroys its communicators in the
      // same order on every rank.
      ncclComm_t comm = handle_->held.comm;
      ncclComm_t control = handle_->held.control;
      handle_->held.release();
      if (comm != nullptr && ncclCommDestroy(comm) != ncclSuccess) {
        COHORT_LOG(warn) << "ncclCommDestroy failed for " << ctx.describe();
      }
      if (control != nullptr) {
        ncclResult_t result = ncclCommFinalize(control);
        if (result == ncclSuccess || result == ncclInProgress) {
          result = settle(control, deadline);
        }
        if (result != ncclSuccess) {
          COHORT_LOG(warn) << "finalizing " << ctx.describe() << " failed ("
                           << ncclGetErrorString(result) << "); aborting it instead";
          (void)ncclCommAbort(control);
        } else if (ncclCommDestroy(control) != ncclSuccess) {
          COHORT_LOG(warn) << "ncclCommDestroy failed for " << ctx.describe();
        }
      }
    }
    // Probes still held by unfinished works must not touch the communicators any more.
    handle_->held.release();
  }
  // Only now: cudaFree synchronizes the device, which would wait for ever on a kernel stuck on a
  // dead peer if the communicator had not been destroyed or aborted first.
  if (handle_->scratch != nullptr) {
    const CudaDeviceScope scope(handle_->device.index());
    COHORT_CUDA_CHECK_NOEXCEPT(cudaFree(handle_->scratch));
    handle_->scratch = nullptr;
  }
}

void* NcclCommunicator::native_handle() const noexcept {
  return handle_->held.comm;
}

void NcclCommunicator::run(const Call& call, const Stream& stream,
                           const std::shared_ptr<WorkState>& work) {
  CommContext& ctx = context();
  auto cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
  const CudaDeviceScope scope(ctx.device.index());
  const ncclDataType_t dtype = to_nccl(call.input.dtype());
  ncclResult_t result = ncclSuccess;
  const char* name = "";
  {
    const std::lock_guard<std::mutex> lock(handle_->mutex);
    COHORT_CHECK(!handle_->aborted(), Error,
                 ctx.describe() + " was aborted: " + ctx.abort_reason());
    if (handle_->solo) {
      try {
        run_alone(call, cuda_stream);
      } catch (const std::exception& error) {
        fail_collective(ctx, *work, /*timed_out=*/false, error.what());
        work->rethrow_if_failed();
        return;
      }
    } else {
      ncclComm_t comm = handle_->held.comm;
      switch (call.op) {
        case CollectiveOp::all_reduce:
          name = "ncclAllReduce";
          result = ncclAllReduce(call.input.data(), call.output.data(), call.output.count(), dtype,
                                 to_nccl(call.reduce), comm, cuda_stream);
          break;
        case CollectiveOp::reduce_scatter:
          name = "ncclReduceScatter";
          result = ncclReduceScatter(call.input.data(), call.output.data(), call.output.count(),
                                     dtype, to_nccl(call.reduce), comm, cuda_stream);
          break;
        case CollectiveOp::all_gather:
          name = "ncclAllGather";
          result = ncclAllGather(call.input.data(), call.output.data(), call.input.count(), dtype,
                                 comm, cuda_stream);
          break;
        case CollectiveOp::broadcast:
          name = "ncclBroadcast";
          result = ncclBroadcast(call.output.data(), call.output.data(), call.output.count(), dtype,
                                 call.root, comm, cuda_stream);
          break;
        case CollectiveOp::barrier:
          name = "ncclAllReduce (barrier)";
          result = ncclAllReduce(handle_->scratch, handle_->scratch, 1, ncclFloat32, ncclSum, comm,
                                 cuda_stream);
          break;
      }
      // An abort that came while this thread was inside NCCL (Note [NCCL communicators]).
      handle_->honour_abort_request_locked();
    }
  }
  if (result == ncclInvalidArgument) {
    // NCCL: the call had no effect and the communicator is still usable.
    COHORT_FAIL(InvalidArgument,
                ctx.describe() + ": " + describe_nccl_error(name, result, handle_->held.comm));
  }
  if (result != ncclSuccess) {
    fail_collective(ctx, *work, /*timed_out=*/false,
                    describe_nccl_error(name, result, handle_->held.comm));
    work->rethrow_if_failed();
    return;
  }
  // Completion is a mark after the kernel (from a pool, given back once seen done: no CUDA
  // object is created per collective, Note [Step events]); the watchdog and Work::done poll it,
  // and the communicator for asynchronous (network) errors. The probe only reports: it fails
  // the work through fail_collective, which never polls probes (WorkState::finished), and no
  // caller of a probe holds the context's lock (CommContext::in_flight).
  std::shared_ptr<CompletionMark> done = handle_->events.mark(stream);
  work->set_completion_probe(
      [done, handle = handle_, context = shared_context(), work_ptr = work.get()] {
        // An abort makes NCCL's kernels return early, and the mark after them then completes:
        // after an abort, a collective not yet seen done is not reported done, so the abort
        // fails it (CommContext::fail_in_flight) instead of handing back a partial reduction.
        if (context->aborted()) {
          return false;
        }
        try {
          if (done->ready()) {
            return true;
          }
        } catch (const std::exception& error) {
          // A sticky CUDA error (a kernel fault on this device): the collective will never
          // complete. Fail it now, so the failure is published and every rank aborts, rather
          // than letting every peer wait for the deadline.
          fail_collective(*context, *work_ptr, /*timed_out=*/false,
                          std::string("its completion could not be checked: ") + error.what());
          return true;
        }
        ncclResult_t async = ncclSuccess;
        {
          // Never waits for the lock: a thread stuck inside a collective's enqueue holds it, and
          // the watchdog, which calls this probe, must stay free to enforce the deadlines.
          const std::unique_lock<std::mutex> probe_lock(handle->mutex, std::try_to_lock);
          if (!probe_lock.owns_lock()) {
            return false;
          }
          handle->honour_abort_request_locked();
          if (handle->held.comm == nullptr || handle->aborted()) {
            return false;  // the abort fails the work; nothing more to ask NCCL (or none: solo)
          }
          (void)ncclCommGetAsyncError(handle->held.comm, &async);
        }
        if (async != ncclSuccess && async != ncclInProgress) {
          fail_collective(*context, *work_ptr, /*timed_out=*/false,
                          describe_nccl_error("asynchronous NCCL error", async, nullptr));
          return true;
        }
        return false;
      });
}

// Note [One-member communicators]
// A group of one rank (cross on one node, local with one GPU per node, a program's split that
// leaves a rank alone) has nothing to exchange: every collective's result is its input. Its
// communicator holds no NCCL communicator; its collectives are a device-to-device copy on the
// stream where the output is elsewhere (nothing for in place, a broadcast or a barrier), tracked,
// recorded and watched like any other. ncclCommSplit is collective over the parent, so a rank
// alone in its group still takes part, with NCCL_SPLIT_NOCOLOR, while others form groups of
// several; when no group has several members (the split plan says so, the same on every rank)
// no rank calls NCCL at all.
std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key, std::string name) {
  CommContext& parent = context();
  const SplitPlan plan = plan_split(parent, color, key);
  const std::string what = "rank " + std::to_string(parent.global_rank(parent.rank())) +
                           ": splitting " + parent.describe();
  const CudaDeviceScope scope(parent.device.index());
  const auto deadline = Clock::now() + parent.timeout();
  const bool alone = plan.member && plan.parent_ranks.size() == 1;
  auto handle = std::make_shared<Handle>(parent.device);
  if (plan.largest_group > 1) {
    // ncclCommSplit is collective over the parent: every rank calls it, NOCOLOR included. The
    // split goes through the parent's non-blocking control communicator, sharing its resources,
    // and the child's own blocking communicator for collectives is split from the child's
    // control one (Note [NCCL communicators], Note [Sharing NCCL's resources]).
    auto [result, child_control] =
        split_settled(handle_->held.control, plan.member && !alone ? color : NCCL_SPLIT_NOCOLOR,
                      key, /*control_child=*/true, deadline, handle_.get());
    handle->held.control = child_control;  // Note [Communicators made halfway]
    count_nccl_communicator(child_control);
    if (result != ncclSuccess && child_control == nullptr) {
      // The parent has a split in flight that may never end: abort it (every rank must, and
      // the failure reaches the others through the watchdog).
      parent.abort(what + " failed");
    }
    check_settled(result, "ncclCommSplit", nullptr, what, parent.timeout());
  }
  if (!plan.member) {
    return nullptr;
  }
  if (alone) {
    handle->solo = true;  // Note [One-member communicators]
  } else {
    handle->sharing = handle_->sharing;
    auto [data_result, child_comm] = split_settled(handle->held.control, 0, plan.rank,
                                                   /*control_child=*/false, deadline, nullptr);
    handle->held.comm = child_comm;
    count_nccl_communicator(child_comm);
    check_settled(data_result, "ncclCommSplit (the blocking communicator for collectives)", nullptr,
                  what, parent.timeout());
  }
  auto child = make_child_context(parent, plan, std::move(name));
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(child), std::move(handle)));
}

}  // namespace cohort::detail
