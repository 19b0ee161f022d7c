#include "comm/gloo/communicator.hpp"

#include "comm/gloo/device.hpp"
#include "comm/gloo/mesh.hpp"
#include "comm/host/select.hpp"
#include "comm/watchdog.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/transport/device.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace cohort::detail {

/// Memory of a communicator's worker, reused by its collectives (one at a time).
struct GlooScratch {
  std::vector<std::byte> bytes;
  template <typename T>
  T* get(std::size_t count) {
    if (bytes.size() < count * sizeof(T)) {
      bytes.resize(count * sizeof(T));
    }
    return reinterpret_cast<T*>(bytes.data());
  }
};

namespace {

// Note [Aborting Gloo]
// Gloo cannot interrupt an operation blocked on a peer: closing the connections stops further
// data but does not wake the waiting buffers, which wait for Gloo's own timeout. So each
// operation gets the collective's deadline as its Gloo timeout (the watchdog diagnoses first: it
// polls, Gloo would only say "timed out"), and a communicator destroyed after an abort waits for
// its worker thread only so long (Note [Host worker teardown]): the worker holds what it uses
// (the Gloo context, the communicator's context, its scratch memory) but nothing of the
// communicator object, and Gloo never runs on user buffers (Note [Gloo on its own buffers]).
// Gloo's timeout is the deadline plus a grace, so that the watchdog, which knows more, is the
// one to report it.
constexpr auto kGlooGrace = std::chrono::seconds(2);

// Element-wise reductions in Gloo's signature, c = a (op) b. 16-bit floats reduce in float and
// round once per step, as NCCL does.
template <typename T>
float widen(T value) {
  return static_cast<float>(value);
}

template <typename T, typename Op>
void reduce_elements(void* c, const void* a, const void* b, std::size_t n) {
  auto* out = static_cast<T*>(c);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
      out[i] = T(Op{}(widen(x[i]), widen(y[i])));
    } else {
      out[i] = static_cast<T>(Op{}(x[i], y[i]));
    }
  }
}

struct Sum {
  template <typename V>
  V operator()(V a, V b) const {
    return static_cast<V>(a + b);
  }
};
struct Min {
  template <typename V>
  V operator()(V a, V b) const {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename V>
  V operator()(V a, V b) const {
    return a < b ? b : a;
  }
};

template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::min:
      return &reduce_elements<T, Min>;
    case ReduceOp::max:
      return &reduce_elements<T, Max>;
    case ReduceOp::sum:
    case ReduceOp::avg:
      return &reduce_elements<T, Sum>;
  }
  return &reduce_elements<T, Sum>;
}

/// Divides each element by `divisor` (the avg after a sum); integers truncate toward zero.
template <typename T>
void divide(T* data, std::size_t count, int divisor) {
  for (std::size_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
      data[i] = T(widen(data[i]) / static_cast<float>(divisor));
    } else {
      data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
    }
  }
}

// Note [Gloo on its own buffers]
// Gloo cannot be interrupted (Note [Aborting Gloo]): a collective blocked on a peer that failed
// returns only at Gloo's own timeout, and until then the data that other peers still send is
// reduced into its buffers. Had those been the caller's, the caller, told of the failure (its
// wait returns once the buffers are released, or after kReleasePatience), would free them while
// Gloo still wrote into them: ThreadSanitizer caught a reduction writing into a freed vector.
// So the worker copies the input into memory of its own, releases the caller's buffers before
// Gloo runs (a failed work's wait then returns at once), and writes the result back only if the
// work has not failed meanwhile, holding the buffers again for that copy
// (WorkState::hold_unless_finished). It costs a copy in and a copy out per collective: 4 ranks
// on 2 cores over loopback took 136 ms at 64 MiB against 103 ms for raw Gloo (docs/performance.md),
// where Gloo on the caller's buffers was within 3% of it. One rank alone calls no Gloo and
// copies directly.

/// Copies `bytes` of the result into the caller's buffer unless the work failed meanwhile.
void write_back(WorkState& work, void* destination, const void* source, std::size_t bytes) {
  if (bytes == 0 || !work.hold_unless_finished()) {
    return;
  }
  std::memcpy(destination, source, bytes);
  work.release();
}

