// The host copy of a save (Note [Checkpoint copy] in checkpoint.hpp): on a GPU a copy into pinned
// staging on the Checkpointer's side stream; on the host the arrays are read in place by the
// writer, and handed over to staging by the optimizer's next step (Note [Checkpoint in place]).

#include "checkpointer_impl.hpp"
#include "file_io.hpp"

#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/version.hpp>

#include <algorithm>
#include <cstring>

namespace cohort {

// Note [Checkpoint in place]
// On the host, a save does not copy the arrays to staging before it writes them: the writer reads
// them in place, chunk by chunk, each copied into a chunk-sized bounce buffer 256 KiB at a time,
// every part checksummed while it is still in the core's cache, and written around the page
// cache. A copy of the whole state before the first write was the largest cost a save took from
// host training (a CPU copy, on cores the training uses, all of it before the optimizer's next
// step), and `save` waited for it. The arrays must not change while the writer reads them: `save`
// returns after the write, and `save_async` gives the optimizer a hook that its next `step()`
// calls before it writes anything (`Optimizer::call_before_next_write`). The hook waits for a
// block being copied out (256 KiB; the writer runs at a low priority, Note [Checkpoint writer
// priority], but the waiting thread frees its core) and copies what the writer has not copied out
// yet into staging, from where the writer goes on, also for the rest of the chunk it is in. A
// writer that keeps ahead of the training (the usual case: a step's forward and backward take
// longer than writing the state) copies nothing more than its chunks. Without an optimizer
// nothing calls the hook, so `save_async` stages everything at once. On a GPU the arrays are
// copied to pinned staging by the side stream's DMA (Note [Checkpoint copy]), which takes no CPU,
// and the writer reads staging.

void Checkpointer::Impl::take_snapshot(const TrainingState& state, detail::Snapshot& into) {
  const World& world = dp.world();
  into.rank = world.rank();
  into.world_size = world.size();
  into.shard_count = sharded ? sharded->slice_count : dp.shard_count();
  into.save_index = saves++;
  const Stream& stream = dp.compute_stream();

  Manifest& manifest = into.manifest;
  manifest = Manifest{};
  manifest.cohort_version = version();
  manifest.world_size = into.world_size;
  manifest.params = detail::manifest_params(dp);
  manifest.registry_fingerprint = detail::registry_fingerprint(manifest.params);
  manifest.arena_dtype = dp.dtype();
  manifest.used_count = detail::checkpoint_plan(dp).used_count;
  if (optimizer != nullptr) {
    manifest.optimizer_rule = optimizer->rule_name();
    manifest.optimizer_sharded = optimizer->is_sharded();
    manifest.learning_rate = optimizer->learning_rate();
  }
  manifest.step = state.step;
  manifest.epoch = state.epoch;
  manifest.data_position = state.data_position;

  // This rank's pieces, in file order; rank 0 adds the user blob last.
  into.piece_bytes.clear();
  std::uint64_t total = 0;
  for (const detail::CheckpointArray& array : arrays) {
    const detail::PieceRange range = detail::piece_range(array.count, into.shard_count, into.rank);
    into.piece_bytes.push_back((range.end - range.begin) * size_of(array.dtype));
    total += into.piece_bytes.back();
  }
  const bool blob = into.rank == 0;
  if (blob) {
    into.piece_bytes.push_back(state.user_blob.size());
    total += state.user_blob.size();
  }
  // Note [Checkpoint counters]
  // The optimizer's step counter and the loss scaler's state are written by the step kernels, in
  // stream order. Reading them here would wait for the compute stream, a stall of up to a whole
  // step at every save; instead they are copied with the arrays, after the same event, into
  // staging after the file's bytes, and the writer decodes them into the manifest once the copy
  // has completed. The optimizer's next step waits for that copy like for the arrays'.
  into.counters_at = (total + 7) / 8 * 8;
  into.steps_copied = optimizer != nullptr;
  into.scaler_copied = scaler != nullptr;
  const std::uint64_t counter_bytes = (into.steps_copied ? sizeof(std::int64_t) : 0) +
                                      (into.scaler_copied ? scaler->state_view().bytes() : 0);
  into.reserve(into.counters_at + counter_bytes);
  into.size = total;
  // The copy runs on the side stream after the work already on the compute stream (Note
  // [Checkpoint copy]); host arrays are not copied but read in place by the writer (Note
  // [Checkpoint in place]); the user blob is the caller's and is copied now.
  const bool in_place = stream.device().is_host();
  Event computed = Event::create(stream.device());
  computed.record(stream);
  into.side->wait(computed);
  into.piece_sources.clear();
  std::uint64_t at = 0;
  for (const detail::CheckpointArray& array : arrays) {
    const detail::PieceRange range = detail::piece_range(array.count, into.shard_count, into.rank);
    const std::size_t element = size_of(array.dtype);
    const unsigned char* source = nullptr;
    if (range.end > range.begin) {
      COHORT_EXPECTS(
          range.begin >= array.view_offset && range.end <= array.view_offset + array.view.count(),
          "checkpoint array " + array.name + ": this rank does not hold its piece");
      source = static_cast<const unsigned char*>(array.view.data()) +
               (range.begin - array.view_offset) * element;
      if (!in_place) {
        detail::copy_to_host_async(into.bytes() + at, source, (range.end - range.begin) * element,
                                   *into.side);
      }
    }
    into.piece_sources.push_back(in_place ? source : nullptr);
    at += (range.end - range.begin) * element;
  }
  if (blob) into.piece_sources.push_back(nullptr);
  into.reads.reset();
  if (in_place) {
    into.reads = std::make_shared<detail::InPlaceReads>();
    into.reads->staged_from = total;
    if (into.bounce.size_bytes() == 0) {
      into.bounce = Buffer(into.resource, detail::kWriteChunk + detail::kDirectAlignment,
                           MemoryCategory::other);
    }
  }
  std::vector<TensorView> counters;  // in the order decode_counters() reads them
  if (into.steps_copied) counters.push_back(optimizer->steps_taken_view());
  if (into.scaler_copied) counters.push_back(scaler->state_view());
  std::uint64_t counter_at = into.counters_at;
  for (const TensorView& counter : counters) {
    detail::copy_to_host_async(into.bytes() + counter_at, counter.data(), counter.bytes(),
                               *into.side);
    counter_at += counter.bytes();
  }
  into.copied->record(*into.side);
  if (blob && !state.user_blob.empty()) {
    std::memcpy(into.bytes() + at, state.user_blob.data(), state.user_blob.size());
  }
}

namespace detail {

namespace {
/// The writer copies in-place pieces out in blocks of this size: small enough to stay in the
/// core's cache until checksummed, and to be all that `stage_rest` ever waits for.
constexpr std::uint64_t kInPlaceBlock = std::uint64_t{256} << 10;
}  // namespace

void Snapshot::copy_out(std::uint64_t begin, std::uint64_t end, unsigned char* to, bool staged) {
  std::uint64_t piece_at = 0;
  for (std::size_t piece = 0; piece < piece_bytes.size() && piece_at < end; ++piece) {
    const std::uint64_t from = std::max(begin, piece_at);
    const std::uint64_t until = std::min(end, piece_at + piece_bytes[piece]);
    if (from < until) {
      const unsigned char* source = !staged && piece_sources[piece] != nullptr
                                        ? piece_sources[piece] + (from - piece_at)
                                        : bytes() + from;
      unsigned char* target = to + (from - begin);
      if (source != target) std::memcpy(target, source, until - from);  // staged in staging
    }
    piece_at += piece_bytes[piece];
  }
}

const unsigned char* Snapshot::chunk(std::uint64_t offset, std::uint64_t count,
                                     const ChunkBytes& see) {
  bool staged = reads == nullptr;
  if (reads) {
    const std::lock_guard lock(reads->mutex);
    staged = offset >= reads->staged_from;
  }
  if (staged) {
    see(bytes() + offset, offset, count);
    return bytes() + offset;
  }
  auto* out = static_cast<unsigned char*>(bounce.data());
  out += (detail::kDirectAlignment -
          reinterpret_cast<std::uintptr_t>(out) % detail::kDirectAlignment) %
         detail::kDirectAlignment;
  for (std::uint64_t block = offset; block < offset + count; block += kInPlaceBlock) {
    const std::uint64_t block_end = std::min(offset + count, block + kInPlaceBlock);
    bool in_place = false;
    {
      const std::lock_guard lock(reads->mutex);
      in_place = block < reads->staged_from;
      reads->reading = in_place;
    }
    copy_out(block, block_end, out + (block - offset), !in_place);
    if (in_place) {
      {
        const std::lock_guard lock(reads->mutex);
        reads->reading = false;
        reads->read_to = block_end;
      }
      reads->idle.notify_all();
    }
    see(out + (block - offset), block, block_end - block);
  }
  return out;
}

void Snapshot::stage_rest(InPlaceReads& of) {
  std::unique_lock lock(of.mutex);
  of.idle.wait(lock, [&] { return !of.reading || of.finished; });
  // A hook of an earlier save finds it finished (the next save waited for it first).
  if (of.finished || &of != reads.get() || reads->staged_from <= reads->read_to) return;
  copy_out(reads->read_to, reads->staged_from, bytes() + reads->read_to, false);
  reads->staged_from = reads->read_to;
}

void Snapshot::finish_reading() {
  if (!reads) return;
  {
    const std::lock_guard lock(reads->mutex);
    reads->finished = true;
  }
  reads->idle.notify_all();
}

void Snapshot::reserve(std::uint64_t bytes) {
  if (staging.size_bytes() < bytes + detail::kDirectAlignment) {
    staging.reset();
    staging = Buffer(resource, static_cast<std::size_t>(bytes) + detail::kDirectAlignment,
                     MemoryCategory::other);
  }
}

unsigned char* Snapshot::bytes() noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(staging.data());
  const std::uintptr_t aligned = (address + detail::kDirectAlignment - 1) /
                                 detail::kDirectAlignment * detail::kDirectAlignment;
  return static_cast<unsigned char*>(staging.data()) + (aligned - address);
}

void Snapshot::decode_counters() {
  const unsigned char* at = bytes() + counters_at;
  if (steps_copied) {
    std::memcpy(&manifest.optimizer_steps, at, sizeof(std::int64_t));
    at += sizeof(std::int64_t);
  }
  if (scaler_copied) {
    const LossScalerSnapshot scaler = LossScaler::decode(at);
    manifest.loss_scaler = ManifestLossScaler{scaler.scale, scaler.growth_tracker,
                                              scaler.skipped_steps, scaler.last_step_skipped};
  }
}

}  // namespace detail
}  // namespace cohort
