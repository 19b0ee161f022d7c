#include <cohort/ddp/data_parallel.hpp>

#include "arena_ops.hpp"
#include "link_measure.hpp"
#include "registry_check.hpp"
#include "sharded_engine.hpp"
#include "stream_debug.hpp"
#include "unit_use.hpp"

#include <cohort/core/detail/event_pool.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/memory_estimate.hpp>

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

namespace cohort {

namespace {

std::string_view to_string(GradientSync sync) {
  return sync == GradientSync::all_reduce ? "all_reduce" : "reduce_scatter";
}

std::string_view to_string(Compression compression) {
  switch (compression) {
    case Compression::none:
      return "none";
    case Compression::bf16:
      return "bf16";
    case Compression::f16:
      return "f16";
  }
  return "none";
}

/// What must agree across ranks (checked at construction): parameters first, so that the first
/// difference names a parameter, then the options that shape the collectives.
std::vector<std::string> fingerprint_lines(const ParamRegistry& registry,
                                           const DataParallelOptions& options) {
  std::vector<std::string> lines;
  const auto params = registry.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    lines.push_back("parameter #" + std::to_string(i) + " " + params[i].describe());
  }
  lines.push_back("option bucket_bytes = " + std::to_string(options.bucket_bytes));
  lines.push_back("option first_bucket_bytes = " + std::to_string(options.first_bucket_bytes));
  lines.push_back("option last_bucket_bytes = " + std::to_string(options.last_bucket_bytes));
  lines.push_back("option gradient_sync = " + std::string(to_string(options.gradient_sync)));
  lines.push_back("option compression = " + std::string(to_string(options.compression)));
  lines.push_back("option sharding = " + std::string(to_string(options.sharding)));
  lines.push_back("option overlap_param_gather = " +
                  std::to_string(static_cast<int>(options.overlap_param_gather)));
  const auto units = registry.units();
  for (std::size_t u = 0; u < units.size(); ++u) {
    std::string line = "unit #";
    line += std::to_string(u);
    line += ' ';
    line += units[u].name;
    line += ':';
    for (const ParamHandle param : units[u].params) {
      line += ' ';
      line += std::to_string(param.index);
    }
    lines.push_back(line);
  }
  return lines;
}

/// The caps as given, or (automatic) provisional ones: the arena layout does not depend on the
/// caps, so the plan is remade with the measured ones once the arenas exist.
BucketSizing given_sizing(const DataParallelOptions& options) {
  BucketSizing sizing;
  if (options.bucket_bytes == kAutoBucketBytes) {
    sizing.automatic = true;
    sizing.first_bytes = sizing.middle_bytes = sizing.last_bytes = std::size_t{1} << 20;
  } else {
    sizing.first_bytes = options.first_bucket_bytes;
    sizing.middle_bytes = options.bucket_bytes;
    sizing.last_bytes = options.last_bucket_bytes;
  }
  return sizing;
}

/// Checks memory of the caller's own against the arena it must hold (Note [Your own arenas]).
void check_own_memory(const TensorView& memory, const char* option, const BucketPlan& plan,
                      Device device) {
  const std::string what = std::string("DataParallelOptions::") + option;
  COHORT_EXPECTS(memory.device() == device, what + " is " + memory.device().to_string() +
                                                " memory, but this rank works on " +
                                                device.to_string());
  COHORT_EXPECTS(memory.dtype() == plan.dtype,
                 what + " holds " + std::string(to_string(memory.dtype())) +
                     " elements, but the parameters are " + std::string(to_string(plan.dtype)));
  COHORT_EXPECTS(memory.count() >= plan.arena_count,
                 what + " holds " + std::to_string(memory.count()) +
                     " elements, but the arena of " + std::to_string(plan.world_size) +
                     " rank(s) needs " + std::to_string(plan.arena_count) +
                     " (each parameter starts at a multiple of 256 bytes and the total is padded "
                     "to world size x 256 bytes); allocate arena_layout(registry, "
                     "world.size()).arena_count elements");
  COHORT_EXPECTS(reinterpret_cast<std::uintptr_t>(memory.data()) % kArenaAlignmentBytes == 0,
                 what + " starts at an address that is not a multiple of " +
                     std::to_string(kArenaAlignmentBytes) +
                     " bytes; allocate it aligned (std::aligned_alloc(256, ...), cudaMalloc)");
}

bool overlap(const TensorView& a, const TensorView& b, std::size_t count) {
  const auto* a_begin = static_cast<const std::byte*>(a.data());
  const auto* b_begin = static_cast<const std::byte*>(b.data());
  const std::size_t bytes = count * size_of(a.dtype());
  return a_begin < b_begin + bytes && b_begin < a_begin + bytes;
}

/// One step's record of what was issued, with the events that time it.
struct StepRecord {
  std::uint64_t step = 0;
  std::size_t collectives = 0;
  std::size_t bytes = 0;
  using PooledEvent = std::shared_ptr<Event>;
  std::vector<std::pair<PooledEvent, PooledEvent>> spans;  ///< per collective, on comm stream
  PooledEvent compute_done;                                ///< compute stream at sync_grads()
  PooledEvent comm_done;  ///< comm stream after the last collective
};

}  // namespace