/// Runs one collective on the calling thread, the worker's. Gloo works on `scratch` only, and
/// the caller's buffers are touched before Gloo runs and, unless the work failed, after.
void execute(const Communicator::Call& call, const std::shared_ptr<gloo::Context>& gloo,
             const CommContext& ctx, WorkState& work, GlooScratch& scratch) {
  const auto timeout = ctx.timeout() + kGlooGrace;
  auto check_not_aborted = [&] {
    COHORT_CHECK(!ctx.aborted(), Error, ctx.describe() + " was aborted: " + ctx.abort_reason());
  };
  if (call.op == CollectiveOp::barrier) {
    work.release();
    gloo::BarrierOptions options(gloo);
    options.setTimeout(timeout);
    gloo::barrier(options);
    return;
  }
  const bool alone = ctx.size() == 1;
  visit_dtype(call.input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* input = static_cast<const T*>(call.input.data());
    auto* output = static_cast<T*>(call.output.data());
    // Copies `count` elements of `from` into the scratch, lets go of the caller's buffers and
    // all-reduces the copy; returns it.
    auto all_reduce_in_scratch = [&](const T* from, std::size_t count) {
      T* data = scratch.get<T>(count);
      std::memcpy(data, from, count * sizeof(T));
      work.release();
      gloo::AllreduceOptions options(gloo);
      options.setOutput(data, count);
      options.setReduceFunction(reduce_function<T>(call.reduce));
      options.setTimeout(timeout);
      gloo::allreduce(options);
      check_not_aborted();
      return data;
    };
    switch (call.op) {
      case CollectiveOp::all_reduce: {
        const std::size_t count = call.output.count();
        if (count == 0) {
          return;
        }
        if (alone) {  // the input is the result (avg divides by one)
          std::memmove(output, input, call.output.bytes());
          return;
        }
        T* data = all_reduce_in_scratch(input, count);
        if (call.reduce == ReduceOp::avg) {
          divide(data, count, ctx.size());
        }
        write_back(work, output, data, call.output.bytes());
        return;
      }
      case CollectiveOp::reduce_scatter: {
        // Gloo has no reduce-scatter in its current API: all-reduce a copy, keep this rank's
        // part. Twice the traffic of a ring reduce-scatter; the GPU path uses NCCL's own.
        const std::size_t count = call.output.count();
        if (count == 0) {
          return;
        }
        if (alone) {
          std::memmove(output, input, count * sizeof(T));
          return;
        }
        T* mine = all_reduce_in_scratch(input, call.input.count()) +
                  static_cast<std::size_t>(ctx.rank()) * count;
        if (call.reduce == ReduceOp::avg) {
          divide(mine, count, ctx.size());
        }
        write_back(work, output, mine, count * sizeof(T));
        return;
      }
      case CollectiveOp::all_gather: {
        const std::size_t count = call.input.count();
        if (count == 0) {
          return;
        }
        if (alone) {
          std::memmove(output, input, count * sizeof(T));
          return;
        }
        const std::size_t total = count * static_cast<std::size_t>(ctx.size());
        T* gathered = scratch.get<T>(total + count);
        T* mine = gathered + total;  // the input may lie inside the output: staged apart
        std::memcpy(mine, input, count * sizeof(T));
        work.release();
        gloo::AllgatherOptions options(gloo);
        options.setInput(mine, count);
        options.setOutput(gathered, total);
        options.setTimeout(timeout);
        gloo::allgather(options);
        check_not_aborted();
        write_back(work, output, gathered, total * sizeof(T));
        return;
      }
      case CollectiveOp::broadcast: {
        const std::size_t count = call.output.count();
        if (count == 0 || alone) {
          return;
        }
        T* data = scratch.get<T>(count);
        const bool root = ctx.rank() == call.root;
        if (root) {
          std::memcpy(data, output, count * sizeof(T));
        }
        work.release();
        gloo::BroadcastOptions options(gloo);
        options.setRoot(call.root);
        options.setOutput(data, count);
        options.setTimeout(timeout);
        gloo::broadcast(options);
        check_not_aborted();
        if (!root) {
          write_back(work, output, data, count * sizeof(T));
        }
        return;
      }
      case CollectiveOp::barrier:
        return;
    }
  });
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<CommContext> context,
                                   std::shared_ptr<const HostContext> host)
    : Communicator(std::move(context)),
      host_(std::move(host)),
      device_(shared_gloo_device(*host_)) {
  CommContext& ctx = this->context();
  expect_backend(ctx, Backend::gloo);  // Note [The backend, decided once]
  ctx.backend_version = "Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." +
                        std::to_string(GLOO_VERSION_MINOR) + "." +
                        std::to_string(GLOO_VERSION_PATCH);
  ctx.group.barrier("gloo/joined");
  // Watched from the start, so that a failure elsewhere ends the connect (its pairs are closed).
  if (auto watchdog = ctx.watchdog.lock()) {
    watchdog->add(shared_context());
  }
  gloo_ = connect_gloo_mesh(ctx, device_, ctx.timeout() + kGlooGrace);
  worker_ = HostWorker::start();
  scratch_ = std::make_shared<GlooScratch>();
  ctx.set_backend_abort([gloo = gloo_] { gloo->closeConnections(); });
  publish_progress(ctx);
}

GlooCommunicator::~GlooCommunicator() {
  worker_->stop(/*aborted=*/context().aborted());  // Note [Host worker teardown]
}

void* GlooCommunicator::native_handle() const noexcept {
  return gloo_.get();
}

void GlooCommunicator::run(const Call& call, const Stream& stream,
                           const std::shared_ptr<WorkState>& work) {
  // The task owns what it uses (the Gloo context, the scratch, the work): after an abort it may
  // outlive this communicator (Note [Host worker teardown]).
  run_on_worker(*worker_, stream, work, shared_context(),
                [call, gloo = gloo_, context = shared_context(), work, scratch = scratch_] {
                  execute(call, gloo, *context, *work, *scratch);
                });
}

std::unique_ptr<Communicator> GlooCommunicator::do_split(int color, int key, std::string name) {
  return split_host_communicator(context(), host_, color, key, std::move(name));
}

}  // namespace cohort::detail
