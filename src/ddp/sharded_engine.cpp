// The sharded modes' engine: layout, memory, and ZeRO-2's buckets (Note [ZeRO-2] in
// data_parallel.hpp). ZeRO-3's units are in sharded_units.cpp.

#include "sharded_engine.hpp"

#include "sharded_ops.hpp"
#include "stream_debug.hpp"

#include <algorithm>
#include <cohort/core/error.hpp>
#include <cohort/core/format.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <string>

namespace cohort::detail {
namespace {

/// What the layouts of the other modes would need per rank, for a refusal's advice.
std::string other_modes(const ParamRegistry& registry, int world_size, Sharding current,
                        const BucketSizing& sizing, std::size_t available, int sharing) {
  std::string text;
  for (const Sharding sharding : {Sharding::none, Sharding::zero2, Sharding::zero3}) {
    if (sharding == current || (sharding == Sharding::zero3 && registry.units().empty())) continue;
    const ShardLayout layout = make_shard_layout(
        registry, world_size, sharding, sizing.middle_bytes, sizing.first_bytes, sizing.last_bytes);
    const std::size_t bytes = layout.rank_bytes();
    text +=
        std::string(text.empty() ? "" : "; ") + std::string(to_string(sharding)) + " " +
        format_bytes(bytes) +
        (bytes * static_cast<std::size_t>(sharing) <= available ? " (fits)" : " (does not fit)");
  }
  return text;
}

}  // namespace

ShardedEngine::ShardedEngine(const Setup& setup)
    : world_(setup.world),
      comm_(setup.comm),
      registry_(setup.registry),
      options_(setup.options),
      device_(setup.world.device()),
      compute_(setup.compute),
      comm_stream_(setup.comm_stream),
      memory_(setup.memory),
      rank_(setup.world.rank()),
      ranks_(setup.world.size()),
      layout_(make_shard_layout(setup.registry, setup.world.size(), setup.options.sharding,
                                setup.sizing.middle_bytes, setup.sizing.first_bytes,
                                setup.sizing.last_bytes)),
      plan_(layout_.as_bucket_plan()),
      pieces_(layout_.pieces(rank_)),
      timer_(device_, setup.options.collect_stats),
      compute_ready_(Event::create(device_)),
      comm_done_(Event::create(device_)),
      units_(setup.registry) {
  const Sharding sharding = options_.sharding;
  const std::string mode(to_string(sharding));
  COHORT_EXPECTS(
      options_.compression == Compression::none,
      "DataParallel: wire compression is not available with " + mode + "; use Compression::none");
  COHORT_EXPECTS(options_.buckets_in_flight >= 1,
                 "DataParallel: buckets_in_flight must be at least 1, got " +
                     std::to_string(options_.buckets_in_flight));
  COHORT_EXPECTS(!options_.param_memory && !options_.grad_memory,
                 "DataParallel: param_memory and grad_memory (your own arenas) are not available "
                 "with " +
                     mode + ", which lays out and allocates its own shards");
  {
    // Refused here for all the host's ranks, with what the other modes would need.
    const int sharing = device_.is_host() ? world_.local_world_size() : 1;
    const std::string advice =
        "Per rank, " +
        other_modes(registry_, ranks_, sharding, setup.sizing, setup.room.bytes, sharing) +
        ". Use a mode that fits, more ranks, or a smaller model.";
    check_memory_fits(setup.room, memory_->device(), layout_.rank_bytes(options_.buckets_in_flight),
                      sharing,
                      "DataParallel " + mode + " (" + std::to_string(registry_.size()) +
                          " parameters: its shards and buffers in flight)",
                      advice);
  }
  const std::size_t element = element_bytes();
  grad_shard_ = Buffer(memory_, layout_.shard_count * element, MemoryCategory::gradients);
  gathered_.reserve(layout_.segments.size());
  for (std::size_t s = 0; s < layout_.segments.size(); ++s) {
    gathered_.push_back(Event::create(device_));
  }
  if (zero3()) {
    allocate_units();
  } else {
    params_ = Buffer(memory_, layout_.arena_count * element, MemoryCategory::parameters);
    buckets_.emplace(memory_, layout_.largest_segment() * element, options_.buckets_in_flight,
                     MemoryCategory::buckets, "ZeRO-2's gradient buckets");
    zero_async(arena_view(), compute_);
  }
  zero_async(grad_shard(), compute_);
  segments_.resize(layout_.segments.size());
  marked_.assign(registry_.size(), false);
  marked_window_.assign(registry_.size(), false);
  marked_step_.assign(registry_.size(), false);
  compute_.synchronize();
  COHORT_LOG(debug) << "DataParallel " << mode << ": " << layout_.segments.size()
                    << " buckets, shard of " << layout_.shard_count << " elements\n"
                    << layout_.describe();
}

ShardedEngine::~ShardedEngine() {
  for (const Stream* stream : {&comm_stream_, &compute_}) {
    try {
      stream->synchronize();
    } catch (const std::exception& error) {
      COHORT_LOG(warn) << "DataParallel: a stream failed before destruction: " << error.what();
    }
  }
}

void ShardedEngine::initialise(DataParallel& dp) {
  if (zero3()) {
    // Note [ZeRO-3]: inside init, releasing a unit keeps what was written (rank 0's, broadcast).
    initialising_ = true;
    if (options_.init) options_.init(dp);
    initialising_ = false;
    for (std::uint32_t u = 0; u < registry_.units().size(); ++u) {
      COHORT_EXPECTS(!units_.held(u), "DataParallel init left unit '" + registry_.units()[u].name +
                                          "' gathered; release every unit it gathers (its "
                                          "values are kept at the release)");
    }
    return;
  }
  if (options_.init) {
    options_.init(dp);
  }
  if (options_.broadcast_parameters) {
    broadcast_parameters();
  }
}

TensorView ShardedEngine::arena_view() const {
  return TensorView(const_cast<void*>(params_.data()), layout_.arena_count, layout_.dtype, device_);
}

TensorView ShardedEngine::slot_view(const SlotRing& ring, int slot, std::size_t count) const {
  return TensorView(ring.data(slot), count, layout_.dtype, device_);
}

TensorView ShardedEngine::piece_of(const Buffer& shard, std::size_t s) const {
  const ShardSegment& segment = layout_.segments[s];
  return TensorView(const_cast<void*>(shard.data()), layout_.shard_count, layout_.dtype, device_)
      .slice(segment.shard_offset, segment.piece_count);
}

TensorView ShardedEngine::param_shard() const {
  if (zero3()) {
    return TensorView(const_cast<void*>(params_.data()), layout_.shard_count, layout_.dtype,
                      device_);
  }
  COHORT_FAIL(InvalidArgument,
              "param_shard(): ZeRO-2 keeps every parameter, so this rank's shard of them is one "
              "piece per bucket inside the whole arena (shard_layout().pieces(rank)), not a "
              "contiguous array; use param_arena()");
}

TensorView ShardedEngine::grad_shard() const {
  return TensorView(const_cast<void*>(grad_shard_.data()), layout_.shard_count, layout_.dtype,
                    device_);
}

TensorView ShardedEngine::param_arena() {
  COHORT_EXPECTS(!zero3(),
                 "param_arena(): ZeRO-3 keeps no whole parameter arena; gather a unit "
                 "and use param(handle), or this rank's param_shard()");
  wait_gathers();
  return arena_view();
}

TensorView ShardedEngine::param(ParamHandle handle) {
  if (zero3()) return unit_param(handle);
  checked(handle);
  const std::uint32_t s = layout_.segment_of[handle.index];
  if (segments_[s].gather_pending) {
    compute_.wait(gathered_[s]);
    segments_[s].gather_pending = false;
  }
  const ArenaSlice slot = layout_.slots[handle.index];
  return arena_view().slice(slot.offset, slot.count);
}

TensorView ShardedEngine::grad(ParamHandle handle) {
  if (zero3()) return unit_grad(handle);
  checked(handle);
  const std::uint32_t s = layout_.segment_of[handle.index];
  open(s);
  const ArenaSlice slot = layout_.slots[handle.index];
  const ShardSegment& segment = layout_.segments[s];
  return slot_view(*buckets_, segments_[s].slot, segment.slice.count)
      .slice(slot.offset - segment.slice.offset, slot.count);
}

void ShardedEngine::open(std::size_t s) {
  Segment& state = segments_[s];
  if (state.slot >= 0) return;
  state.slot = buckets_->acquire(compute_);
  zero_async(slot_view(*buckets_, state.slot, layout_.segments[s].slice.count), compute_);
  state.pending = layout_.segments[s].params.size();
}

void ShardedEngine::grad_ready(ParamHandle handle, bool in_no_sync) {
  if (zero3()) return unit_grad_ready(handle, in_no_sync);
  const ParamInfo& info = checked(handle);
  if (!in_no_sync) {
    COHORT_EXPECTS(!marked_step_[handle.index],
                   "grad_ready: parameter '" + info.name +
                       "' was already marked ready in this step; mark each parameter once per "
                       "step, after its gradient is complete");
    marked_step_[handle.index] = true;
  }
  marked_window_[handle.index] = true;
  // Inside no_sync a bucket left open by a micro-batch that did not use all its parameters is
  // marked again by the next: its gradients keep adding up in the buffer, counted once.
  if (marked_[handle.index]) return;
  const std::uint32_t s = layout_.segment_of[handle.index];
  open(s);
  marked_[handle.index] = true;
  --segments_[s].pending;
  issue_ready();
}

void ShardedEngine::comm_after_compute() {
  compute_ready_.record(compute_);
  comm_stream_.wait(compute_ready_);
}

void ShardedEngine::issue_ready() {
  bool ordered = false;
  while (next_segment_ < segments_.size() && segments_[next_segment_].slot >= 0 &&
         segments_[next_segment_].pending == 0) {
    if (!ordered) {
      comm_after_compute();
      ordered = true;
    }
    reduce_scatter(next_segment_, *buckets_);
    next_segment_ = next_segment_ + 1 == segments_.size() ? 0 : next_segment_ + 1;
    if (next_segment_ == 0) break;  // a whole round: the rest belongs to the next micro-batch
  }
}

void ShardedEngine::reduce_scatter(std::size_t s, SlotRing& ring) {
  Segment& state = segments_[s];
  const ShardSegment& segment = layout_.segments[s];
  const TensorView input = slot_view(ring, state.slot, segment.slice.count);
  const TensorView mine = piece_of(grad_shard_, s);
  std::shared_ptr<Event> start = timer_.begin(comm_stream_);
  if (!state.accumulate) {
    comm_.reduce_scatter(input, mine, ReduceOp::avg, comm_stream_);
  } else {
    // Under no_sync the window's micro-batches add up in the shard (Note [ZeRO-2]).
    if (scratch_.empty()) {
      const std::size_t largest_piece =
          layout_.largest_segment() / static_cast<std::size_t>(ranks_);
      scratch_ = Buffer(memory_, largest_piece * element_bytes(), MemoryCategory::buckets);
    }
    const TensorView scratch(scratch_.data(), segment.piece_count, layout_.dtype, device_);
    comm_.reduce_scatter(input, scratch, ReduceOp::avg, comm_stream_);
    add_on(comm_stream_, scratch, mine);
  }
  timer_.end(std::move(start), input.bytes(), comm_stream_);
  ring.release(state.slot, comm_stream_);
  state.slot = -1;
  state.accumulate = true;
  for (const std::uint32_t param : segment.params) marked_[param] = false;
  ++issued_in_step_;
}

std::vector<std::uint32_t> ShardedEngine::check_unused() const {
  std::vector<std::uint32_t> unused;
  for (std::uint32_t i = 0; i < registry_.size(); ++i) {
    if (!marked_window_[i]) unused.push_back(i);
  }
  if (!unused.empty() && options_.unused_params == UnusedParams::error) {
    const auto params = registry_.params();
    std::string names = "'" + params[unused.front()].name + "'";
    for (std::size_t k = 1; k < std::min<std::size_t>(unused.size(), 5); ++k) {
      names += ", '" + params[unused[k]].name + "'";
    }
    if (unused.size() > 5) names += " and " + std::to_string(unused.size() - 5) + " more";
    COHORT_FAIL(InvalidArgument,
                "sync_grads: " + std::string(unused.size() == 1 ? "parameter " : "parameters ") +
                    names + (unused.size() == 1 ? " was" : " were") +
                    " never marked ready in this step. Call dp.grad_ready(handle) once its "
                    "gradient is written, or set DataParallelOptions::unused_params = "
                    "cohort::UnusedParams::zero to reduce unused parameters as zero gradients");
  }
  return unused;
}

void ShardedEngine::sync_grads(bool in_no_sync) {
  if (zero3()) return unit_sync_grads(in_no_sync);
  if (!in_no_sync) {
    wait_gathers();
    check_unused();
    timer_.compute_reached(compute_);
  }
  // Every bucket not reduce-scattered in this round is now, in order: the same collectives on
  // every rank, whichever parameters each marked (unmarked ones count as zero).
  if (next_segment_ != 0 || std::any_of(segments_.begin(), segments_.end(),
                                        [](const Segment& state) { return state.slot >= 0; })) {
    for (std::size_t s = next_segment_; s < segments_.size(); ++s) {
      open(s);
      comm_after_compute();  // after the writes of backward and open()'s zeroing
      reduce_scatter(s, *buckets_);
    }
    next_segment_ = 0;
  }
  if (in_no_sync) return;
  comm_done_.record(comm_stream_);
  compute_.wait(comm_done_);
  timer_.finish_step(comm_stream_);
  for (Segment& state : segments_) state.accumulate = false;
  marked_window_.assign(registry_.size(), false);
  marked_step_.assign(registry_.size(), false);
  issued_in_step_ = 0;
  label_host_work(compute_, "sync_grads()");  // Note [Debugging streams]
}

void ShardedEngine::zero_grads() {
  // The shard may still be written by a reduce-scatter in flight.
  comm_done_.record(comm_stream_);
  compute_.wait(comm_done_);
  zero_async(grad_shard(), compute_);
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    if (segments_[s].slot >= 0) {
      zero_async(slot_view(*buckets_, segments_[s].slot, layout_.segments[s].slice.count),
                 compute_);
    }
    segments_[s].accumulate = false;
  }
  label_host_work(compute_, "zero_grads()");
}