struct DataParallel::Impl {
  Impl(World& w, const ParamRegistry& r, DataParallelOptions o)
      : world(w),
        comm(w.comm()),
        registry(r),
        options(std::move(o)),
        sizing(given_sizing(options)),
        plan(make_bucket_plan(registry, w.size(), sizing.middle_bytes, sizing.first_bytes,
                              sizing.last_bytes)),
        device(w.device()),
        compute(options.compute_stream ? *options.compute_stream
                                       : Stream::create(device, options.host_compute)),
        comm_stream(Stream::create(device)),
        compute_ready(Event::create(device)),
        comm_done(Event::create(device)),
        timing_events(device, /*timing=*/true),
        order_events(device, /*timing=*/false) {}

  ~Impl() {
    // Buffers are freed synchronously: every use of them must have finished.
    for (const Stream* stream : {&comm_stream, &compute}) {
      try {
        stream->synchronize();
      } catch (const std::exception& error) {
        // While an error unwinds, it is that failure, reported where it arose (Note [One report
        // per failure] in src/comm/watchdog.cpp).
        if (std::uncaught_exceptions() > 0) {
          COHORT_LOG(debug) << "DataParallel: a stream failed before destruction: " << error.what();
        } else {
          COHORT_LOG(warn) << "DataParallel: a stream failed before destruction: " << error.what();
        }
      }
    }
  }

  TensorView params_view() const {
    return TensorView(param_data, plan.arena_count, plan.dtype, device);
  }
  TensorView grads_view() const {
    return TensorView(grad_data, plan.arena_count, plan.dtype, device);
  }
  TensorView wire_view() const {
    return TensorView(wire_data, plan.arena_count, wire_dtype, device);
  }

  const ParamInfo& checked(ParamHandle handle) const { return registry.info(handle); }

  /// Zeroes what lies between the parameters' slots and after the last (Note [Arena layout]).
  void zero_param_gaps() {
    std::vector<ArenaSlice> slots = plan.slots;
    std::sort(slots.begin(), slots.end(),
              [](const ArenaSlice& a, const ArenaSlice& b) { return a.offset < b.offset; });
    std::size_t end = 0;
    for (const ArenaSlice& slot : slots) {
      detail::zero_async(params_view().slice(end, slot.offset - end), compute);
      end = slot.offset + slot.count;
    }
    detail::zero_async(params_view().slice(end, plan.arena_count - end), compute);
  }

