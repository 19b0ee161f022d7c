// Saving checkpoints: the host copy, the durable write of each rank's file, and rank 0's publish
// (Note [Checkpoint publish] in checkpoint.hpp). Loading is in checkpoint_load.cpp.

#include "checkpoint_parts.hpp"
#include "file_io.hpp"

#include "../optim/state_memory.hpp"

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/pinned_host.hpp>
#include <cohort/version.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

namespace cohort {
namespace detail {

PieceRange piece_range(std::uint64_t count, std::uint64_t shard_count, int rank) noexcept {
  const std::uint64_t begin = std::min(count, shard_count * static_cast<std::uint64_t>(rank));
  const std::uint64_t end = std::min(count, begin + shard_count);
  return {begin, end};
}

std::vector<ManifestParam> manifest_params(const DataParallel& dp) {
  std::vector<ManifestParam> params;
  const auto infos = dp.registry().params();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    ManifestParam param;
    param.name = infos[i].name;
    param.shape.assign(infos[i].shape.begin(), infos[i].shape.end());
    param.dtype = infos[i].dtype;
    param.offset = dp.plan().slots[i].offset;
    params.push_back(std::move(param));
  }
  return params;
}

std::string registry_fingerprint(const std::vector<ManifestParam>& params) {
  std::ostringstream text;
  for (const ManifestParam& param : params) {
    text << param.name << '\n' << to_string(param.dtype) << '@' << param.offset << ':';
    for (const std::uint64_t extent : param.shape) text << extent << ',';
    text << '\n';
  }
  const std::string bytes = text.str();
  return checksum_to_hex(Checksum::of(bytes.data(), bytes.size()));
}

void reach_save_point(const CheckpointOptions& options, SavePoint point, int rank) {
  static constexpr const char* kNames[] = {"shard_started", "shard_written", "before_rename",
                                           "before_latest"};
  const char* name = kNames[static_cast<int>(point)];
  // The one variable of this layer; read at each point, as tests set it per process.
  if (const auto crash = env::text(env::kCheckpointCrashAt)) {
    const std::string& value = *crash;
    const std::size_t colon = value.find(':');
    const std::string at = value.substr(0, colon);
    COHORT_EXPECTS(std::find(std::begin(kNames), std::end(kNames), at) != std::end(kNames),
                   "COHORT_CHECKPOINT_CRASH_AT=" + value +
                       ": use shard_started, shard_written, before_rename or before_latest, "
                       "optionally followed by :<rank>");
    const bool this_rank = colon == std::string::npos || value.substr(colon + 1) == std::to_string(rank);
    if (at == name && this_rank) {
      COHORT_LOG(warn) << "COHORT_CHECKPOINT_CRASH_AT=" << value << ": killing this process";
      ::raise(SIGKILL);
    }
  }
  if (options.test_hook) options.test_hook(point);
}

// Note [Checkpoint writer priority]
// The background writer and the deletion of old checkpoints run at a lower priority (nice
// kWriterNice) than training: where the training threads keep every core busy (host training, or
// a host with fewer spare cores than ranks), the writer runs in the gaps (collective waits) and
// in the time slices the scheduler still gives it, instead of taking a core from a step at once.
// It is not SCHED_IDLE, which could starve the save for as long as the cores stay busy and run
// into the store's timeouts; a save still finishes while training runs, only later. A GPU's copy
// to staging keeps the normal priority: the optimizer's next step waits for it.
void lower_thread_priority() noexcept {
  constexpr int kWriterNice = 10;
  const int current = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  // Only ever lowers; errors are harmless (the thread runs at the normal priority).
  if (current < kWriterNice) ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kWriterNice);
}

}  // namespace detail

namespace {

std::string report_key(const std::string& prefix, int rank) {
  return prefix + "/rank/" + std::to_string(rank);
}

/// The checksums of a file's pieces, fed chunk by chunk in file order as the chunks are written.
struct PieceChecksums {
  explicit PieceChecksums(const std::vector<std::uint64_t>& sizes)
      : piece_bytes(sizes), pieces(sizes.size()), piece_end(sizes.empty() ? 0 : sizes[0]) {}

  /// The file's bytes [offset, offset + size), at `chunk`; `offset` is where the previous call
  /// ended.
  void update(const unsigned char* chunk, std::uint64_t offset, std::uint64_t size) {
    const std::uint64_t start = offset;
    const std::uint64_t end = offset + size;
    while (offset < end) {
      while (offset >= piece_end) piece_end += piece_bytes[++piece];  // past empty pieces too
      const std::uint64_t take = std::min(end, piece_end) - offset;
      pieces[piece].update(chunk + (offset - start), take);
      offset += take;
    }
  }

