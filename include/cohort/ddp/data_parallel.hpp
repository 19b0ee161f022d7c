#pragma once

/// @file
/// `DataParallel`: flat parameter and gradient arenas, and gradient averaging across ranks that
/// overlaps the backward pass.
///
///     cohort::ParamRegistry params;
///     auto w1 = params.add("fc1.weight", {1024, 784});
///     auto b1 = params.add("fc1.bias", {1024});
///     cohort::DataParallel dp(world, params, {.init = [&](cohort::DataParallel& d) {
///       initialise(d.param(w1), d.param(b1));       // only rank 0's values matter
///     }});                                           // checks registries, broadcasts rank 0's
///     for (int step = 0; step < steps; ++step) {
///       dp.zero_grads();                             // on the compute stream
///       forward(dp.param(w1), dp.param(b1), batch);  // on dp.compute_stream() (Note [Stream
///       backward_fc1(dp.grad(w1), dp.grad(b1));      //   contract]; on the host: plain loops)
///       dp.grad_ready(b1); dp.grad_ready(w1);        // a full bucket starts its all-reduce now
///       dp.sync_grads();                             // compute stream waits for every bucket
///       sgd(dp.param_arena(), dp.grad_arena());      // on the compute stream
///     }
///
/// The whole program, built and run by the tests: examples/host_loop/main.cpp.
///
/// Note [Gradient synchronization]
/// `grad_ready(p)` says the gradient of `p` is complete, as of the work enqueued so far on the
/// compute stream. When that completes every parameter overlapping a bucket (Note [Buckets]), the
/// bucket's all-reduce (average over ranks) is issued at once on the communication stream, after
/// an event recorded on the compute stream, so it overlaps the rest of backward. Buckets are
/// issued strictly in bucket order on every rank: a bucket that becomes ready before an earlier
/// one waits for it, so every rank issues the same collectives in the same order whatever order
/// its marks arrive in. `sync_grads()` issues what is left, then makes the compute stream wait
/// for the last collective; it never blocks the host.
///
/// Gradients are written in place in the arena (no copies into buckets). The caller must not
/// write a gradient again after marking it until `sync_grads()` has been called; work enqueued on
/// the compute stream after `sync_grads()` sees the averaged gradients.
///
/// Note [Stream contract]
/// All of DataParallel's work on your data (zeroing, waiting for the all-reduces, the optimizer
/// step of `cohort::Sgd`/`AdamW`) is ordered on `compute_stream()`; only the collectives run on
/// `comm_stream()`, after an event on the compute stream.
/// - On a GPU the arenas are device memory. Write gradients with kernels on the compute stream,
///   or pass the stream you wrote them on: `grad_ready(h, stream)` makes the compute stream wait
///   for it. A kernel on any other stream, unordered, is a race that trains silently wrong. Work
///   enqueued on the compute stream after `sync_grads()` sees averaged gradients; the host sees
///   them (or updated parameters after `step()`) only after `compute_stream().synchronize()`.
/// - On the host the compute stream DataParallel creates runs on the calling thread
///   (`host_compute = HostExecution::caller`, Note [Host compute runs on the caller]): when
///   `zero_grads()`, `sync_grads()` or `step()` returns, its work is done, so a plain loop may
///   read parameters and write gradients directly. A stream of your own (`compute_stream`) or
///   `host_compute = worker` makes the host asynchronous, and the GPU rules apply.
/// - `COHORT_DEBUG_STREAMS=1` checks this contract at every `grad_ready` (Note [Debugging
///   streams]).
///
/// Note [Host compute runs on the caller]
/// A host program written as plain loops never synchronizes a stream, and with an asynchronous
/// compute stream it read gradients before `sync_grads()`'s wait had run and parameters before
/// `step()` had: wrong results, no error. Three remedies were weighed. A guard or
/// `run_on_compute(fn)` makes the order explicit but leaves the obvious loop wrong: it needs the
/// user to know the rule it is meant to teach. A debug mode that detects host access while the
/// compute stream has work pending finds the bug only when it is switched on, so it is kept for
/// the programs that ask for overlap (Note [Debugging streams]). Running the host compute stream on
/// the caller makes the obvious loop right by construction and keeps the overlap that matters: the
/// all-reduces still run on the communication thread while backward goes on (a bucket starts at
/// `grad_ready`, and only `sync_grads()` waits); what is lost is a compute thread running ahead of
/// the host thread, which in a plain loop has nothing else to do. Programs that queue their own
/// host work keep a worker stream (`compute_stream`, or `host_compute = worker`); the tests run the
/// same loop both ways (tests/ddp/test_host_loop.cpp). For those, the debug mode exists too (Note
/// [Debugging streams]).
///
/// Note [Debugging streams]
/// With `COHORT_DEBUG_STREAMS=1` (read once per DataParallel), `grad_ready` checks the stream
/// contract and throws `InvalidArgument` naming the parameter and the remedy:
/// - On the host, with a compute stream that runs on a worker thread: the library calls that
///   enqueue work on the arenas (`zero_grads()`, `sync_grads()`, `broadcast_parameters()`, an
///   optimizer's `step()`) name themselves on the stream. `grad_ready(h)` without a stream means
///   the host wrote the gradient (and read the parameters for it); if the host has not waited for
///   the last such call's work since (`synchronize()`, a `ready()` that said yes, or the same on
///   an event recorded after it) and nothing was enqueued after it, that is a race, reported
///   naming the call (Note [Unwaited host work] in stream.cpp). Of the designs weighed, guard
///   pages cannot tell the host thread from the worker that must touch the same pages, and
///   checksums of the arena around the enqueued work catch a write only when it happens to land
///   while the work is pending, and never a read. This check follows the program's order, not
///   the threads' timing, so it reports the first racy step on every run, whether the race went
///   wrong or not. It cannot see host accesses that the program orders by other means (work of
///   its own enqueued on the compute stream after the call clears it), nor accesses after the
///   last `grad_ready` of the run.
/// - On a GPU: `grad_ready(h)` (and `grad_ready(h, stream)`, after the compute stream waits for
///   an event on that stream) copies the gradient at the point its mark takes on the compute
///   stream, waits for the whole device, and copies it again. A difference means work the compute
///   stream does not wait for (a kernel on another stream, or on a stream other than the one
///   passed) was still writing it: its all-reduce would have averaged a half-written gradient. A
///   write that had already finished by the first copy is not seen: the race was won this time,
///   and is caught on the run where it is not. Each mark costs two copies of the gradient and a
///   device synchronization; the check is skipped while the compute stream is being captured
///   into a CUDA graph.
///
/// Note [Your own arenas]
/// A program that keeps all its parameters in one blob (llm.c does) can give DataParallel that
/// blob and its gradient blob (`param_memory`, `grad_memory`) instead of having arenas
/// allocated; nothing is copied. The blob must be laid out as DataParallel lays out an arena
/// (Note [Arena layout] in bucket_plan.hpp): plan it with `arena_layout(registry, world.size())`,
/// allocate `arena_count` elements of the registry's dtype at a 256-byte aligned address, and
/// point each tensor at `data + slots[i].offset`. The padded size depends on the world size, so
/// plan once the world is known. The constructor checks device, dtype, count, alignment and that
/// the two blobs do not overlap, and names the rule broken. The parameter values in the blob are
/// kept (`init` may still write them; rank 0's are broadcast); the gaps between parameters, the
/// padding and the gradients are zeroed. The memory must outlive the DataParallel and its
/// optimizer, and is not in `memory_report()` (it is not cohort's).
///
/// Note [Who zeroes gradients]
/// Nobody, unless asked: the arenas start at zero and `sync_grads()` leaves the averaged
/// gradients in place. A backward that accumulates (`grad += ...`) calls `zero_grads()` (on the
/// compute stream) before each accumulation window; a backward that assigns needs no zeroing.
///
/// Note [Unused parameters]
/// Every parameter must be marked ready once per synchronized step (a second mark in the same
/// step is an error). A parameter still unmarked at `sync_grads()` is an error naming it, unless
/// `unused_params = UnusedParams::zero`: then its gradient is zeroed on the compute stream and
/// reduced as a zero gradient, which is right for a parameter the step did not use and wrong for
/// one whose gradient was written but not marked (it is thrown away): the error therefore leads
/// with the mark. A parameter marked during a `no_sync` window of the same
/// accumulation counts as ready with its accumulated gradient. Every rank issues the same
/// collectives either way, so ranks that use different parameters cannot desynchronize.
///
/// Note [Gradient accumulation]
/// While a `NoSync` guard from `no_sync()` is alive, `grad_ready` only records the mark and
/// `sync_grads()` does nothing: gradients accumulate locally. The first synchronized step after it
/// reduces the accumulated sums (averaged over ranks, not over micro-batches: scale the loss by
/// 1 / micro-batches if you want the mean).
///
/// Note [Wire compression]
/// With `compression = Compression::bf16` (or `f16`) and an f32 arena, each bucket is cast into a
/// 16-bit wire buffer on the communication stream, averaged in that type, and cast back: half the
/// bytes on the wire. Each cast rounds to nearest even (unit roundoff u = 2^-8 for bf16, 2^-11
/// for f16), and the reduction rounds once per partial sum, so each element of the result differs
/// from the exact f32 average by at most about (n + 2) u times the mean over the n ranks of
/// |gradient| (plus n x 2^-24 for f16's subnormals); f16 overflows to infinity beyond 65504.
/// The arena, and what the optimizer reads, stays f32.
///
/// Note [ZeRO-2]
/// With `sharding = Sharding::zero2` every rank holds every parameter, but gradients only as
/// its shard (Note [Shard layout] in shard_layout.hpp), with its shard of the optimizer state:
/// 4 + 12/N bytes per parameter for f32 AdamW on N ranks, plus one bucket in flight
/// (`buckets_in_flight`).
/// - `grad(h)` is where backward writes `h`'s gradient: its bucket (a run of whole parameters
///   under the bucket caps) is opened at the first `grad(h)` or `grad_ready(h)` of its
///   parameters, in one of a ring of `buckets_in_flight` bucket buffers (Note [Slot rings]):
///   the compute stream waits until the buffer's previous reduce-scatter has read it, then zeroes
///   it. When every
///   parameter of a bucket is marked, the bucket is reduce-scattered (average) into this rank's
///   shard of the gradients, in bucket order as for plain data parallel, and its buffer goes back
///   to the ring. So no whole gradient exists past the bucket in flight, and a gradient read
///   through `grad(h)` after its bucket was reduce-scattered is a fresh (zero) one: the averaged
///   gradients are `grad_shard()`.
/// - The optimizer (`target_of(dp)`) steps this rank's pieces of the arena from the shard, then
///   calls `params_updated()`, which all-gathers each bucket's updated parameters on the
///   communication stream, last bucket first (the order forward uses them). The compute stream
///   waits for all of them at once, unless `overlap_param_gather` is set: then `param(h)` makes
///   it wait for `h`'s bucket only, so forward overlaps the rest (a program that reads
///   parameters through views it kept from earlier steps must leave it off).
/// - `no_sync()`: gradients are still reduce-scattered as buckets complete, and the shard adds
///   them up over the window (the first reduce-scatter after a synchronized step overwrites it),
///   so memory stays at 1/N; so each micro-batch must mark the same parameters on every rank, or
///   call `sync_grads()` at its end, which inside `no_sync` reduce-scatters every bucket not yet
///   reduce-scattered in the micro-batch. The sum of averages differs from plain data parallel's
///   average of sums by rounding.
/// - Not with `compression`, `param_memory` or `grad_memory`.
///
/// Note [ZeRO-3]
/// With `sharding = Sharding::zero3` parameters, gradients and optimizer state all live as this
/// rank's shard (16/N bytes per parameter for f32 AdamW), and the program uses parameters a unit
/// at a time (the registry's units, `ParamRegistry::add_unit`, in forward order). A model of
/// one unit, fc1 = {w1}:
///
///     const cohort::UnitHandle fc1{0};               // registry.add_unit("fc1", {w1})
///     dp.gather(fc1);                                // all-gathered; the next unit prefetched
///     forward(dp.param(w1), dp.param(w1), batch);    // (a model of many releases each unit
///                                                    //  after its forward, all but the last)
///     dp.gather(fc1, cohort::Pass::backward);        // takes over the unit forward kept
///     backward_fc1(dp.grad(w1), dp.grad(w1));        // a zeroed gradient buffer of the unit
///     dp.grad_ready(w1);                             // all marked: reduce-scattered at once
///     dp.release(fc1);
///     dp.sync_grads();
///     optimizer.step();                              // steps the shard
///
/// - `gather(u, pass)` all-gathers the unit into one of two unit buffers (Note [Slot rings];
///   the collective waits until the buffer's last user released it) and makes the compute stream
///   wait for it; `param(h)` is then a view of it, valid until `release(u)`. It also starts the
///   all-gather of the next unit of the pass (forward: the next declared, backward: the previous),
///   when a buffer is free, so that it runs while the program computes with this one; after the
///   optimizer's step the first unit of the next forward is fetched. `last_step_stats()` counts
///   the units gathered and how many of them were prefetched.
/// - Gathered for backward, a unit also gets a zeroed gradient buffer: `grad(h)` is a view of it.
///   When every parameter of the unit is marked, its gradients are reduce-scattered (average)
///   into the shard at once, and the buffer goes back; releasing a unit whose parameters are not
///   all marked is an error (or, with `unused_params = zero`, reduces them as zeros).
/// - `release(u)` gives the unit's buffer back in stream order: what the compute stream enqueued
///   before it may still read it. Views taken before a release must not be used after it.
/// - Inside `init`, gather each unit, write its parameters through `param(h)` and release it:
///   the release keeps what was written (rank 0's, broadcast when `broadcast_parameters` is set)
///   as every rank's shard. Outside `init` writes to a gathered unit are not kept.
/// - Misuse is an error naming the unit: a parameter used or a gradient written while its unit
///   is not gathered (for backward), a unit gathered twice or released twice, a unit still
///   gathered at `sync_grads()`. Ranks that gather different units are stopped at once, each
///   naming what every rank gathered; a rank that gathers nothing is named at the deadline with
///   the unit the others wait for (Note [Unit tags] in src/ddp/sharded_units.cpp).
/// - `no_sync()`: each unit is reduce-scattered as its backward ends and the shard adds them up,
///   as in ZeRO-2 (Note [ZeRO-2]).
/// - The other modes accept the same calls (gather and release check their rules and move
///   nothing), so a program written for ZeRO-3 runs in every mode.
///
/// Threads: a DataParallel is used by one thread at a time (the rank's thread).

