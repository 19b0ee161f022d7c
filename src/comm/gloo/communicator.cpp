#include "comm/gloo/communicator.hpp"

#include "comm/call_signature.hpp"
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
#include <mutex>
#include <vector>

namespace cohort::detail {

/// What a communicator's worker and its abort share about the collective running (Note [Gloo on
/// the caller's buffers]), and the worker's memory for the reduce-scatter (one at a time).
struct GlooRun {
  std::mutex mutex;
  std::shared_ptr<WorkState> work;  // guarded by mutex: the collective on the caller's buffers
  bool let_go = false;              // guarded by mutex: set by the abort, for good
  std::vector<std::byte> scratch;   // the worker's alone

  template <typename T>
  T* scratch_for(std::size_t count) {
    if (scratch.size() < count * sizeof(T)) {
      scratch.resize(count * sizeof(T));
    }
    return reinterpret_cast<T*>(scratch.data());
  }
};

namespace {

// Note [Aborting Gloo]
// Gloo has no abort of its own: closing a pair's connection stops its data but does not wake the
// operations waiting on it, which would wait for Gloo's timeout. What Gloo does when one of its
// waits times out is to fail every pair of the context: each pending operation is woken with the
// error, and the pair, closed under its lock, reads into no buffer again. The communicator's
// abort does the same (fail_gloo_operations), so on the aborting rank the collective returns at
// once, and its peers, whose connections to it close, fail theirs as they notice. Each operation
// still gets the collective's deadline plus a grace as Gloo's own timeout: the watchdog, which
// polls and knows more than Gloo's "timed out", is the one to report a hang, and Gloo's timeout
// only ends a wait that nothing else ended: a receive already under way when the abort comes (the
// pair in the middle of reading a message) is not among the operations Gloo wakes; its closed pair
// reads no more into the buffer, and the abort fails the collective without waiting for it (Note
// [Gloo on the caller's buffers]), but the worker stays in it until that timeout. A communicator
// destroyed after an abort waits for its worker thread only so long (Note [Host worker
// teardown]): the worker holds what it uses (the Gloo context, the communicator's context, its
// scratch memory) and nothing of the communicator.
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

/// The collective the calling thread (a worker) runs: Gloo calls the reduction on the thread that
/// called it, with no argument of cohort's.
thread_local GlooRun* t_running = nullptr;

/// Runs `write`, which writes into the caller's buffers, unless the abort has let go of them;
/// the abort waits for a write under way (Note [Gloo on the caller's buffers]).
template <typename Write>
void write_unless_let_go(GlooRun& run, const Write& write) {
  const std::lock_guard<std::mutex> lock(run.mutex);
  COHORT_CHECK(!run.let_go, Error,
               "the communicator was aborted, and its buffers given back, during the collective");
  write();
}

template <typename T, typename Op>
void reduce_into_buffer(void* c, const void* a, const void* b, std::size_t n) {
  write_unless_let_go(*t_running, [&] { reduce_elements<T, Op>(c, a, b, n); });
}

template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::min:
      return &reduce_into_buffer<T, Min>;
    case ReduceOp::max:
      return &reduce_into_buffer<T, Max>;
    case ReduceOp::sum:
    case ReduceOp::avg:
      return &reduce_into_buffer<T, Sum>;
  }
  return &reduce_into_buffer<T, Sum>;
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

// Note [Gloo on the caller's buffers]
// Gloo runs on the caller's buffers: the all-reduce in place in the output (the input copied
// there first when it is elsewhere), the broadcast in the output, the all-gather in the output
// with this rank's part copied into place first. A wait for a work that failed returns only once
// its buffers are given back (Note [Buffers after a failure]): the caller frees them while
// unwinding, so nothing may write into them after that. Two things write into them during a
// collective: Gloo's transport, receiving, and the worker thread, in cohort's own code (the
// copies before and after, and the reduction, which Gloo calls). So the abort that follows every
// failure:
// 1. fails Gloo's pairs (Note [Aborting Gloo]), or closes them where it cannot; either way each
//    pair is closed under its lock, so once that returns the transport writes into no buffer;
// 2. takes the mutex under which the worker makes each of its writes, waiting for one under way,
//    and marks the buffers let go: a later write throws instead (write_unless_let_go);
// 3. fails the collective running and gives its buffers back, without waiting for the worker to
//    come out of Gloo.
// Those three make it safe. Failing the pairs, rather than closing them, is what makes the worker
// come out at once, so that it is joined when the communicator goes (Note [Host worker
// teardown]); a receive that was already under way is not among the operations Gloo wakes, and
// its worker stays until Gloo's timeout, harmlessly, its pair closed.
// Before, the abort only closed Gloo's connections, and ThreadSanitizer caught Gloo's reduction
// writing into a vector its caller had freed. The answer then was Gloo on the worker's own memory,
// with a copy in and a copy out per collective: 16-20% of the bus bandwidth from 1 MiB up (136
// against 103 ms for raw Gloo at 64 MiB, 4 ranks on 2 cores; docs/performance.md). The
// reduce-scatter still all-reduces a copy of its input (Gloo has no reduce-scatter, and the input
// is the caller's to keep) and copies this rank's part out. One rank alone calls no Gloo.

// Note [Gloo tags from the call]
// Every Gloo collective of a communicator used to run with tag 0, so ranks that called different
// counts (a bug in the program) exchanged messages of different lengths on one slot, and Gloo's
// transport, finding a message longer than the receive posted for it, failed an enforce on its
// own event-loop thread: std::terminate, the process gone before cohort's deadline could name
// anything (seen with ZeRO-3's unit all-gathers; Note [Unit tags]). Each collective's tag is now
// 32 bits of its call signature (Note [Call signatures]): ranks that called different things
// post their sends and receives on different slots, Gloo's rendezvous (a send waits for the
// peer's notice that a receive is ready on its slot) matches none of them, and nothing moves.
// The collective then passes its deadline like any hang, and the diagnosis names the ranks and
// both calls (Note [Different calls at one point]). Calls that match keep one tag, so Gloo's
// per-pair order still pairs consecutive equal collectives. The cost is nothing per collective;
// two different calls collide on a tag with a chance of 2^-32, and then fail as before.

/// Runs one collective on the calling thread, the worker's, on the caller's buffers (Note [Gloo on
/// the caller's buffers]).
void execute(const Communicator::Call& call, const std::shared_ptr<gloo::Context>& gloo,
             const CommContext& ctx, const std::shared_ptr<WorkState>& work, GlooRun& run) {
  const auto timeout = ctx.timeout() + kGlooGrace;
  {
    const std::lock_guard<std::mutex> lock(run.mutex);
    COHORT_CHECK(!run.let_go, Error, ctx.describe() + " was aborted: " + ctx.abort_reason());
    run.work = work;
  }
  t_running = &run;
  const struct Done {
    GlooRun& run;
    ~Done() {
      t_running = nullptr;
      const std::lock_guard<std::mutex> lock(run.mutex);
      run.work.reset();
    }
  } done{run};
  auto check_not_aborted = [&] {
    COHORT_CHECK(!ctx.aborted(), Error, ctx.describe() + " was aborted: " + ctx.abort_reason());
  };
  if (call.op == CollectiveOp::barrier) {
    gloo::BarrierOptions options(gloo);
    options.setTimeout(timeout);
    gloo::barrier(options);
    return;
  }
  const bool alone = ctx.size() == 1;
  // Note [Gloo tags from the call]
  const std::uint32_t slot_tag = signature_tag(call_signature(call));
  visit_dtype(call.input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* input = static_cast<const T*>(call.input.data());
    auto* output = static_cast<T*>(call.output.data());
    auto all_reduce = [&](T* data, std::size_t count) {
      gloo::AllreduceOptions options(gloo);
      options.setOutput(data, count);
      options.setReduceFunction(reduce_function<T>(call.reduce));
      options.setTag(slot_tag);
      options.setTimeout(timeout);
      gloo::allreduce(options);
      check_not_aborted();
    };
    switch (call.op) {
      case CollectiveOp::all_reduce: {
        const std::size_t count = call.output.count();
        if (count == 0) {
          return;
        }
        if (input != output) {  // the input is the result alone (avg divides by one)
          write_unless_let_go(run, [&] { std::memmove(output, input, call.output.bytes()); });
        }
        if (alone) {
          return;
        }
        all_reduce(output, count);
        if (call.reduce == ReduceOp::avg) {
          write_unless_let_go(run, [&] { divide(output, count, ctx.size()); });
        }
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
          write_unless_let_go(run, [&] { std::memmove(output, input, count * sizeof(T)); });
          return;
        }
        T* data = run.scratch_for<T>(call.input.count());
        std::memcpy(data, input, call.input.bytes());
        all_reduce(data, call.input.count());
        T* mine = data + static_cast<std::size_t>(ctx.rank()) * count;
        if (call.reduce == ReduceOp::avg) {
          divide(mine, count, ctx.size());
        }
        write_unless_let_go(run, [&] { std::memmove(output, mine, count * sizeof(T)); });
        return;
      }
      case CollectiveOp::all_gather: {
        const std::size_t count = call.input.count();
        if (count == 0) {
          return;
        }
        // This rank's part in place first (Gloo would copy it itself, outside cohort's writes).
        T* mine = output + (alone ? 0 : static_cast<std::size_t>(ctx.rank()) * count);
        if (input != mine) {
          write_unless_let_go(run, [&] { std::memmove(mine, input, count * sizeof(T)); });
        }
        if (alone) {
          return;
        }
        gloo::AllgatherOptions options(gloo);
        options.setOutput(output, count * static_cast<std::size_t>(ctx.size()));
        options.setTag(slot_tag);
        options.setTimeout(timeout);
        gloo::allgather(options);
        check_not_aborted();
        return;
      }
      case CollectiveOp::broadcast: {
        const std::size_t count = call.output.count();
        if (count == 0 || alone) {
          return;
        }
        gloo::BroadcastOptions options(gloo);
        options.setRoot(call.root);
        options.setOutput(output, count);
        options.setTag(slot_tag);
        options.setTimeout(timeout);
        gloo::broadcast(options);
        check_not_aborted();
        return;
      }
      case CollectiveOp::barrier:
        return;
    }
  });
}