void ShardedEngine::broadcast_parameters() {
  COHORT_EXPECTS(!zero3(),
                 "broadcast_parameters(): ZeRO-3 broadcasts rank 0's units as init "
                 "releases them, at construction; afterwards every rank's shard "
                 "stays its own");
  wait_gathers();
  comm_.broadcast(arena_view(), 0, compute_);
  label_host_work(compute_, "broadcast_parameters()");
}

void ShardedEngine::params_updated() {
  if (zero3()) {
    // The next gathers read the shard the step wrote; the first unit of the next forward is
    // fetched now (Note [ZeRO-3]).
    comm_after_compute();
    prefetch(0, Pass::forward);
    return;
  }
  wait_gathers();  // a step without a sync_grads() since the last gathers
  comm_after_compute();
  const TensorView arena = arena_view();
  const auto rank = static_cast<std::size_t>(rank_);
  for (std::size_t s = layout_.segments.size(); s-- > 0;) {
    const ShardSegment& segment = layout_.segments[s];
    const TensorView whole = arena.slice(segment.slice.offset, segment.slice.count);
    const TensorView mine = whole.slice(rank * segment.piece_count, segment.piece_count);
    std::shared_ptr<Event> start = timer_.begin(comm_stream_);
    comm_.all_gather(mine, whole, comm_stream_);
    timer_.end(std::move(start), mine.bytes(), comm_stream_);
    gathered_[s].record(comm_stream_);
    segments_[s].gather_pending = true;
  }
  gathers_pending_ = true;
  if (!options_.overlap_param_gather) wait_gathers();
}