#include <cohort/comm/communicator.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>
#include <cohort/ddp/bucket_plan.hpp>
#include <cohort/ddp/bucket_sizing.hpp>
#include <cohort/ddp/param_registry.hpp>
#include <cohort/ddp/shard_layout.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace cohort {

class DataParallel;

/// How `sync_grads()` reduces gradients.
enum class GradientSync : std::uint8_t {
  /// Bucketed all-reduces (average), overlapped with backward (Note [Gradient synchronization]).
  all_reduce,
  /// One reduce-scatter (average) of the whole gradient arena at `sync_grads()`, in place into
  /// this rank's shard, `grad_shard()`; the rest of the arena is left undefined. For ZeRO-1.
  reduce_scatter,
};

/// What `sync_grads()` does with a parameter that was never marked ready (Note [Unused
/// parameters]).
enum class UnusedParams : std::uint8_t {
  error,  ///< throw InvalidArgument naming it
  zero,   ///< zero its gradient and reduce that (one written but not marked is lost)
};

/// The element type on the wire (Note [Wire compression]).
enum class Compression : std::uint8_t { none, bf16, f16 };

/// Which pass a unit is gathered for (`DataParallel::gather`).
enum class Pass : std::uint8_t { forward, backward };

/// Options of a `DataParallel`. Every member has a default, so designated initializers may name
/// any subset: `{.bucket_bytes = 25 << 20}`. Every rank must pass the same values for the
/// members marked "same on every rank" (checked at construction).
struct DataParallelOptions {
  /// Cap of every bucket but the first and last, in bytes (same on every rank; Note [Buckets]).
  /// `kAutoBucketBytes` (the default): all three caps from the measured link, ignoring the two
  /// below (Note [Automatic bucket sizes]; `DataParallel::bucket_sizing()` tells what was chosen).
  std::size_t bucket_bytes = kAutoBucketBytes;
  /// Cap of the first bucket, the first gradients backward produces (same on every rank).
  std::size_t first_bucket_bytes = kDefaultFirstBucketBytes;
  /// Cap of the last bucket, the last gradients backward produces: nothing is left to hide its
  /// all-reduce behind, so it is small (0: no cap of its own; same on every rank).
  std::size_t last_bucket_bytes = kDefaultLastBucketBytes;
  /// Bucketed all-reduce, or one reduce-scatter into this rank's shard (same on every rank).
  GradientSync gradient_sync = GradientSync::all_reduce;
  /// Unmarked parameters are an error, or zero gradients (Note [Unused parameters]).
  UnusedParams unused_params = UnusedParams::error;
  /// 16-bit wire type for an f32 arena (same on every rank; Note [Wire compression]).
  Compression compression = Compression::none;
  /// Runs on every rank once the arenas exist (zeroed) and before rank 0's parameters are
  /// broadcast: initialise parameters here, through `param(h)` or `param_arena()`. Writes must be
  /// complete when it returns (synchronize any stream of your own).
  std::function<void(DataParallel&)> init = nullptr;
  /// Broadcast rank 0's parameters at construction (after `init`).
  bool broadcast_parameters = true;
  /// The stream backward runs on; unset: a new stream on the world's device, created with
  /// `host_compute` on the host (Note [Stream contract]).
  std::optional<Stream> compute_stream = std::nullopt;
  /// On the host, how that new compute stream runs: `caller` (the default) runs zeroing, the
  /// optimizer step and sync_grads()'s wait on the calling thread before each call returns, so a
  /// plain host loop needs no synchronize; `worker` gives it a thread of its own (then
  /// synchronize before the host touches the arenas, as on a GPU). Ignored on GPUs.
  HostExecution host_compute = HostExecution::caller;
  /// Where the arenas come from; null: a device pool on a GPU, plain host memory on the host.
  std::shared_ptr<MemoryResource> memory = nullptr;
  /// Your own parameter and gradient memory, used as the arenas instead of allocating them
  /// (Note [Your own arenas]); each may be given alone.
  std::optional<TensorView> param_memory = std::nullopt;
  std::optional<TensorView> grad_memory = std::nullopt;
  /// Record timing events for `last_step_stats()`.
  bool collect_stats = true;
  /// What is sharded across ranks (same on every rank; Note [ZeRO-2], Note [Shard layout]).
  Sharding sharding = Sharding::none;
  /// ZeRO-2: bucket buffers in flight (Note [ZeRO-2]): 1 holds one bucket's gradients beyond
  /// the shard, and opening the next bucket waits until the last one's reduce-scatter has read
  /// it (backward's other work, such as the input gradients, overlaps it); 2 lets backward fill
  /// the next bucket meanwhile, for one more bucket of memory.
  int buckets_in_flight = kDefaultBucketsInFlight;
  /// ZeRO-2: `param(h)` waits for `h`'s bucket's all-gather after a step instead of the compute
  /// stream waiting for all of them at the step, so forward overlaps them. Only for programs that
  /// call `param(h)` before each use (same on every rank; Note [ZeRO-2]).
  bool overlap_param_gather = false;
};