  const std::vector<std::uint64_t>& piece_bytes;
  std::vector<Checksum> pieces;
  std::size_t piece = 0;
  std::uint64_t piece_end;
};

}  // namespace

Checkpointer::Checkpointer(DataParallel& dp, Optimizer* optimizer, CheckpointOptions options,
                           LossScaler* scaler)
    : dp_(dp), optimizer_(optimizer), scaler_(scaler), options_(std::move(options)),
      store_(dp.world().store().clone()), snapshot_(std::make_unique<Snapshot>()) {
  COHORT_EXPECTS(!options_.directory.empty(), "a Checkpointer needs a directory");
  COHORT_EXPECTS(dp.options().sharding == Sharding::none,
                 "a Checkpointer cannot save " + std::string(to_string(dp.options().sharding)) +
                     " state yet (its shards are laid out by shard_layout(), which checkpoints do "
                     "not read yet); checkpoint plain data parallel or ZeRO-1");
  COHORT_EXPECTS(options_.keep_last >= 0, "keep_last must be 0 (keep all) or positive");
  const Device device = dp.compute_stream().device();
  snapshot_->resource = device.is_host() ? std::shared_ptr<MemoryResource>(std::make_shared<HostResource>())
                                         : make_pinned_host_resource();
  snapshot_->side = Stream::create(device, HostExecution::worker);
  snapshot_->copied = Event::create(device);
  const std::uint64_t used = dp.plan().used_count;
  arrays_.push_back(Array{"params", dp.dtype(), used, dp.param_arena(), 0});
  if (optimizer_ != nullptr) {
    COHORT_EXPECTS(optimizer_->target().params.data() == dp.param_arena().data(),
                   "a Checkpointer's optimizer must step its DataParallel's parameter arena");
    for (const OptimizerStateView& state : optimizer_->state()) {
      arrays_.push_back(Array{"optimizer/" + state.name, DType::f32, used, state.view,
                              optimizer_->shard_offset()});
    }
  }
}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& error) {
    COHORT_LOG(error) << "the asynchronous checkpoint save failed: " << error.what();
  }
  finish_deleting();
}

std::string Checkpointer::key_prefix() const {
  const std::string directory = options_.directory.lexically_normal().string();
  return "checkpoint/" + checksum_to_hex(Checksum::of(directory.data(), directory.size()));
}

bool Checkpointer::save_in_flight() const noexcept { return writing_.load(std::memory_order_acquire); }

void Checkpointer::wait() {
  if (writer_.joinable()) writer_.join();
  if (writer_error_) {
    std::exception_ptr error = std::exchange(writer_error_, nullptr);
    std::rethrow_exception(error);
  }
}

