// The Checkpointer itself: what it saves, `save`, `save_async` and its writer thread, and `wait`
// (Note [Checkpoint publish] and Note [Checkpoint copy] in checkpoint.hpp). The copy is in
// snapshot.cpp, the write and the publish in publish.cpp, loading in checkpoint_load.cpp.

#include "checkpointer_impl.hpp"
#include "file_io.hpp"

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/core/detail/current_device.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/pinned_host.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <utility>

namespace cohort {
namespace detail {

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
  if (current < kWriterNice)
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kWriterNice);
}

}  // namespace detail

Checkpointer::Impl::Impl(DataParallel& dp_, Optimizer* optimizer_, bool without_optimizer_,
                         CheckpointOptions options_, LossScaler* scaler_)
    : dp(dp_),
      optimizer(optimizer_),
      without_optimizer(without_optimizer_),
      scaler(scaler_),
      options(std::move(options_)),
      store(dp_.world().store().clone()),
      host_copy(std::make_unique<detail::Snapshot>()) {
  COHORT_EXPECTS(optimizer != nullptr || without_optimizer,
                 "a Checkpointer was given a null optimizer: give it the optimizer that steps the "
                 "parameters (&optimizer), whose state it then saves and restores, or "
                 "cohort::without_optimizer where no optimizer steps them (Note [Checkpoint "
                 "optimizer state] in cohort/checkpoint/checkpoint.hpp)");
  check_no_optimizer_left_out("building a Checkpointer");
  COHORT_EXPECTS(!options.directory.empty(), "a Checkpointer needs a directory");
  COHORT_EXPECTS(options.keep_last >= 0, "keep_last must be 0 (keep all) or positive");
  // Note [Checkpointer keys]: the n-th Checkpointer of a directory on each rank has keys of its
  // own, so that a later one never reads an earlier one's reports.
  const std::string directory = options.directory.lexically_normal().string();
  const std::string base =
      "checkpoint/" + checksum_to_hex(Checksum::of(directory.data(), directory.size()));
  const std::int64_t instance =
      store->add(base + "/instances/rank/" + std::to_string(dp.world().rank()), 1);
  keys = base + "/" + std::to_string(instance);
  const Device device = dp.compute_stream().device();
  host_copy->resource = device.is_host()
                            ? std::shared_ptr<MemoryResource>(std::make_shared<HostResource>())
                            : make_pinned_host_resource();
  host_copy->side = Stream::create(device, HostExecution::worker);
  host_copy->copied = Event::create(device);
  const std::uint64_t used = dp.plan().used_count;
  // ZeRO-3 keeps only this rank's shard of the parameters (Note [Sharded checkpoints]).
  const TensorView params =
      dp.options().sharding == Sharding::zero3 ? dp.param_shard() : dp.param_arena();
  arrays.push_back(detail::CheckpointArray{"params", dp.dtype(), used, params, 0});
  if (optimizer != nullptr) {
    COHORT_EXPECTS(optimizer->target().params.data() == params.data(),
                   "a Checkpointer's optimizer must step its DataParallel's parameters");
    for (const OptimizerStateView& state : optimizer->state()) {
      arrays.push_back(detail::CheckpointArray{"optimizer/" + state.name, DType::f32, used,
                                               state.view, optimizer->shard_offset()});
    }
  }
  if (dp.options().sharding != Sharding::none) set_up_sharded();
}

void Checkpointer::Impl::check_no_optimizer_left_out(const std::string& doing) const {
  if (!without_optimizer) return;
  const std::vector<const Optimizer*> stepping = optimizers_stepping(
      (dp.options().sharding == Sharding::zero3 ? dp.param_shard() : dp.param_arena()).data());
  if (stepping.empty()) return;
  const Optimizer& found = *stepping.front();
  std::string names;
  for (const OptimizerStateView& state : found.state()) {
    names += (names.empty() ? "" : ", ") + state.name;
  }
  COHORT_FAIL(InvalidArgument,
              doing + " with cohort::without_optimizer while " +
                  (found.is_sharded() ? "a ZeRO-1 " : "an ") + found.rule_name() +
                  " optimizer steps these parameters: its state (" + names +
                  ", its step count) would be left out of the checkpoint, and a resumed run would "
                  "restart it from zero and diverge. Build the Checkpointer with the optimizer: "
                  "Checkpointer(dp, &optimizer, options)");
}