  void reset_step() {
    pending.resize(plan.buckets.size());
    for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
      pending[b] = plan.buckets[b].params.size();
    }
    marked_step.assign(registry.size(), false);
    next_bucket = 0;
    record = std::make_shared<StepRecord>();
  }

  /// Note [Debugging streams]
  void check_streams(ParamHandle handle, bool stream_given) const {
    if (!debug_streams) {
      return;
    }
    const ParamInfo& info = checked(handle);
    if (!stream_given) {
      detail::check_host_waited(compute, info.name);
    }
    const ArenaSlice slot = plan.slots[handle.index];
    detail::check_gradient_settled(grads_view().slice(slot.offset, slot.count), compute, info.name,
                                   stream_given);
  }

  void mark_ready(ParamHandle handle) {
    const ParamInfo& info = checked(handle);
    if (no_sync_depth > 0) {
      marked_window[handle.index] = true;
      return;
    }
    COHORT_EXPECTS(!marked_step[handle.index],
                   "grad_ready: parameter '" + info.name +
                       "' was already marked ready in this step; mark each parameter once per "
                       "step, after its gradient is complete (a backward that runs twice, as "
                       "with recomputation, marks after the last run)");
    mark(handle.index);
    if (options.gradient_sync == GradientSync::all_reduce) {
      issue_ready_buckets();
    }
  }

  void mark(std::uint32_t index) {
    marked_step[index] = true;
    marked_window[index] = true;
    for (const std::uint32_t b : plan.param_buckets[index]) {
      --pending[b];
    }
  }

  /// Starts a timed span on the comm stream; returns its start event (if stats are on).
  std::shared_ptr<Event> begin_span() {
    if (!options.collect_stats) {
      return nullptr;
    }
    std::shared_ptr<Event> start = timing_events.acquire();
    start->record(comm_stream);
    return start;
  }

  void end_span(std::shared_ptr<Event> start, std::size_t bytes) {
    ++record->collectives;
    record->bytes += bytes;
    if (start) {
      std::shared_ptr<Event> end = timing_events.acquire();
      end->record(comm_stream);
      record->spans.emplace_back(std::move(start), std::move(end));
    }
  }

  /// The comm stream waits for the work enqueued so far on the compute stream. One event serves
  /// every step: a wait takes the event's mark when it is enqueued, so recording it again later
  /// does not move what was waited for.
  void comm_after_compute() {
    compute_ready.record(compute);
    comm_stream.wait(compute_ready);
  }

  /// Issues, in bucket order, every bucket whose parameters are all ready and whose predecessors
  /// have been issued (Note [Gradient synchronization]).
  void issue_ready_buckets() {
    if (next_bucket >= plan.buckets.size() || pending[next_bucket] != 0) {
      return;
    }
    comm_after_compute();
    while (next_bucket < plan.buckets.size() && pending[next_bucket] == 0) {
      const ArenaSlice slice = plan.buckets[next_bucket].slice;
      const TensorView grads = grads_view().slice(slice.offset, slice.count);
      std::shared_ptr<Event> start = begin_span();
      if (options.compression == Compression::none) {
        comm.all_reduce(grads, ReduceOp::avg, comm_stream);
        end_span(std::move(start), grads.bytes());
      } else {
        const TensorView wire = wire_view().slice(slice.offset, slice.count);
        detail::convert(grads, wire, comm_stream);
        comm.all_reduce(wire, ReduceOp::avg, comm_stream);
        detail::convert(wire, grads, comm_stream);
        end_span(std::move(start), wire.bytes());
      }
      ++next_bucket;
    }
  }

  /// ZeRO-1: one reduce-scatter of the whole arena into this rank's shard, in place.
  void issue_reduce_scatter() {
    comm_after_compute();
    const std::size_t offset = static_cast<std::size_t>(world.rank()) * plan.shard_count;
    std::shared_ptr<Event> start = begin_span();
    if (options.compression == Compression::none) {
      comm.reduce_scatter(grads_view(), grads_view().slice(offset, plan.shard_count), ReduceOp::avg,
                          comm_stream);
      end_span(std::move(start), grads_view().bytes());
    } else {
      const TensorView wire_shard = wire_view().slice(offset, plan.shard_count);
      detail::convert(grads_view(), wire_view(), comm_stream);
      comm.reduce_scatter(wire_view(), wire_shard, ReduceOp::avg, comm_stream);
      detail::convert(wire_shard, grads_view().slice(offset, plan.shard_count), comm_stream);
      end_span(std::move(start), wire_view().bytes());
    }
  }

  World& world;
  Communicator& comm;
  ParamRegistry registry;
  DataParallelOptions options;
  BucketSizing sizing;  // provisional caps until an automatic choice is measured
  BucketPlan plan;
  Device device;
  Stream compute;
  Stream comm_stream;
  // Note [Step events]: no CUDA event is created in a steady-state step. The two ordering events
  // are reused every step; timing events come from a pool and return to it when the step record
  // that holds them is dropped (two records live at once: this step's and the last one's).
  Event compute_ready;
  Event comm_done;
  detail::EventPool timing_events;
  detail::EventPool order_events;  // grad_ready(handle, stream): a wait captures the mark at once
  DType wire_dtype = DType::f32;
  Buffer param_buffer;
  Buffer grad_buffer;
  Buffer wire_buffer;
  void* param_data = nullptr;  // the buffers' memory, for views from const members
  void* grad_data = nullptr;
  void* wire_data = nullptr;

  // The current step (Note [Unused parameters]).
  std::vector<std::size_t> pending;  ///< per bucket: overlapping parameters not yet ready
  std::vector<bool> marked_step;     ///< per parameter: marked in this synchronized step
  std::vector<bool> marked_window;   ///< per parameter: marked since the last sync_grads()
  std::size_t next_bucket = 0;
  int no_sync_depth = 0;
  std::uint64_t steps = 0;
  std::shared_ptr<StepRecord> record;
  std::shared_ptr<StepRecord> last_record;
  const bool debug_streams = detail::debug_streams_enabled();
  detail::UnitUse units{registry};                 // gather/release, checked in every mode
  mutable std::optional<ShardLayout> layout;       // Sharding::none, made when first asked for
  std::unique_ptr<detail::ShardedEngine> sharded;  // Sharding::zero2 and zero3
};

