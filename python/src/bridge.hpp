#pragma once

// The interface between the package's two extension modules.
//
// Note [Two extension modules]
// ----------------------------
// `cohort._core` (nanobind) holds the whole C++ library and the framework-neutral API; it links
// no PyTorch. `cohort._torch` (pybind11, against the installed libtorch) holds only the
// `c10d::Backend` that torch.distributed calls, and reaches the library through the abstract
// classes below, handed over as a capsule: it links neither cohort nor Gloo. Why two:
// - libtorch_cpu.so exports a Gloo of its own (hundreds of `gloo::` symbols) while cohort links
//   the system's libgloo; one module linking both would bind some Gloo calls to the other copy.
//   Here libtorch is never in the lookup scope of the module that holds Gloo.
// - Only `_torch` depends on the torch it was built against (Note [Torch version lock] in
//   python/cohort/_torch_backend.py); `import cohort` and the DLPack API work with any torch or
//   none.
// - Both are built by the same compiler in one CMake build, so virtual calls, std::string,
//   std::function and std::shared_ptr cross between them safely. Exceptions never do: a call
//   returns an `Outcome`, which the caller turns into its own kind of error.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace cohort::python {

/// Bumped whenever the classes below change, so that modules of two builds refuse each other.
inline constexpr int kBridgeVersion = 1;

enum class Status : std::int32_t {
  ok = 0,
  invalid_argument,  ///< the caller's mistake; nothing ran
  timeout,           ///< a deadline passed (a rank did not arrive, a store key never appeared)
  error,             ///< anything else: a peer failed, the group was aborted
};

struct Outcome {
  Status status = Status::ok;
  std::string message;
  bool ok() const noexcept { return status == Status::ok; }
};

/// `count` elements of cohort dtype `dtype` (the value of `cohort::DType`) at `data`, in host
/// memory or on CUDA device `device`.
struct Buffer {
  void* data = nullptr;
  std::uint64_t count = 0;
  std::int32_t dtype = 0;
  bool cuda = false;
  std::int32_t device = 0;
};

/// The values of `cohort::CollectiveOp` and `cohort::ReduceOp`.
enum class Op : std::int32_t { all_reduce, reduce_scatter, all_gather, broadcast, barrier };
enum class Reduce : std::int32_t { sum, avg, min, max };

/// One collective in flight.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  /// Whether it has finished, successfully or not; never blocks.
  virtual bool done() const = 0;
  /// Blocks until it has finished (at most `timeout_ms`, unless negative) and says how it ended;
  /// on the host, once it returns the library no longer touches the buffers.
  virtual Outcome wait(std::int64_t timeout_ms) = 0;
  /// Calls `callback` once with the outcome when the work has finished: at once, on this
  /// thread, when it already has; otherwise on the group's completion thread, in issue order.
  virtual void when_done(std::function<void(const Outcome&)> callback) = 0;
  /// CUDA only: makes `cuda_stream` (a cudaStream_t) wait for the collective.
  virtual Outcome block_stream(void* cuda_stream) = 0;
};

/// A group of ranks: collectives over host memory (shared memory, Gloo) and, made at its first
/// CUDA buffer, over CUDA memory (NCCL).
class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "rank 1 of 4 (local 1 of 4, node 0 of 1) on host, shm".
  virtual std::string describe() const = 0;
  /// Starts a collective. Host buffers: ordered after the group's earlier collectives; with
  /// `async_op` false the call may return only once it is done (the caller waits anyway). CUDA
  /// buffers: enqueued on `cuda_stream` (a cudaStream_t; nullptr for the legacy default stream),
  /// after the work already there; later work on that stream runs after it.
  virtual Outcome issue(Op op, const Buffer& input, const Buffer& output, Reduce reduce, int root,
                        void* cuda_stream, bool async_op, std::shared_ptr<PendingWork>* work) = 0;
  /// Fails this group's collectives in flight and later ones with `reason`.
  virtual void abort(const std::string& reason) = 0;
};

/// What the capsule "cohort.group" holds.
struct GroupHandle {
  int version = kBridgeVersion;
  std::shared_ptr<Group> group;
};

}  // namespace cohort::python
