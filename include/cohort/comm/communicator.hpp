#pragma once

/// @file
/// `Communicator`: collectives over a group of ranks, on NCCL (GPUs) or Gloo (host).
///
/// Stream contract, for every collective below: the operation runs after the work enqueued on
/// `stream` before the call, and work enqueued on `stream` after the call runs after the operation.
/// On CUDA the operation is an NCCL kernel on `stream`; on the host it runs on the communicator's
/// own worker thread, and `stream` (a host stream) is made to wait for it. So the buffers must
/// stay alive and untouched by other streams until the operation is done: until `stream` has
/// reached that point, or `Work::wait()` has returned. The call itself never blocks on the
/// operation (except with `COHORT_DEBUG_COLLECTIVES=1`, which checks arguments across ranks first).
///
/// Every rank of the communicator must issue the same collectives, in the same order, with the
/// same counts, dtypes, ops and roots. A collective that does not finish within the deadline
/// (`CommunicatorOptions::timeout`, `COHORT_TIMEOUT`) aborts the communicator and fails with a
/// TimeoutError naming the operation and the ranks that had not arrived; a failure on one rank
/// reaches the others through the store. After an abort every collective fails at once.
///
/// Threads: a communicator may be used from one thread at a time.

#include <cohort/comm/types.hpp>
#include <cohort/comm/work.hpp>
#include <cohort/core/stream.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cohort {

namespace detail {
class CommContext;
}

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  Device device() const noexcept;
  Backend backend() const noexcept;
  /// "global", "local" (ranks on this node), "cross" (same local rank on every node), or the
  /// name given to `split`.
  const std::string& name() const noexcept;

  /// Reduces `data` across ranks in place.
  Work all_reduce(TensorView data, ReduceOp op, const Stream& stream);

  /// Reduces `input` across ranks into `output` (same count and dtype; may be the same memory).
  Work all_reduce(TensorView input, TensorView output, ReduceOp op, const Stream& stream);

  /// Reduces `input` (size() * n elements) across ranks; rank r receives elements
  /// [r * n, (r + 1) * n) of the result in `output` (n elements).
  Work reduce_scatter(TensorView input, TensorView output, ReduceOp op, const Stream& stream);

  /// Gathers every rank's `input` (n elements) into `output` (size() * n elements), rank r's at
  /// [r * n, (r + 1) * n).
  Work all_gather(TensorView input, TensorView output, const Stream& stream);

  /// Copies `root`'s `data` to every rank's `data`.
  Work broadcast(TensorView data, int root, const Stream& stream);

  /// Completes on each rank once every rank has issued it.
  Work barrier(const Stream& stream);

  /// A new communicator over the ranks that pass the same `color`, ordered by `key` (then by
  /// rank). Collective over this communicator: every rank must call it. A negative color joins
  /// no group and returns nullptr.
  std::unique_ptr<Communicator> split(int color, int key, std::string name);

  /// Aborts the communicator: in-flight and later collectives fail with `reason`. Safe from any
  /// thread; idempotent.
  void abort(const std::string& reason) noexcept;
  bool aborted() const noexcept;

  /// The backend's own handle, for calling it directly (benchmarks comparing against the raw
  /// backend): an `ncclComm_t` for NCCL, a `gloo::Context*` for Gloo. Do not mix direct calls
  /// with cohort collectives that are still in flight.
  virtual void* native_handle() const noexcept = 0;

  /// The last (up to 64) collectives of this communicator, oldest first.
  std::vector<CollectiveRecord> recent_collectives() const;

  /// One collective's arguments, as the backends receive them after validation.
  struct Call {
    CollectiveOp op;
    TensorView input;
    TensorView output;
    ReduceOp reduce;
    int root;
  };

 protected:
  explicit Communicator(std::shared_ptr<detail::CommContext> context);
  /// Starts a validated call on the backend, ordered after the work already on `stream`, and
  /// makes `stream` wait for it; completes or fails `work` when it finishes.
  virtual void run(const Call& call, const Stream& stream,
                   const std::shared_ptr<detail::WorkState>& work) = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key, std::string name) = 0;

  detail::CommContext& context() const noexcept { return *context_; }
  const std::shared_ptr<detail::CommContext>& shared_context() const noexcept { return context_; }

 private:
  Work issue(const Call& call, const Stream& stream);
  std::shared_ptr<detail::CommContext> context_;
};

}  // namespace cohort