DataParallel::DataParallel(World& world, const ParamRegistry& registry, DataParallelOptions options)
    : impl_(std::make_unique<Impl>(world, registry, std::move(options))) {
  Impl& s = *impl_;
  COHORT_EXPECTS(s.compute.device() == s.device,
                 "DataParallel: the compute stream is on " + s.compute.device().to_string() +
                     " but this rank works on " + s.device.to_string());
  if (s.options.compression != Compression::none) {
    COHORT_EXPECTS(
        s.plan.dtype == DType::f32,
        "DataParallel: wire compression (" + std::string(to_string(s.options.compression)) +
            ") needs an f32 arena, but the parameters are " + std::string(to_string(s.plan.dtype)) +
            "; a 16-bit arena is already reduced in 16 bits");
    s.wire_dtype = s.options.compression == Compression::bf16 ? DType::bf16 : DType::f16;
  }
  // Memory of the caller's own is checked before any collective, so a bad one fails at once.
  const std::optional<TensorView>& own_params = s.options.param_memory;
  const std::optional<TensorView>& own_grads = s.options.grad_memory;
  if (own_params) {
    check_own_memory(*own_params, "param_memory", s.plan, s.device);
  }
  if (own_grads) {
    check_own_memory(*own_grads, "grad_memory", s.plan, s.device);
  }
  COHORT_EXPECTS(!(own_params && own_grads && overlap(*own_params, *own_grads, s.plan.arena_count)),
                 "DataParallelOptions::param_memory and grad_memory overlap; give the gradients "
                 "memory of their own");
  // Measured before the ranks meet, so before any of them allocates: the ranks of a host share
  // its memory (one container's limit; Note [Memory cgroups]), and each checks what all of them
  // will take against what was there before any began.
  const MemoryAvailability room = memory_availability(s.device);
  detail::check_same_on_every_rank(world.group(), fingerprint_lines(s.registry, s.options));

  std::shared_ptr<MemoryResource> memory = s.options.memory;
  if (!memory) {
    memory = s.device.is_cuda() ? make_device_pool_resource({.device = s.device.index()})
                                : std::shared_ptr<MemoryResource>(std::make_shared<HostResource>());
  }
  COHORT_EXPECTS(
      memory->device() == s.device || (s.device.is_host() && memory->host_accessible()),
      "DataParallel: the memory resource " + memory->name() + " is not on " + s.device.to_string());
  if (s.options.sharding != Sharding::none) {
    // The sharded modes lay out their arena by the caps (ZeRO-2's buckets are its segments), so
    // an automatic choice is measured before anything is allocated.
    if (s.sizing.automatic) {
      s.sizing = choose_bucket_sizes(
          detail::measure_link(s.comm, world.store(), memory, s.comm_stream, world.timeout()));
    }
    s.sharded = std::make_unique<detail::ShardedEngine>(detail::ShardedEngine::Setup{
        world, s.comm, s.registry, s.options, s.compute, s.comm_stream, memory, s.sizing, room});
    s.plan = s.sharded->plan();
    s.marked_window.assign(s.registry.size(), false);
    s.reset_step();
    s.sharded->initialise(*this);
    s.compute.synchronize();
    return;
  }
  {
    // Refused here, with what was needed, rather than by the kernel's OOM killer mid-allocation.
    const std::size_t arena = s.plan.arena_bytes();
    std::size_t needed = (own_params ? 0 : arena) + (own_grads ? 0 : arena);
    if (s.options.compression != Compression::none) {
      needed += s.plan.arena_count * size_of(s.wire_dtype);
    }
    const int sharing = s.device.is_host() ? world.local_world_size() : 1;
    check_memory_fits(room, memory->device(), needed, sharing,
                      "DataParallel's parameter, gradient and wire buffers (an arena of " +
                          std::to_string(s.plan.arena_count) + " elements)");
  }
  if (own_params) {
    s.param_data = own_params->data();
  } else {
    s.param_buffer = Buffer(memory, s.plan.arena_bytes(), MemoryCategory::parameters);
    s.param_data = s.param_buffer.data();
  }
  if (own_grads) {
    s.grad_data = own_grads->data();
  } else {
    s.grad_buffer = Buffer(memory, s.plan.arena_bytes(), MemoryCategory::gradients);
    s.grad_data = s.grad_buffer.data();
  }
  if (s.options.compression != Compression::none) {
    s.wire_buffer =
        Buffer(memory, s.plan.arena_count * size_of(s.wire_dtype), MemoryCategory::buckets);
  }
  s.wire_data = s.wire_buffer.data();
  if (own_params) {
    s.zero_param_gaps();  // keep the caller's values
  } else {
    detail::zero_async(s.params_view(), s.compute);
  }
  detail::zero_async(s.grads_view(), s.compute);
  s.compute.synchronize();
  if (s.sizing.automatic) {
    const BucketPlan provisional = s.plan;
    s.sizing = choose_bucket_sizes(
        detail::measure_link(s.comm, world.store(), memory, s.comm_stream, world.timeout()));
    s.plan = make_bucket_plan(s.registry, world.size(), s.sizing.middle_bytes, s.sizing.first_bytes,
                              s.sizing.last_bytes);
    COHORT_CHECK(s.plan.arena_count == provisional.arena_count && s.plan.slots == provisional.slots,
                 Error, "DataParallel: the measured bucket caps changed the arena layout");
  }
  s.marked_window.assign(s.registry.size(), false);
  s.reset_step();

  if (s.options.init) {
    s.options.init(*this);
  }
  if (s.options.broadcast_parameters) {
    broadcast_parameters();
  }
  s.compute.synchronize();
  COHORT_LOG(debug) << "DataParallel: " << s.registry.size() << " parameters, "
                    << s.plan.arena_bytes() << " bytes per arena, " << s.plan.buckets.size()
                    << " buckets\n"
                    << s.plan.describe();
}