// Note [Checkpointer keys]
// The ranks agree through the store under keys named by the directory and a counter of each
// save and load. Two Checkpointers of one directory in one world (a program that builds a new
// one for a new model, a benchmark that loads into fresh state) would otherwise reuse each
// other's keys: a rank could read a report an earlier Checkpointer left there and choose
// differently from the ranks that read the new one, and the ranks would then wait on different
// collectives. Each rank counts the Checkpointers it builds for the directory (a store counter of
// its own), and since every rank builds them in the same order (construction is collective), the
// n-th one on every rank takes the same keys.
std::string Checkpointer::Impl::key_prefix() const {
  return keys;
}

void Checkpointer::Impl::wait() {
  if (writer.joinable()) writer.join();
  if (writer_error) {
    std::exception_ptr error = std::exchange(writer_error, nullptr);
    std::rethrow_exception(error);
  }
}

Checkpointer::Checkpointer(DataParallel& dp, Optimizer* optimizer, CheckpointOptions options,
                           LossScaler* scaler)
    : impl_(std::make_unique<Impl>(dp, optimizer, false, std::move(options), scaler)) {}

Checkpointer::Checkpointer(DataParallel& dp, WithoutOptimizer, CheckpointOptions options)
    : impl_(std::make_unique<Impl>(dp, nullptr, true, std::move(options), nullptr)) {}

Checkpointer::~Checkpointer() {
  try {
    impl_->wait();
  } catch (const std::exception& error) {
    COHORT_LOG(error) << "the asynchronous checkpoint save failed: " << error.what();
  }
  impl_->finish_deleting();
}

const CheckpointOptions& Checkpointer::options() const noexcept {
  return impl_->options;
}

bool Checkpointer::save_in_flight() const noexcept {
  return impl_->writing.load(std::memory_order_acquire);
}

const std::optional<LoadReport>& Checkpointer::last_load() const noexcept {
  return impl_->last_load;
}

void Checkpointer::wait() {
  impl_->wait();
}

std::optional<TrainingState> Checkpointer::load() {
  return impl_->load_latest();
}

TrainingState Checkpointer::load(const std::filesystem::path& folder) {
  return impl_->load_folder(folder);
}

std::filesystem::path Checkpointer::save(const TrainingState& state) {
  Impl& impl = *impl_;
  impl.check_no_optimizer_left_out("saving step " + std::to_string(state.step));
  impl.wait();
  impl.saved_or_loaded = true;  // a load from now on is a live one (Note [Start-up load])
  if (impl.sharded) impl.to_checkpoint_order();
  impl.take_snapshot(state, *impl.host_copy);
  impl.host_copy->copied->synchronize();
  impl.write_and_publish(
      *impl.host_copy);  // no hook reads this save's `reads` (Note [Checkpoint in place])
  return impl.options.directory / detail::checkpoint_name(state.step);
}

void Checkpointer::save_async(const TrainingState& state) {
  Impl& impl = *impl_;
  impl.check_no_optimizer_left_out("saving step " + std::to_string(state.step));
  impl.wait();
  impl.saved_or_loaded = true;
  if (impl.sharded) impl.to_checkpoint_order();
  impl.take_snapshot(state, *impl.host_copy);
  detail::Snapshot& snapshot = *impl.host_copy;
  // The optimizer's next step waits for the copy and, on the host, has the writer hand over what
  // it has not yet read (Note [Checkpoint in place]); without an optimizer, nothing can: wait now.
  if (impl.optimizer != nullptr) {
    impl.optimizer->write_after(*snapshot.copied);
  } else {
    snapshot.copied->synchronize();
    if (snapshot.reads) snapshot.stage_rest(*snapshot.reads);
  }
  impl.writing.store(true, std::memory_order_release);
  try {
    impl.writer = std::thread([&impl] {
      // Note [Checkpoint writer priority]: the writer yields the cores to training.
      detail::lower_thread_priority();
      try {
        // The writer's CUDA calls (waiting for the copy) run on the rank's device: a thread
        // that binds none would create a context on GPU 0 (Note [Restoring an unbound thread]).
        const detail::CurrentDevice bound(impl.host_copy->copied->device());
        impl.host_copy->copied->synchronize();
        impl.write_and_publish(*impl.host_copy);
      } catch (...) {
        impl.writer_error = std::current_exception();
      }
      impl.host_copy->finish_reading();
      impl.writing.store(false, std::memory_order_release);
    });
  } catch (...) {
    impl.writing.store(false, std::memory_order_release);
    throw;
  }
  // Only once the writer runs: it is then sure to mark `reads` finished, after which the hook
  // does nothing, even once this Checkpointer is gone.
  if (impl.optimizer != nullptr && snapshot.reads) {
    impl.optimizer->call_before_next_write([snapshot = &snapshot, reads = snapshot.reads] {
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