/// The communicator's abort (Note [Gloo on the caller's buffers]).
void abort_gloo(gloo::Context& gloo, GlooRun& run, CommContext* owner) noexcept {
  const std::string why = owner != nullptr
                              ? owner->describe() + " was aborted: " + owner->abort_reason()
                              : std::string("the communicator was aborted");
  fail_gloo_operations(gloo, why);
  std::shared_ptr<WorkState> running;
  {
    const std::lock_guard<std::mutex> lock(run.mutex);
    run.let_go = true;
    running = std::move(run.work);
  }
  if (running) {
    if (owner != nullptr) {
      fail_collective(*owner, *running, /*timed_out=*/false, why);
    }
    running->release();
  }
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
  run_ = std::make_shared<GlooRun>();
  ctx.set_backend_abort(
      [gloo = gloo_, run = run_, context = std::weak_ptr<CommContext>(shared_context())] {
        const auto owner = context.lock();
        abort_gloo(*gloo, *run, owner.get());
      });
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
  // The task owns what it uses (the Gloo context, the run's state, the work): after an abort it may
  // outlive this communicator (Note [Host worker teardown]).
  run_on_worker(*worker_, stream, work, shared_context(),
                [call, gloo = gloo_, context = shared_context(), work, run = run_] {
                  execute(call, gloo, *context, work, *run);
                });
}

std::unique_ptr<Communicator> GlooCommunicator::do_split(int color, int key, std::string name) {
  return split_host_communicator(context(), host_, color, key, std::move(name));
}

}  // namespace cohort::detail
