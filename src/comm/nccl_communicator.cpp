#include "nccl_communicator.hpp"

#include "watchdog.hpp"

#include <cohort/core/backoff.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/detail/cuda_check.hpp>
#include <cohort/detail/cuda_device_scope.hpp>
#include <cohort/detail/nccl_check.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace cohort::detail {

// Note [NCCL communicators]
// Communicators are non-blocking (config.blocking = 0): every call may return ncclInProgress and
// is then polled with ncclCommGetAsyncError until it settles or the deadline passes. That is what
// makes ncclCommAbort always possible: a blocking communicator can hang a thread inside NCCL for
// ever when a peer dies. One mutex per communicator keeps the issuing thread and the watchdog's
// abort from calling NCCL on it at the same time (NCCL is not thread-safe per communicator), and
// every NCCL call is short because none of them blocks.

struct NcclCommunicator::Handle {
  std::mutex mutex;
  ncclComm_t comm = nullptr;
  bool aborted = false;
  Device device = Device::host();
  float* scratch = nullptr;  // one float for barriers
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

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
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
    : Communicator(std::move(context)), handle_(std::make_shared<Handle>()) {
  CommContext& ctx = this->context();
  ctx.backend = Backend::nccl;
  ctx.backend_version = nccl_version_string();
  handle_->device = ctx.device;
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
  ncclConfig_t config = nonblocking_config();
  const ncclResult_t started = ncclCommInitRankConfig(&handle_->comm, ctx.size(), id, ctx.rank(),
                                                      &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    COHORT_FAIL(NcclError,
                what + ": " + describe_nccl_error("ncclCommInitRankConfig", started, nullptr));
  }
  const ncclResult_t settled = settle(handle_->comm, Clock::now() + ctx.timeout());
  if (settled != ncclSuccess) {
    (void)ncclCommAbort(handle_->comm);
    handle_->comm = nullptr;
    check_settled(settled, "ncclCommInitRankConfig", nullptr,
                  what + " (every rank had joined the store; NCCL's own bootstrap stalled: "
                         "check NCCL_SOCKET_IFNAME and NCCL_DEBUG=INFO)",
                  ctx.timeout());
  }
  install();
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<CommContext> context,
                                   std::shared_ptr<Handle> handle)
    : Communicator(std::move(context)), handle_(std::move(handle)) {
  install();
}

void NcclCommunicator::install() {
  CommContext& ctx = context();
  COHORT_CUDA_TRY(cudaMalloc(&handle_->scratch, sizeof(float)));
  ctx.set_backend_abort([handle = handle_] {
    const std::lock_guard<std::mutex> lock(handle->mutex);
    if (handle->comm != nullptr && !handle->aborted) {
      handle->aborted = true;
      (void)ncclCommAbort(handle->comm);
    }
  });
  if (auto watchdog = ctx.watchdog.lock()) {
    watchdog->add(shared_context());
  }
  publish_progress(ctx);
}

NcclCommunicator::~NcclCommunicator() {
  context().set_backend_abort(nullptr);
  {
    const std::lock_guard<std::mutex> lock(handle_->mutex);
    if (handle_->comm != nullptr && !handle_->aborted) {
      // Finalize flushes outstanding work; destroy is an intra-node collective, so the World
      // destroys its communicators in the same order on every rank.
      const auto deadline = Clock::now() + context().timeout();
      ncclResult_t result = ncclCommFinalize(handle_->comm);
      if (result == ncclSuccess || result == ncclInProgress) {
        result = settle(handle_->comm, deadline);
      }
      if (result != ncclSuccess) {
        COHORT_LOG(warn) << "finalizing " << context().describe() << " failed ("
                         << ncclGetErrorString(result) << "); aborting it instead";
        (void)ncclCommAbort(handle_->comm);
      } else if (ncclCommDestroy(handle_->comm) != ncclSuccess) {
        COHORT_LOG(warn) << "ncclCommDestroy failed for " << context().describe();
      }
    }
    // Probes still held by unfinished works must not touch the communicator any more.
    handle_->comm = nullptr;
    handle_->aborted = true;
  }
  // Only now: cudaFree synchronizes the device, which would wait for ever on a kernel stuck on a
  // dead peer if the communicator had not been finalized or aborted first.
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
  }
  if (result == ncclInProgress) {
    // Non-blocking: the enqueue itself may still be settling; poll without holding the lock
    // between polls, so an abort can come in.
    result = settle(handle_->comm, Clock::now() + ctx.timeout(), &handle_->mutex, &handle_->aborted);
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
  // Completion is an event after the kernel; the watchdog and Work::done poll it, and the
  // communicator for asynchronous (network) errors. The probe only reports: it fails the work
  // through fail_collective, which never polls probes (WorkState::finished), and no caller of a
  // probe holds the context's lock (CommContext::in_flight).
  auto done = std::make_shared<Event>(Event::create(ctx.device));
  done->record(stream);
  work->set_completion_probe(
      [done, handle = handle_, context = shared_context(), work_ptr = work.get()] {
        if (done->ready()) {
          return true;
        }
        ncclResult_t async = ncclSuccess;
        {
          const std::lock_guard<std::mutex> probe_lock(handle->mutex);
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
  // ncclCommSplit is collective over the parent: every rank calls it, NOCOLOR included. NCCL
  // writes the child into *slot when its asynchronous job ends, which can be after a timeout
  // here: the slot is on the heap and, in that case, deliberately left to NCCL.
  auto* slot = new ncclComm_t(nullptr);
  ncclConfig_t config = nonblocking_config();
  const std::string what = "rank " + std::to_string(parent.global_rank(parent.rank())) +
                           ": splitting " + parent.describe();
  ncclResult_t result = ncclSuccess;
  {
    const CudaDeviceScope scope(parent.device.index());
    {
      const std::lock_guard<std::mutex> lock(handle_->mutex);
      COHORT_CHECK(!handle_->aborted, Error, parent.describe() + " was aborted");
      result = ncclCommSplit(handle_->comm, plan.member ? color : NCCL_SPLIT_NOCOLOR, key, slot,
                             &config);
    }
    const auto deadline = Clock::now() + parent.timeout();
    if (result == ncclInProgress || result == ncclSuccess) {
      result = settle(handle_->comm, deadline, &handle_->mutex, &handle_->aborted);
      if (result == ncclSuccess && *slot != nullptr) {
        result = settle(*slot, deadline);
      }
    }
  }
  if (result != ncclSuccess) {
    // The parent has a split in flight that may never end: abort it (every rank must, and the
    // failure reaches the others through the watchdog), and leave the slot to NCCL.
    parent.abort(what + " failed");
    check_settled(result, "ncclCommSplit", nullptr, what, parent.timeout());
  }
  ncclComm_t child_comm = *slot;
  delete slot;
  if (!plan.member) {
    return nullptr;
  }
  auto child = make_child_context(parent, plan, std::move(name));
  auto handle = std::make_shared<Handle>();
  handle->comm = child_comm;
  handle->device = parent.device;
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(child), std::move(handle)));
}

}  // namespace cohort::detail