void ShardedEngine::settle_for_overwrite() {
  if (!zero3()) {
    wait_gathers();
    return;
  }
  std::string held;
  for (std::uint32_t u = 0; u < registry_.units().size(); ++u) {
    if (units_.held(u)) held += (held.empty() ? "'" : ", '") + registry_.units()[u].name + "'";
  }
  COHORT_EXPECTS(held.empty(),
                 "ZeRO-3: the shard cannot be overwritten (a checkpoint load) while "
                 "unit(s) " +
                     held +
                     " are gathered: release every unit first, and load between "
                     "steps");
  // Units fetched ahead hold the parameters from before: their slots go back, as at sync_grads().
  for (Segment& state : segments_) {
    if (state.param_slot >= 0) {
      gathered_units_->release(state.param_slot, comm_stream_);
      state.param_slot = -1;
    }
  }
  comm_done_.record(comm_stream_);
  compute_.wait(comm_done_);
}

void ShardedEngine::wait_gathers() {
  if (!gathers_pending_) return;
  // Segment 0's all-gather is the last issued: waiting for it waits for all.
  compute_.wait(gathered_.front());
  for (Segment& state : segments_) state.gather_pending = false;
  gathers_pending_ = false;
}

void ShardedEngine::gather(UnitHandle unit, Pass pass) {
  if (zero3()) return gather_unit(unit, pass);
  units_.gather(unit, pass);
}

void ShardedEngine::release(UnitHandle unit) {
  if (zero3()) return release_unit(unit);
  units_.release(unit);
}

}  // namespace cohort::detail