DataParallel::~DataParallel() = default;

TensorView DataParallel::param(ParamHandle handle) const {
  if (impl_->sharded) return impl_->sharded->param(handle);
  impl_->checked(handle);
  const ArenaSlice slot = impl_->plan.slots[handle.index];
  return impl_->params_view().slice(slot.offset, slot.count);
}

TensorView DataParallel::grad(ParamHandle handle) const {
  if (impl_->sharded) return impl_->sharded->grad(handle);
  impl_->checked(handle);
  const ArenaSlice slot = impl_->plan.slots[handle.index];
  return impl_->grads_view().slice(slot.offset, slot.count);
}

void DataParallel::grad_ready(ParamHandle handle) {
  if (impl_->sharded) return impl_->sharded->grad_ready(handle, !syncing());
  impl_->check_streams(handle, /*stream_given=*/false);
  impl_->mark_ready(handle);
}

void DataParallel::grad_ready(ParamHandle handle, const Stream& written_on) {
  Impl& s = *impl_;
  s.checked(handle);
  COHORT_EXPECTS(written_on.device() == s.device,
                 "grad_ready: the gradient's stream is on " + written_on.device().to_string() +
                     " but this rank works on " + s.device.to_string());
  const std::shared_ptr<Event> written = s.order_events.acquire();  // Note [Step events]
  written->record(written_on);
  s.compute.wait(*written);
  if (s.sharded) return s.sharded->grad_ready(handle, !syncing());
  s.check_streams(handle, /*stream_given=*/true);
  s.mark_ready(handle);
}

