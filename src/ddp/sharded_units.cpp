// ZeRO-3's units (Note [ZeRO-3] in data_parallel.hpp): gathered into slots before use, prefetched
// in the pass's order, released, and reduce-scattered in backward.

#include "sharded_engine.hpp"

#include "sharded_ops.hpp"
#include "stream_debug.hpp"

#include <cohort/core/error.hpp>
#include <cohort/memory/detail/stream_copy.hpp>

#include <algorithm>
#include <limits>
#include <string>

namespace cohort::detail {
namespace {

/// Note [Unit tags]
/// Every rank must gather the same units in the same order; a rank that gathers another unit (or
/// none) would pair its all-gather with a different one elsewhere, and on shared memory, where
/// collectives pair by their sequence numbers alone, read the wrong bytes without any error. So
/// on the host each unit's all-gather is preceded by an all-gather of one tag per rank, (unit + 1)
/// plus 2^32 for backward: every rank sees every rank's tag before it waits for the unit, and on
/// a difference all of them stop at once with the same message naming what each rank gathered
/// (the communicator is aborted, so nothing waits for the mismatched collectives). A rank that
/// gathers nothing leaves the tag's all-gather to its deadline, whose error is then given the
/// unit's name. The tags cost one 8-byte all-gather a unit (about 10 us on shared memory). On
/// GPUs there is no tag (reading it would wait for the device); a mismatch there is the
/// watchdog's timeout naming the collective.
/// Over Gloo (alone or across the nodes of a hierarchical communicator) the mismatched all-gather
/// must not even start: Gloo receiving a longer message than the receive it posted ends the
/// process from its own thread (an enforce in tcp::Pair), before any abort can stop it. There the
/// tags are also checked on the communication stream, between the tags' all-gather and the unit's
/// (a host task that throws fails the stream, and the unit's all-gather then fails without
/// running); on shared memory the check stays off the stream, where it would keep small
/// all-gathers from running inline.
constexpr std::int64_t kBackwardTag = std::int64_t{1} << 32;

std::int64_t tag_of(std::uint32_t unit, Pass pass) {
  return static_cast<std::int64_t>(unit) + 1 + (pass == Pass::backward ? kBackwardTag : 0);
}

const char* pass_name(Pass pass) {
  return pass == Pass::forward ? "forward" : "backward";
}

}  // namespace

void ShardedEngine::allocate_units() {
  const std::size_t element = element_bytes();
  const auto units = registry_.units();
  params_ = Buffer(memory_, layout_.shard_count * element, MemoryCategory::parameters);
  gathered_units_.emplace(memory_, layout_.largest_segment() * element, kUnitsInFlight,
                          MemoryCategory::gathered, "ZeRO-3's gathered units");
  buckets_.emplace(memory_, layout_.largest_segment() * element, kUnitsInFlight,
                   MemoryCategory::gathered, "ZeRO-3's unit gradients");
  unit_segment_.assign(units.size(), 0);
  for (std::size_t s = 0; s < layout_.segments.size(); ++s) {
    unit_segment_[layout_.segments[s].unit] = static_cast<std::uint32_t>(s);
  }
  zero_async(param_shard(), compute_);
  check_tags_ = device_.is_host() && ranks_ > 1;
  check_tags_on_stream_ =
      check_tags_ && (comm_.backend() == Backend::gloo || comm_.backend() == Backend::hierarchical);
  if (check_tags_) {
    // Per unit and pass: this rank's tag, then every rank's (Note [Unit tags]).
    const std::size_t stride = 1 + static_cast<std::size_t>(ranks_);
    tags_ =
        Buffer(memory_, units.size() * 2 * stride * sizeof(std::int64_t), MemoryCategory::other);
    auto* tags = static_cast<std::int64_t*>(tags_.data());
    for (std::uint32_t u = 0; u < units.size(); ++u) {
      for (const Pass pass : {Pass::forward, Pass::backward}) {
        const std::size_t base = (2 * u + (pass == Pass::backward ? 1 : 0)) * stride;
        std::fill(tags + base, tags + base + stride, 0);
        tags[base] = tag_of(u, pass);
      }
    }
  }
}

void ShardedEngine::start_gather(std::size_t s, Pass pass, bool prefetch) {
  Segment& state = segments_[s];
  if (state.param_slot >= 0) return;
  const ShardSegment& segment = layout_.segments[s];
  comm_after_compute();  // the shard as the compute stream left it (a step, init's writes)
  state.param_slot = gathered_units_->acquire(comm_stream_);
  if (check_tags_) {
    const std::size_t stride = 1 + static_cast<std::size_t>(ranks_);
    auto* tags = static_cast<std::int64_t*>(tags_.data()) +
                 (2 * segment.unit + (pass == Pass::backward ? 1 : 0)) * stride;
    state.tags = comm_.all_gather(TensorView::of(tags, 1, device_),
                                  TensorView::of(tags + 1, stride - 1, device_), comm_stream_);
    state.tag_pass = pass;
    if (check_tags_on_stream_) {  // Note [Unit tags]: Gloo must not start a mismatched all-gather
      comm_stream_.enqueue([this, unit = segment.unit, pass] {
        const std::string message = tag_mismatch(unit, pass);
        COHORT_CHECK(message.empty(), InvalidArgument, message);
      });
    }
  }
  const TensorView whole = slot_view(*gathered_units_, state.param_slot, segment.slice.count);
  const TensorView mine = piece_of(params_, s);
  std::shared_ptr<Event> start = timer_.begin(comm_stream_);
  comm_.all_gather(mine, whole, comm_stream_);
  timer_.end(std::move(start), mine.bytes(), comm_stream_);
  timer_.count_gather(prefetch);
  gathered_[s].record(comm_stream_);
}

std::string ShardedEngine::tag_mismatch(std::uint32_t unit, Pass pass) const {
  const std::size_t stride = 1 + static_cast<std::size_t>(ranks_);
  const std::int64_t* all = static_cast<const std::int64_t*>(tags_.data()) +
                            (2 * unit + (pass == Pass::backward ? 1 : 0)) * stride + 1;
  bool same = true;
  for (int r = 0; r < ranks_; ++r) same = same && all[r] == all[rank_];
  if (same) return {};
  std::string what;
  const std::size_t units = registry_.units().size();
  for (int r = 0; r < ranks_; ++r) {
    const std::int64_t tag = all[r];
    const std::int64_t index = (tag & (kBackwardTag - 1)) - 1;
    what += (r == 0 ? "rank " : ", rank ") + std::to_string(r);
    if (index >= 0 && static_cast<std::size_t>(index) < units && (tag >> 33) == 0) {
      what += " gathers '" + registry_.units()[static_cast<std::size_t>(index)].name + "' for " +
              pass_name(tag >= kBackwardTag ? Pass::backward : Pass::forward);
    } else {
      what += " is in another collective";
    }
  }
  return "ZeRO-3: the ranks do not gather the same unit (" + what +
         "); every rank must gather and release the same units in the same order";
}

void ShardedEngine::check_tags(std::size_t s) {
  Segment& state = segments_[s];
  if (!check_tags_ || state.tags.sequence() == 0) return;
  state.tags.wait();
  state.tags = Work();
  const std::string message = tag_mismatch(layout_.segments[s].unit, state.tag_pass);
  if (message.empty()) return;
  comm_.abort(message);  // the mismatched all-gathers behind the tags must not be waited for
  COHORT_FAIL(InvalidArgument, message);
}

void ShardedEngine::prefetch(std::int64_t unit, Pass pass) {
  if (unit < 0 || static_cast<std::size_t>(unit) >= unit_segment_.size()) return;
  const std::size_t s = unit_segment_[static_cast<std::size_t>(unit)];
  if (segments_[s].param_slot >= 0 || gathered_units_->taken() >= gathered_units_->size()) return;
  start_gather(s, pass, /*prefetch=*/true);
}

void ShardedEngine::gather_unit(UnitHandle unit, Pass pass) {
  const std::optional<Pass> before = units_.gather(unit, pass);
  const std::size_t s = segment_of_unit(unit.index);
  Segment& state = segments_[s];
  if (before != Pass::forward) {  // else kept from forward: usable already
    // A rank that never gathers this unit leaves the all-gathers to their deadline (a small one
    // may run on this thread): the error gets the unit's name (Note [Unit tags]).
    const std::string context = "ZeRO-3: gathering unit '" + registry_.unit(unit).name + "' for " +
                                pass_name(pass) +
                                ": not every rank gathered it in time; every rank must gather "
                                "and release the same units in the same order. ";
    try {
      start_gather(s, pass, /*prefetch=*/false);
      check_tags(s);
      compute_.wait(gathered_[s]);
    } catch (const InvalidArgument&) {
      throw;  // named already
    } catch (const TimeoutError& error) {
      COHORT_FAIL(TimeoutError, context + error.what());
    } catch (const Error& error) {
      COHORT_FAIL(Error, context + error.what());
    }
  }
  if (pass == Pass::backward) {
    state.slot = buckets_->acquire(compute_);
    zero_async(slot_view(*buckets_, state.slot, layout_.segments[s].slice.count), compute_);
    state.pending = layout_.segments[s].params.size();
    state.reduced = false;
    for (const std::uint32_t param : layout_.segments[s].params) marked_[param] = false;
  }
  if (!initialising_) {
    const auto index = static_cast<std::int64_t>(unit.index);
    prefetch(pass == Pass::forward ? index + 1 : index - 1, pass);
  }
}

void ShardedEngine::release_unit(UnitHandle unit) {
  const std::size_t s = segment_of_unit(unit.index);
  Segment& state = segments_[s];
  const std::optional<Pass> held = units_.held(unit.index);
  if (held == Pass::backward && !state.reduced) {
    // Its gradients are complete now: what was not marked is an error, or zero.
    std::vector<std::uint32_t> unmarked;
    for (const std::uint32_t param : layout_.segments[s].params) {
      if (!marked_[param]) unmarked.push_back(param);
    }
    if (!unmarked.empty()) {
      COHORT_EXPECTS(options_.unused_params == UnusedParams::zero,
                     "release: parameter '" + registry_.params()[unmarked.front()].name +
                         "' of unit '" + registry_.unit(unit).name +
                         "' was gathered for backward but never marked ready; mark every "
                         "parameter of the unit before releasing it, or set unused_params = "
                         "cohort::UnusedParams::zero");
      for (const std::uint32_t param : unmarked) {
        marked_window_[param] = true;
        marked_step_[param] = true;
      }
    }
    comm_after_compute();
    reduce_scatter(s, *buckets_);
    state.reduced = true;
  }
  units_.release(unit);
  if (initialising_) commit(s);
  gathered_units_->release(state.param_slot, compute_);
  state.param_slot = -1;
}

void ShardedEngine::commit(std::size_t s) {
  const ShardSegment& segment = layout_.segments[s];
  const TensorView whole =
      slot_view(*gathered_units_, segments_[s].param_slot, segment.slice.count);
  if (options_.broadcast_parameters) {
    comm_.broadcast(whole, 0, compute_);
  }
  copy_on(compute_,
          whole.slice(static_cast<std::size_t>(rank_) * segment.piece_count, segment.piece_count),
          piece_of(params_, s));
}

TensorView ShardedEngine::unit_param(ParamHandle handle) {
  const ParamInfo& info = checked(handle);
  const std::uint32_t unit = registry_.unit_index_of(handle);
  const std::size_t s = segment_of_unit(unit);
  COHORT_EXPECTS(units_.held(unit).has_value(),
                 "parameter '" + info.name + "' of unit '" + registry_.units()[unit].name +
                     "' is used without being gathered: ZeRO-3 keeps parameters sharded; call "
                     "dp.gather(unit) before using them and dp.release(unit) after");
  const ShardSegment& segment = layout_.segments[s];
  const ArenaSlice slot = layout_.slots[handle.index];
  return slot_view(*gathered_units_, segments_[s].param_slot, segment.slice.count)
      .slice(slot.offset - segment.slice.offset, slot.count);
}

TensorView ShardedEngine::unit_grad(ParamHandle handle) {
  const ParamInfo& info = checked(handle);
  const std::uint32_t unit = registry_.unit_index_of(handle);
  const std::size_t s = segment_of_unit(unit);
  const std::string& name = registry_.units()[unit].name;
  COHORT_EXPECTS(units_.held(unit) == Pass::backward,
                 "grad: parameter '" + info.name + "' of unit '" + name +
                     "' is not gathered for backward; call dp.gather(unit, "
                     "cohort::Pass::backward) before writing its gradients");
  COHORT_EXPECTS(!segments_[s].reduced,
                 "grad: the gradients of unit '" + name +
                     "' were reduce-scattered already (every parameter of it was marked ready); "
                     "write a gradient before marking it");
  const ShardSegment& segment = layout_.segments[s];
  const ArenaSlice slot = layout_.slots[handle.index];
  return slot_view(*buckets_, segments_[s].slot, segment.slice.count)
      .slice(slot.offset - segment.slice.offset, slot.count);
}

void ShardedEngine::unit_grad_ready(ParamHandle handle, bool in_no_sync) {
  const ParamInfo& info = checked(handle);
  const std::uint32_t unit = registry_.unit_index_of(handle);
  const std::size_t s = segment_of_unit(unit);
  COHORT_EXPECTS(units_.held(unit) == Pass::backward,
                 "grad_ready: parameter '" + info.name + "' of unit '" +
                     registry_.units()[unit].name +
                     "' is marked while the unit is not gathered for backward; mark it between "
                     "dp.gather(unit, cohort::Pass::backward) and dp.release(unit)");
  if (!in_no_sync) {
    COHORT_EXPECTS(!marked_step_[handle.index],
                   "grad_ready: parameter '" + info.name +
                       "' was already marked ready in this step; mark each parameter once per "
                       "step, after its gradient is complete");
    marked_step_[handle.index] = true;
  }
  marked_window_[handle.index] = true;
  if (marked_[handle.index]) return;
  marked_[handle.index] = true;
  if (--segments_[s].pending == 0) {
    // The unit's gradients are complete: reduce-scattered now, while backward goes on.
    comm_after_compute();
    reduce_scatter(s, *buckets_);
    segments_[s].reduced = true;
  }
}

void ShardedEngine::unit_sync_grads(bool in_no_sync) {
  if (in_no_sync) return;  // every unit was reduce-scattered as its backward ended
  std::string held;
  for (std::uint32_t u = 0; u < registry_.units().size(); ++u) {
    if (units_.held(u)) held += (held.empty() ? "'" : ", '") + registry_.units()[u].name + "'";
  }
  COHORT_EXPECTS(held.empty(), "sync_grads: unit(s) " + held +
                                   " still gathered; release every unit once its backward is "
                                   "done (ZeRO-3 reduce-scatters a unit's gradients there)");
  const std::vector<std::uint32_t> unused = check_unused();
  timer_.compute_reached(compute_);
  // A prefetch the program never used leaves its slot.
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    if (segments_[s].param_slot >= 0) {
      gathered_units_->release(segments_[s].param_slot, comm_stream_);
      segments_[s].param_slot = -1;
    }
  }
  comm_done_.record(comm_stream_);
  compute_.wait(comm_done_);
  // Units no rank used in this step (their parameters unmarked everywhere, unused_params zero):
  // zero gradients, as a reduce-scatter of zeros would give.
  for (const std::uint32_t param : unused) {
    const std::size_t s = segment_of_unit(registry_.unit_index_of(ParamHandle{param}));
    if (!segments_[s].accumulate) {
      zero_async(piece_of(grad_shard_, s), compute_);
      segments_[s].accumulate = true;  // zeroed once
    }
  }
  timer_.finish_step(comm_stream_);
  for (Segment& state : segments_) state.accumulate = false;
  marked_window_.assign(registry_.size(), false);
  marked_step_.assign(registry_.size(), false);
  issued_in_step_ = 0;
  label_host_work(compute_, "sync_grads()");
}

}  // namespace cohort::detail
