#include "comm/nccl/communicator.hpp"

#include "comm/watchdog.hpp"

#include <cohort/comm/detail/nccl_check.hpp>
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

struct NcclCommunicator::Handle {
  std::mutex mutex;                      // held around every NCCL call on either communicator
  ncclComm_t control = nullptr;          // non-blocking: init, split, abort
  ncclComm_t comm = nullptr;             // blocking: collectives
  bool aborted = false;                  // under mutex
  std::atomic<bool> abort_requested{false};  // set when the abort found the lock taken
  Device device = Device::host();
  float* scratch = nullptr;  // one float for barriers, on `device`
  EventPool events;          // completion events of the collectives, reused

  explicit Handle(Device on) : device(on), events(on, /*timing=*/false) {}

  /// Aborts both communicators. Call with `mutex` held.
  void abort_locked() {
    if (!aborted) {
      aborted = true;
      if (comm != nullptr) {
        (void)ncclCommAbort(comm);
      }
      if (control != nullptr) {
        (void)ncclCommAbort(control);
      }
    }
  }
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
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

/// Polls a non-blocking communicator until its pending call settles or `deadline` passes.
/// Returns the settled result, or ncclInProgress at the deadline. With `mutex`, each poll holds
/// it and nothing else does, so the watchdog's abort can come in between (Note [NCCL
/// communicators]); `aborted` (read under the mutex) ends the wait with ncclRemoteError.
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline, std::mutex* mutex = nullptr,
                    const bool* aborted = nullptr) {
  ncclResult_t state = ncclInProgress;
  Backoff backoff(std::chrono::microseconds(10), std::chrono::microseconds(2000));
  while (true) {
    {
      std::unique_lock<std::mutex> lock;
      if (mutex != nullptr) {
        lock = std::unique_lock<std::mutex>(*mutex);
        if (aborted != nullptr && *aborted) {
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
void check_settled(ncclResult_t result, const char* call, ncclComm_t comm,
                   const std::string& what, std::chrono::milliseconds timeout) {
  if (result == ncclSuccess) {
    return;
  }
  if (result == ncclInProgress) {
    COHORT_FAIL(TimeoutError, what + ": " + call + " did not complete within " +
                                  std::to_string(timeout.count()) + " ms");
  }
  COHORT_FAIL(NcclError, what + ": " + describe_nccl_error(call, result, comm));
}

ncclConfig_t config_with_blocking(int blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking;
  return config;
}

/// Splits `control` (non-blocking) with `color` into a new communicator configured `blocking`,
/// polling it against `deadline`; with `mutex`/`aborted`, as `settle`. Returns the result and,
/// on success, the child (null for NCCL_SPLIT_NOCOLOR). On failure the parent has a split in
/// flight and must be aborted; the child's slot is then left to NCCL, which may still write it.
std::pair<ncclResult_t, ncclComm_t> split_settled(ncclComm_t control, int color, int key,
                                                  int blocking, Clock::time_point deadline,
                                                  std::mutex* mutex, const bool* aborted) {
  auto* slot = new ncclComm_t(nullptr);
  ncclConfig_t config = config_with_blocking(blocking);
  ncclResult_t result = ncclSuccess;
  {
    std::unique_lock<std::mutex> lock;
    if (mutex != nullptr) {
      lock = std::unique_lock<std::mutex>(*mutex);
      if (aborted != nullptr && *aborted) {
        delete slot;
        return {ncclRemoteError, nullptr};
      }
    }
    result = ncclCommSplit(control, color, key, slot, &config);
  }
  if (result == ncclInProgress || result == ncclSuccess) {
    result = settle(control, deadline, mutex, aborted);
    if (result == ncclSuccess && *slot != nullptr) {
      result = settle(*slot, deadline);
    }
  }
  if (result != ncclSuccess) {
    return {result, nullptr};
  }
  ncclComm_t child = *slot;
  delete slot;
  return {ncclSuccess, child};
}

}  // namespace

void bind_cuda_device(Device device) {
  COHORT_EXPECTS(device.is_cuda(), "cannot bind " + device.to_string() + " as a CUDA device");
  COHORT_CUDA_TRY(cudaSetDevice(device.index()));
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
  ncclConfig_t config = config_with_blocking(0);
  const ncclResult_t started = ncclCommInitRankConfig(&handle_->control, ctx.size(), id, ctx.rank(),
                                                      &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    COHORT_FAIL(NcclError,
                what + ": " + describe_nccl_error("ncclCommInitRankConfig", started, nullptr));
  }
  const ncclResult_t settled = settle(handle_->control, deadline);
  if (settled != ncclSuccess) {
    (void)ncclCommAbort(handle_->control);
    handle_->control = nullptr;
    check_settled(settled, "ncclCommInitRankConfig", nullptr,
                  what + " (every rank had joined the store; NCCL's own bootstrap stalled: "
                         "check NCCL_SOCKET_IFNAME and NCCL_DEBUG=INFO)",
                  ctx.timeout());
  }
  const auto [result, comm] = split_settled(handle_->control, 0, ctx.rank(), /*blocking=*/1,
                                            deadline, nullptr, nullptr);
  if (result != ncclSuccess) {
    (void)ncclCommAbort(handle_->control);
    handle_->control = nullptr;
    check_settled(result, "ncclCommSplit (the blocking communicator for collectives)", nullptr,
                  what, ctx.timeout());
  }
  handle_->comm = comm;
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
  {
    // The barrier's scratch lives on the communicator's device, whatever is current here.
    const CudaDeviceScope scope(handle_->device.index());
    COHORT_CUDA_TRY(cudaMalloc(&handle_->scratch, sizeof(float)));
  }
  ctx.set_backend_abort([handle = handle_] { handle->abort(); });
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
    if (!handle_->aborted && !drained) {
      COHORT_LOG(warn) << "destroying " << ctx.describe()
                       << " with collectives still in flight; aborting it";
      handle_->abort_locked();
    }
    if (!handle_->aborted) {
      const CudaDeviceScope scope(handle_->device.index());
      // Destroy is an intra-node collective, so the World destroys its communicators in the
      // same order on every rank.
      if (handle_->comm != nullptr && ncclCommDestroy(handle_->comm) != ncclSuccess) {
        COHORT_LOG(warn) << "ncclCommDestroy failed for " << ctx.describe();
      }
      handle_->comm = nullptr;
      ncclResult_t result = ncclCommFinalize(handle_->control);
      if (result == ncclSuccess || result == ncclInProgress) {
        result = settle(handle_->control, deadline);
      }
      if (result != ncclSuccess) {
        COHORT_LOG(warn) << "finalizing " << ctx.describe() << " failed ("
                         << ncclGetErrorString(result) << "); aborting it instead";
        (void)ncclCommAbort(handle_->control);
      } else if (ncclCommDestroy(handle_->control) != ncclSuccess) {
        COHORT_LOG(warn) << "ncclCommDestroy failed for " << ctx.describe();
      }
    }
    // Probes still held by unfinished works must not touch the communicators any more.
    handle_->comm = nullptr;
    handle_->control = nullptr;
    handle_->aborted = true;
  }
  // Only now: cudaFree synchronizes the device, which would wait for ever on a kernel stuck on a
  // dead peer if the communicator had not been destroyed or aborted first.
  if (handle_->scratch != nullptr) {
    const CudaDeviceScope scope(handle_->device.index());
    COHORT_CUDA_CHECK_NOEXCEPT(cudaFree(handle_->scratch));
  }
}

void* NcclCommunicator::native_handle() const noexcept { return handle_->comm; }

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
    COHORT_CHECK(!handle_->aborted, Error, ctx.describe() + " was aborted: " + ctx.abort_reason());
    switch (call.op) {
      case CollectiveOp::all_reduce:
        name = "ncclAllReduce";
        result = ncclAllReduce(call.input.data(), call.output.data(), call.output.count(), dtype,
                               to_nccl(call.reduce), handle_->comm, cuda_stream);
        break;
      case CollectiveOp::reduce_scatter:
        name = "ncclReduceScatter";
        result = ncclReduceScatter(call.input.data(), call.output.data(), call.output.count(),
                                   dtype, to_nccl(call.reduce), handle_->comm, cuda_stream);
        break;
      case CollectiveOp::all_gather:
        name = "ncclAllGather";
        result = ncclAllGather(call.input.data(), call.output.data(), call.input.count(), dtype,
                               handle_->comm, cuda_stream);
        break;
      case CollectiveOp::broadcast:
        name = "ncclBroadcast";
        result = ncclBroadcast(call.output.data(), call.output.data(), call.output.count(), dtype,
                               call.root, handle_->comm, cuda_stream);
        break;
      case CollectiveOp::barrier:
        name = "ncclAllReduce (barrier)";
        result = ncclAllReduce(handle_->scratch, handle_->scratch, 1, ncclFloat32, ncclSum,
                               handle_->comm, cuda_stream);
        break;
    }
    // An abort that came while this thread was inside NCCL (Note [NCCL communicators]).
    handle_->honour_abort_request_locked();
  }
  if (result == ncclInvalidArgument) {
    // NCCL: the call had no effect and the communicator is still usable.
    COHORT_FAIL(InvalidArgument, ctx.describe() + ": " +
                                     describe_nccl_error(name, result, handle_->comm));
  }
  if (result != ncclSuccess) {
    fail_collective(ctx, *work, /*timed_out=*/false,
                    describe_nccl_error(name, result, handle_->comm));
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
          if (handle->comm == nullptr || handle->aborted) {
            return false;  // the abort fails the work; nothing more to ask NCCL
          }
          (void)ncclCommGetAsyncError(handle->comm, &async);
        }
        if (async != ncclSuccess && async != ncclInProgress) {
          fail_collective(*context, *work_ptr, /*timed_out=*/false,
                          describe_nccl_error("asynchronous NCCL error", async, nullptr));
          return true;
        }
        return false;
      });
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key, std::string name) {
  CommContext& parent = context();
  const SplitPlan plan = plan_split(parent, color, key);
  const std::string what = "rank " + std::to_string(parent.global_rank(parent.rank())) +
                           ": splitting " + parent.describe();
  const CudaDeviceScope scope(parent.device.index());
  const auto deadline = Clock::now() + parent.timeout();
  // ncclCommSplit is collective over the parent: every rank calls it, NOCOLOR included. The
  // split goes through the parent's non-blocking control communicator, and the child's own
  // blocking communicator for collectives is split from the child's control one (Note [NCCL
  // communicators]).
  auto [result, child_control] =
      split_settled(handle_->control, plan.member ? color : NCCL_SPLIT_NOCOLOR, key,
                    /*blocking=*/0, deadline, &handle_->mutex, &handle_->aborted);
  if (result != ncclSuccess) {
    // The parent has a split in flight that may never end: abort it (every rank must, and the
    // failure reaches the others through the watchdog).
    parent.abort(what + " failed");
    check_settled(result, "ncclCommSplit", nullptr, what, parent.timeout());
  }
  if (!plan.member) {
    return nullptr;
  }
  auto handle = std::make_shared<Handle>(parent.device);
  handle->control = child_control;
  auto [data_result, child_comm] =
      split_settled(child_control, 0, plan.rank, /*blocking=*/1, deadline, nullptr, nullptr);
  if (data_result != ncclSuccess) {
    (void)ncclCommAbort(child_control);
    check_settled(data_result, "ncclCommSplit (the blocking communicator for collectives)",
                  nullptr, what, parent.timeout());
  }
  handle->comm = child_comm;
  auto child = make_child_context(parent, plan, std::move(name));
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(child), std::move(handle)));
}

}  // namespace cohort::detail