void DataParallel::sync_grads() {
  Impl& s = *impl_;
  if (s.sharded) return s.sharded->sync_grads(/*in_no_sync=*/s.no_sync_depth > 0);
  if (s.no_sync_depth > 0) {
    return;
  }
  std::vector<std::uint32_t> unused;
  for (std::uint32_t i = 0; i < s.registry.size(); ++i) {
    if (!s.marked_step[i] && !s.marked_window[i]) {
      unused.push_back(i);
    }
  }
  if (!unused.empty() && s.options.unused_params == UnusedParams::error) {
    const auto params = s.registry.params();
    std::string names = "'" + params[unused.front()].name + "'";
    const std::size_t shown = std::min<std::size_t>(unused.size(), 5);
    for (std::size_t k = 1; k < shown; ++k) {
      names += ", '" + params[unused[k]].name + "'";
    }
    if (unused.size() > shown) {
      names += " and " + std::to_string(unused.size() - shown) + " more";
    }
    s.marked_window.assign(s.registry.size(), false);
    s.reset_step();
    // The likeliest cause is a gradient written but not marked; UnusedParams::zero would throw
    // that gradient away, so it is offered second, for parameters the step did not use.
    const bool one = unused.size() == 1;
    COHORT_FAIL(InvalidArgument,
                "sync_grads: " + std::string(one ? "parameter " : "parameters ") + names +
                    (one ? " was" : " were") +
                    " never marked ready in this step. Call dp.grad_ready(handle)" +
                    (one ? "" : " for each") + " after writing its gradient. Only if this step " +
                    (one ? "did not use it" : "did not use them") +
                    " at all, set DataParallelOptions::unused_params = "
                    "cohort::UnusedParams::zero, which zeroes the gradient of every unmarked "
                    "parameter (a gradient written but not marked is lost)");
  }
  for (const std::uint32_t i : unused) {
    detail::zero_async(grad(ParamHandle{i}), s.compute);
  }
  for (std::uint32_t i = 0; i < s.registry.size(); ++i) {
    if (!s.marked_step[i]) {
      s.mark(i);
    }
  }
  if (s.options.collect_stats) {
    s.record->compute_done = s.timing_events.acquire();
    s.record->compute_done->record(s.compute);
  }
  if (s.options.gradient_sync == GradientSync::all_reduce) {
    s.issue_ready_buckets();
  } else {
    s.issue_reduce_scatter();
  }
  if (s.options.collect_stats) {
    s.record->comm_done = s.timing_events.acquire();
    s.record->comm_done->record(s.comm_stream);
    s.compute.wait(*s.record->comm_done);
  } else {
    s.comm_done.record(s.comm_stream);
    s.compute.wait(s.comm_done);
  }
  s.record->step = ++s.steps;
  s.last_record = s.record;
  s.marked_window.assign(s.registry.size(), false);
  s.reset_step();
  detail::label_host_work(s.compute, "sync_grads()");  // Note [Debugging streams]
}

void DataParallel::zero_grads() {
  if (impl_->sharded) return impl_->sharded->zero_grads();
  detail::zero_async(impl_->grads_view(), impl_->compute);
  detail::label_host_work(impl_->compute, "zero_grads()");
}

void DataParallel::broadcast_parameters() {
  if (impl_->sharded) return impl_->sharded->broadcast_parameters();
  impl_->comm.broadcast(impl_->params_view(), 0, impl_->compute);
  detail::label_host_work(impl_->compute, "broadcast_parameters()");
}