void Checkpointer::snapshot(const TrainingState& state, Snapshot& into) {
  const World& world = dp_.world();
  into.rank = world.rank();
  into.world_size = world.size();
  into.shard_count = dp_.shard_count();
  into.save_index = saves_++;
  const Stream& stream = dp_.compute_stream();

  Manifest& manifest = into.manifest;
  manifest = Manifest{};
  manifest.cohort_version = version();
  manifest.world_size = into.world_size;
  manifest.params = detail::manifest_params(dp_);
  manifest.registry_fingerprint = detail::registry_fingerprint(manifest.params);
  manifest.arena_dtype = dp_.dtype();
  manifest.used_count = dp_.plan().used_count;
  if (optimizer_ != nullptr) {
    manifest.optimizer_rule = optimizer_->rule_name();
    manifest.optimizer_sharded = optimizer_->is_sharded();
    manifest.learning_rate = optimizer_->learning_rate();
  }
  manifest.step = state.step;
  manifest.epoch = state.epoch;
  manifest.data_position = state.data_position;

  // This rank's pieces, in file order; rank 0 adds the user blob last.
  into.piece_bytes.clear();
  std::uint64_t total = 0;
  for (const Array& array : arrays_) {
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
  into.steps_copied = optimizer_ != nullptr;
  into.scaler_copied = scaler_ != nullptr;
  const std::uint64_t counter_bytes = (into.steps_copied ? sizeof(std::int64_t) : 0) +
                                      (into.scaler_copied ? scaler_->state_view().bytes() : 0);
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
  for (const Array& array : arrays_) {
    const detail::PieceRange range = detail::piece_range(array.count, into.shard_count, into.rank);
    const std::size_t element = size_of(array.dtype);
    const unsigned char* source = nullptr;
    if (range.end > range.begin) {
      COHORT_EXPECTS(range.begin >= array.view_offset &&
                         range.end <= array.view_offset + array.view.count(),
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
    into.reads = std::make_shared<InPlaceReads>();
    into.reads->staged_from = total;
    if (into.bounce.size_bytes() == 0) {
      into.bounce = Buffer(into.resource, detail::kWriteChunk + detail::kDirectAlignment,
                           MemoryCategory::other);
    }
  }
  std::vector<TensorView> counters;  // in the order decode_counters() reads them
  if (into.steps_copied) counters.push_back(optimizer_->steps_taken_view());
  if (into.scaler_copied) counters.push_back(scaler_->state_view());
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

namespace {
/// The writer copies in-place pieces out in blocks of this size: small enough to stay in the
/// core's cache until checksummed, and to be all that `stage_rest` ever waits for.
constexpr std::uint64_t kInPlaceBlock = std::uint64_t{256} << 10;
}  // namespace

void Checkpointer::Snapshot::copy_out(std::uint64_t begin, std::uint64_t end, unsigned char* to,
                                      bool staged) {
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

const unsigned char* Checkpointer::Snapshot::chunk(std::uint64_t offset, std::uint64_t count,
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
  out += (detail::kDirectAlignment - reinterpret_cast<std::uintptr_t>(out) % detail::kDirectAlignment) %
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

void Checkpointer::Snapshot::stage_rest(InPlaceReads& of) {
  std::unique_lock lock(of.mutex);
  of.idle.wait(lock, [&] { return !of.reading || of.finished; });
  // A hook of an earlier save finds it finished (the next save waited for it first).
  if (of.finished || &of != reads.get() || reads->staged_from <= reads->read_to) return;
  copy_out(reads->read_to, reads->staged_from, bytes() + reads->read_to, false);
  reads->staged_from = reads->read_to;
}

void Checkpointer::Snapshot::finish_reading() {
  if (!reads) return;
  {
    const std::lock_guard lock(reads->mutex);
    reads->finished = true;
  }
  reads->idle.notify_all();
}

void Checkpointer::Snapshot::reserve(std::uint64_t bytes) {
  if (staging.size_bytes() < bytes + detail::kDirectAlignment) {
    staging.reset();
    staging = Buffer(resource, static_cast<std::size_t>(bytes) + detail::kDirectAlignment,
                     MemoryCategory::other);
  }
}

unsigned char* Checkpointer::Snapshot::bytes() noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(staging.data());
  const std::uintptr_t aligned = (address + detail::kDirectAlignment - 1) / detail::kDirectAlignment *
                                 detail::kDirectAlignment;
  return static_cast<unsigned char*>(staging.data()) + (aligned - address);
}

void Checkpointer::Snapshot::decode_counters() {
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

void Checkpointer::write_and_publish(Snapshot& snapshot) {
  snapshot.decode_counters();  // the copy has completed (Note [Checkpoint counters])
  const std::string prefix = key_prefix() + "/save/" + std::to_string(snapshot.save_index);
  const std::string name = detail::checkpoint_name(snapshot.manifest.step);
  const std::filesystem::path incomplete = options_.directory / (".incomplete-" + name);
  const auto timeout = dp_.world().timeout();
  if (snapshot.rank == 0) {
    std::string prepared = "ok";
    try {
      std::filesystem::create_directories(options_.directory);
      std::filesystem::remove_all(incomplete);  // a crashed save's leftovers
      std::filesystem::create_directories(incomplete);
    } catch (const std::exception& error) {
      prepared = std::string("error cannot prepare ") + incomplete.string() + ": " + error.what();
    }
    store_->set(prefix + "/prepared", prepared);
  }
  std::string report;
  const std::string prepared = store_->get(prefix + "/prepared", timeout);
  if (prepared != "ok") {
    report = prepared;
  } else {
    try {
      const std::filesystem::path file =
          incomplete / ("rank-" + std::to_string(snapshot.rank) + ".bin");
      detail::reach_save_point(options_, SavePoint::shard_started, snapshot.rank);
      PieceChecksums checksums(snapshot.piece_bytes);
      detail::write_file_durably(file, snapshot.size, options_.direct_io,
                                 [&](std::size_t offset, std::size_t size) {
                                   return snapshot.chunk(
                                       offset, size,
                                       [&](const unsigned char* bytes, std::uint64_t at,
                                           std::uint64_t count) { checksums.update(bytes, at, count); });
                                 });
      detail::reach_save_point(options_, SavePoint::shard_written, snapshot.rank);
      std::ostringstream text;
      text << "ok " << snapshot.size;
      for (const Checksum& checksum : checksums.pieces) text << ' ' << checksum_to_hex(checksum.digest());
      report = text.str();
    } catch (const std::exception& error) {
      report = std::string("error rank ") + std::to_string(snapshot.rank) + ": " + error.what();
    }
  }
  snapshot.finish_reading();  // also when the file was not written
  store_->set(report_key(prefix, snapshot.rank), report);

  if (snapshot.rank == 0) {
    std::string outcome = "ok";
    try {
      // While the other ranks finish their files: the fsync of `latest`'s new content is then
      // not on the path from the data to the publish.
      if (prepared == "ok") detail::prepare_latest(options_.directory, name);
    } catch (const std::exception& error) {
      outcome = std::string("error ") + error.what();
    }
    std::vector<std::string> reports;
    for (int rank = 0; rank < snapshot.world_size; ++rank) {
      reports.push_back(store_->get(report_key(prefix, rank), timeout));
    }
    try {
      if (outcome == "ok") publish(snapshot, reports);
    } catch (const std::exception& error) {
      outcome = std::string("error ") + error.what();
    }
    if (outcome != "ok") {
      // Every rank has reported, so none writes here any more: what the failed save wrote goes
      // now, not at the next good save (on a full disk there would be none).
      std::error_code ignored;
      std::filesystem::remove_all(incomplete, ignored);
    }
    store_->set(prefix + "/done", outcome);
  }
  const std::string outcome = store_->get(prefix + "/done", timeout);
  if (outcome != "ok") {
    throw CheckpointError("cohort: checkpoint " + (options_.directory / name).string() +
                          " was not saved: " + outcome.substr(outcome.find(' ') + 1));
  }
}

void Checkpointer::publish(Snapshot& snapshot, const std::vector<std::string>& reports) {
  Manifest& manifest = snapshot.manifest;
  const std::string name = detail::checkpoint_name(manifest.step);
  std::vector<std::vector<std::uint64_t>> checksums(reports.size());
  for (std::size_t rank = 0; rank < reports.size(); ++rank) {
    std::istringstream text(reports[rank]);
    std::string status;
    std::uint64_t bytes = 0;
    text >> status;
    if (status != "ok") throw CheckpointError(reports[rank].substr(reports[rank].find(' ') + 1));
    text >> bytes;
    std::string hex;
    while (text >> hex) {
      std::uint64_t digest = 0;
      COHORT_CHECK(checksum_from_hex(hex, digest), CheckpointError,
                   "rank " + std::to_string(rank) + " sent a malformed checkpoint report");
      checksums[rank].push_back(digest);
    }
    ManifestFile file{"rank-" + std::to_string(rank) + ".bin", bytes, 0};
    // The file's checksum is the checksum of its pieces' checksums (they cover it exactly).
    file.checksum = Checksum::of(checksums[rank].data(), checksums[rank].size() * sizeof(std::uint64_t));
    manifest.files.push_back(std::move(file));
  }
  std::vector<std::uint64_t> file_offsets(reports.size(), 0);
  for (std::size_t index = 0; index < arrays_.size(); ++index) {
    const Array& local = arrays_[index];
    ManifestArray array{local.name, local.dtype, local.count, {}};
    for (std::size_t rank = 0; rank < reports.size(); ++rank) {
      const detail::PieceRange range =
          detail::piece_range(local.count, snapshot.shard_count, static_cast<int>(rank));
      COHORT_CHECK(index < checksums[rank].size(), CheckpointError,
                   "rank " + std::to_string(rank) + " reported too few pieces");
      array.pieces.push_back(ManifestPiece{static_cast<std::uint32_t>(rank), range.begin,
                                           range.end - range.begin, file_offsets[rank],
                                           checksums[rank][index]});
      file_offsets[rank] += (range.end - range.begin) * size_of(local.dtype);
    }
    manifest.arrays.push_back(std::move(array));
  }
  const std::uint64_t blob = snapshot.piece_bytes.back();
  manifest.arrays.push_back(ManifestArray{
      "user_blob", DType::u8, blob, {ManifestPiece{0, 0, blob, file_offsets[0], checksums[0].back()}}});

  const std::filesystem::path root = options_.directory;
  const std::filesystem::path incomplete = root / (".incomplete-" + name);
  const std::string text = to_json(manifest);
  detail::write_file_durably(incomplete / "manifest.json", text.data(), text.size());
  detail::fsync_directory(incomplete);
  detail::reach_save_point(options_, SavePoint::before_rename, 0);

  // A folder of this name exists when an earlier run saved this step but crashed before moving
  // `latest` (stale: delete it), or when this step is saved again (keep it until `latest` moves).
  const std::filesystem::path final_path = root / name;
  const std::filesystem::path replaced = root / (".replaced-" + name);
  const bool exists = std::filesystem::exists(final_path);
  const bool is_latest = exists && detail::read_latest(root) == name;
  if (exists && !is_latest) std::filesystem::remove_all(final_path);
  if (is_latest) {
    std::filesystem::remove_all(replaced);
    detail::rename_path(final_path, replaced);
  }
  detail::rename_path(incomplete, final_path);
  detail::fsync_directory(root);
  detail::reach_save_point(options_, SavePoint::before_latest, 0);
  detail::move_latest(root);  // prepared by write_and_publish
  if (is_latest) std::filesystem::remove_all(replaced);

  // Keep the newest `keep_last` up to this one; delete older ones and any newer, unpublished one,
  // and what saves that crashed left (this save's own folder was renamed).
  std::vector<std::string> doomed;
  int kept = 0;
  for (const std::string& other : detail::list_checkpoints(root)) {
    const bool newer = *detail::step_of_name(other) > manifest.step;
    const bool keep = !newer && (options_.keep_last == 0 || kept < options_.keep_last);
    if (!newer) ++kept;
    if (!keep) doomed.push_back(other);
  }
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    const std::string other = entry.path().filename().string();
    // `latest`'s temporary files of saves that crashed before moving it (this one's has moved).
    if (other.starts_with(".incomplete-") || other.starts_with(".latest.tmp-")) doomed.push_back(other);
  }
  delete_in_background(root, doomed);
}

// Note [Checkpoint deletion]
// Deleting an old checkpoint took as long as writing the new one on a disk mounted with
// `discard` (each unlink of a large file waits for its blocks to be discarded). So a save only
// renames what it deletes to `.deleting-<name>` (a rename: no checkpoint is half deleted under
// its own name, and loads ignore dot-names), and a low-priority thread deletes those folders
// while training goes on. The next publish and the destructor wait for it; a crash leaves
// `.deleting-` folders, which the next save's deletion removes too.
void Checkpointer::delete_in_background(const std::filesystem::path& root,
                                        const std::vector<std::string>& names) {
  finish_deleting();
  for (const std::string& name : names) {
    const std::string hidden = name.starts_with(".") ? name.substr(1) : name;
    std::error_code error;
    std::filesystem::rename(root / name, root / (".deleting-" + hidden), error);
    if (error) std::filesystem::remove_all(root / name, error);  // a leftover holds that name
  }
  deleter_ = std::thread([root] {
    detail::lower_thread_priority();
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
      if (entry.path().filename().string().starts_with(".deleting-")) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
  });
}

void Checkpointer::finish_deleting() noexcept {
  if (deleter_.joinable()) deleter_.join();
}

std::filesystem::path Checkpointer::save(const TrainingState& state) {
  wait();
  snapshot(state, *snapshot_);
  snapshot_->copied->synchronize();
  write_and_publish(*snapshot_);  // no hook reads this save's `reads` (Note [Checkpoint in place])
  return options_.directory / detail::checkpoint_name(state.step);
}

void Checkpointer::save_async(const TrainingState& state) {
  wait();
  snapshot(state, *snapshot_);
  // The optimizer's next step waits for the copy and, on the host, has the writer hand over what
  // it has not yet read (Note [Checkpoint in place]); without an optimizer, nothing can: wait now.
  if (optimizer_ != nullptr) {
    optimizer_->write_after(*snapshot_->copied);
  } else {
    snapshot_->copied->synchronize();
    if (snapshot_->reads) snapshot_->stage_rest(*snapshot_->reads);
  }
  writing_.store(true, std::memory_order_release);
  try {
    writer_ = std::thread([this] {
      // Note [Checkpoint writer priority]: the writer yields the cores to training.
      detail::lower_thread_priority();
      try {
        snapshot_->copied->synchronize();
        write_and_publish(*snapshot_);
      } catch (...) {
        writer_error_ = std::current_exception();
      }
      snapshot_->finish_reading();
      writing_.store(false, std::memory_order_release);
    });
  } catch (...) {
    writing_.store(false, std::memory_order_release);
    throw;
  }
  // Only once the writer runs: it is then sure to mark `reads` finished, after which the hook
  // does nothing, even once this Checkpointer is gone.
  if (optimizer_ != nullptr && snapshot_->reads) {
    optimizer_->call_before_next_write([snapshot = snapshot_.get(), reads = snapshot_->reads] {
      {
        const std::lock_guard lock(reads->mutex);
        if (reads->finished) return;
      }
      snapshot->copied->synchronize();
      snapshot->stage_rest(*reads);
    });
  }
}

}  // namespace cohort