/// What the last synchronized step communicated. Times come from timing events on the streams
/// (on the host, steady-clock timestamps taken when the stream reaches them).
struct StepStats {
  std::uint64_t step = 0;       ///< synchronized steps so far (this one included)
  std::size_t collectives = 0;  ///< buckets all-reduced, or 1 reduce-scatter
  std::size_t bytes = 0;        ///< bytes this rank contributed on the wire (compressed size)
  double comm_ms = 0.0;         ///< the collectives' durations on the communication stream, summed
  /// Communication time not hidden behind compute: from the moment the compute stream reached
  /// `sync_grads()` until the last collective finished (0 when it had finished before).
  double exposed_ms = 0.0;
  /// ZeRO-3: the units all-gathered for this step (since the last one's `sync_grads()`), and of
  /// them those fetched ahead of the program's `gather` (Note [ZeRO-3]).
  std::size_t units_gathered = 0;
  std::size_t units_prefetched = 0;
};

class DataParallel {
 public:
  /// Builds the plan and the arenas, checks that every rank registered the same parameters with
  /// the same options, runs `options.init`, and broadcasts rank 0's parameters. Collective: every
  /// rank of `world` must construct its DataParallel at the same point. Returns with the
  /// parameters valid on the host and on every stream.
  /// @throws InvalidArgument for an empty registry, mixed dtypes, compression with a non-f32 arena,
  ///         or ranks that disagree (naming the first differing parameter or option and the ranks);
  ///         TimeoutError when a rank never arrives.
  DataParallel(World& world, const ParamRegistry& registry, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;
  DataParallel(DataParallel&&) = delete;
  DataParallel& operator=(DataParallel&&) = delete;

  /// A parameter's values and its gradient: slices of the arenas, on `world().device()`. ZeRO-2:
  /// the gradient is a slice of its bucket's buffer (Note [ZeRO-2]); ZeRO-3: both are slices of
  /// the gathered unit's buffers (Note [ZeRO-3]).
  /// @throws InvalidArgument for an unknown handle; with ZeRO-3, for a unit not gathered (for
  ///         backward, to write a gradient).
  TensorView param(ParamHandle handle) const;
  TensorView grad(ParamHandle handle) const;

  /// Marks `handle`'s gradient complete as of the work enqueued so far on the compute stream; may
  /// issue bucket all-reduces (Note [Gradient synchronization]).
  /// @throws InvalidArgument for an unknown handle, or a second mark in one synchronized step.
  void grad_ready(ParamHandle handle);

  /// As `grad_ready(handle)`, for a gradient written by work on `written_on` rather than on the
  /// compute stream: the compute stream (and so the all-reduce) first waits for an event recorded
  /// on `written_on` (Note [Stream contract]).
  /// @throws InvalidArgument as `grad_ready(handle)`, or for a stream of another device.
  void grad_ready(ParamHandle handle, const Stream& written_on);

  /// Issues the remaining collectives and makes the compute stream wait for all of them, without
  /// blocking the host (Note [Gradient synchronization]). Does nothing inside `no_sync`.
  /// @throws InvalidArgument naming the unmarked parameters (Note [Unused parameters]).
  void sync_grads();

  /// Sets every gradient to zero, in stream order on the compute stream.
  void zero_grads();

  /// Copies rank 0's parameter arena to every rank, on the compute stream. Collective.
  /// @throws InvalidArgument with ZeRO-3 (rank 0's units are broadcast at construction).
  void broadcast_parameters();

  /// Makes `unit`'s parameters usable on the compute stream for `pass`, and prefetches the next
  /// unit of that pass. Only ZeRO-3 moves anything (Note [ZeRO-3]); the other modes check the
  /// same rules (a unit is gathered once before it is released), so one program runs in every
  /// mode. Every rank must gather and release the same units in the same order.
  /// @throws InvalidArgument for an unknown unit, or one already gathered for this pass.
  void gather(UnitHandle unit, Pass pass = Pass::forward);
  /// Ends the use of `unit` (Note [ZeRO-3]).
  /// @throws InvalidArgument for a unit not gathered (released twice).
  void release(UnitHandle unit);

  /// For optimizers, after a step that updated this rank's shard of the parameters (`target_of`
  /// arranges the call): ZeRO-2 all-gathers the updated parameters (Note [ZeRO-2]); the other
  /// modes have nothing to do.
  void params_updated();

  /// Before this rank's state is overwritten outside the optimizer (a checkpoint load into the
  /// sharded modes): waits for ZeRO-2's parameter all-gathers in flight, and drops the units
  /// ZeRO-3 fetched ahead (they hold the parameters from before). Call `params_updated()` once the
  /// new shard is written. The other modes have nothing to do.
  /// @throws InvalidArgument with ZeRO-3 while the program holds a unit gathered.
  void settle_for_overwrite();

  /// RAII scope of local accumulation (Note [Gradient accumulation]); nests.
  class NoSync {
   public:
    explicit NoSync(DataParallel& dp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync(NoSync&&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DataParallel* dp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  bool syncing() const noexcept;

  /// Statistics of the last synchronized step. Blocks until that step's collectives finished.
  /// @throws InvalidArgument when `collect_stats` is off.
  StepStats last_step_stats();

  /// Buckets whose all-reduce has been issued in the current step (for tests and tracing).
  std::size_t buckets_issued() const noexcept;

  // ---- For optimizers and ZeRO-1 ----

  /// The whole padded arenas (`plan().arena_count` elements; Note [Arena layout]).
  TensorView param_arena() const;
  TensorView grad_arena() const;
  /// This rank's contiguous shard of each arena: elements [shard_offset(), + shard_count()).
  /// In the sharded modes the shard is this rank's pieces side by side (Note [Shard layout]):
  /// `grad_shard()` holds its averaged gradients; `param_shard()` exists with ZeRO-3 only
  /// (ZeRO-2's parameter pieces stay in the whole arena); `grad_arena()` exists in neither.
  TensorView param_shard() const;
  TensorView grad_shard() const;
  std::size_t shard_offset() const noexcept;
  std::size_t shard_count() const noexcept;
  /// Which elements of the arena each rank owns (Note [Shard layout]).
  const ShardLayout& shard_layout() const noexcept;
  DType dtype() const noexcept;

  const Stream& compute_stream() const noexcept;
  /// The stream the collectives run on.
  const Stream& comm_stream() const noexcept;
  World& world() noexcept;
  Communicator& comm() noexcept;
  const ParamRegistry& registry() const noexcept;
  const BucketPlan& plan() const noexcept;
  /// The bucket caps the plan was made with, and the link measurement behind automatic ones.
  const BucketSizing& bucket_sizing() const noexcept;
  const DataParallelOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