void DataParallel::gather(UnitHandle unit, Pass pass) {
  if (impl_->sharded) return impl_->sharded->gather(unit, pass);
  impl_->units.gather(unit, pass);
}

void DataParallel::release(UnitHandle unit) {
  if (impl_->sharded) return impl_->sharded->release(unit);
  impl_->units.release(unit);
}

void DataParallel::params_updated() {
  if (impl_->sharded) impl_->sharded->params_updated();
}

void DataParallel::settle_for_overwrite() {
  if (impl_->sharded) impl_->sharded->settle_for_overwrite();
}

DataParallel::NoSync::NoSync(DataParallel& dp) : dp_(&dp) {
  ++dp_->impl_->no_sync_depth;
}
DataParallel::NoSync::~NoSync() {
  --dp_->impl_->no_sync_depth;
}
bool DataParallel::syncing() const noexcept {
  return impl_->no_sync_depth == 0;
}

StepStats DataParallel::last_step_stats() {
  const Impl& s = *impl_;
  COHORT_EXPECTS(s.options.collect_stats,
                 "last_step_stats: statistics are off (DataParallelOptions::collect_stats)");
  if (s.sharded) return s.sharded->last_step_stats();
  StepStats stats;
  if (!s.last_record) {
    return stats;
  }
  const StepRecord& record = *s.last_record;
  stats.step = record.step;
  stats.collectives = record.collectives;
  stats.bytes = record.bytes;
  for (const auto& [start, end] : record.spans) {
    stats.comm_ms += static_cast<double>(Event::elapsed_ms(*start, *end));
  }
  if (record.compute_done && record.comm_done) {
    stats.exposed_ms = std::max(
        0.0, static_cast<double>(Event::elapsed_ms(*record.compute_done, *record.comm_done)));
  }
  return stats;
}

std::size_t DataParallel::buckets_issued() const noexcept {
  return impl_->sharded ? impl_->sharded->buckets_issued() : impl_->next_bucket;
}

TensorView DataParallel::param_arena() const {
  if (impl_->sharded) return impl_->sharded->param_arena();
  return impl_->params_view();
}
TensorView DataParallel::grad_arena() const {
  COHORT_EXPECTS(!impl_->sharded,
                 "grad_arena(): " + std::string(to_string(impl_->options.sharding)) +
                     " keeps no whole gradient arena; the averaged gradients "
                     "are this rank's grad_shard()");
  return impl_->grads_view();
}
TensorView DataParallel::param_shard() const {
  if (impl_->sharded) return impl_->sharded->param_shard();
  return impl_->params_view().slice(shard_offset(), shard_count());
}
TensorView DataParallel::grad_shard() const {
  if (impl_->sharded) return impl_->sharded->grad_shard();
  return impl_->grads_view().slice(shard_offset(), shard_count());
}
const ShardLayout& DataParallel::shard_layout() const noexcept {
  if (impl_->sharded) return impl_->sharded->layout();
  if (!impl_->layout) {
    impl_->layout = make_shard_layout(impl_->registry, impl_->plan.world_size, Sharding::none);
  }
  return *impl_->layout;
}
std::size_t DataParallel::shard_offset() const noexcept {
  return static_cast<std::size_t>(impl_->world.rank()) * impl_->plan.shard_count;
}
std::size_t DataParallel::shard_count() const noexcept {
  return impl_->plan.shard_count;
}
DType DataParallel::dtype() const noexcept {
  return impl_->plan.dtype;
}
const Stream& DataParallel::compute_stream() const noexcept {
  return impl_->compute;
}
const Stream& DataParallel::comm_stream() const noexcept {
  return impl_->comm_stream;
}
World& DataParallel::world() noexcept {
  return impl_->world;
}
Communicator& DataParallel::comm() noexcept {
  return impl_->comm;
}
const ParamRegistry& DataParallel::registry() const noexcept {
  return impl_->registry;
}
const BucketSizing& DataParallel::bucket_sizing() const noexcept {
  return impl_->sizing;
}

const BucketPlan& DataParallel::plan() const noexcept {
  return impl_->plan;
}
const DataParallelOptions& DataParallel::options() const noexcept {
  return impl_->options;
}

}  // namespace cohort
