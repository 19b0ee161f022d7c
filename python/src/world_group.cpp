#include "world_group.hpp"

#include <cohort/core/error.hpp>
#include <cohort/launch/launch_info.hpp>

#include <algorithm>
#include <atomic>
#include <utility>

namespace cohort::python {

namespace {

/// The first failure of a collective in this process goes to torchrun's error file
/// (TORCHELASTIC_ERROR_FILE; nothing elsewhere), so that its summary names the cause.
Outcome recorded(Outcome outcome) {
  static std::atomic<bool> written{false};
  if (!outcome.ok() && outcome.status != Status::invalid_argument && !written.exchange(true)) {
    record_failure(outcome.message);
  }
  return outcome;
}

TensorView view_of(const Buffer& buffer) {
  COHORT_EXPECTS(buffer.dtype >= 0 && buffer.dtype <= static_cast<int>(DType::u8),
                 "dtype code " + std::to_string(buffer.dtype) + " is not a cohort dtype");
  return TensorView(buffer.data, buffer.count, static_cast<DType>(buffer.dtype),
                    buffer.cuda ? Device::cuda(buffer.device) : Device::host());
}

class WorldWork final : public PendingWork {
 public:
  WorldWork(Work work, std::weak_ptr<Completer> completer, std::optional<Event> finished)
      : work_(std::move(work)), completer_(std::move(completer)), finished_(std::move(finished)) {}

  bool done() const override {
    bool is_done = false;
    const Outcome outcome = guarded([&] { is_done = work_.done(); });
    return is_done || !outcome.ok();
  }

  Outcome wait(std::int64_t timeout_ms) override {
    if (timeout_ms >= 0) {
      Outcome outcome = guarded([&] { work_.wait(std::chrono::milliseconds(timeout_ms)); });
      if (outcome.ok() || !done()) {
        return outcome;  // done, or only this wait's own limit passed: no failure of the work
      }
    }
    return recorded(guarded([&] { work_.wait(); }));
  }

  void when_done(std::function<void(const Outcome&)> callback) override {
    std::shared_ptr<Completer> completer = completer_.lock();
    if (done() || !completer) {  // no completer: its group is gone, and the work with it
      callback(recorded(guarded([&] { work_.wait(); })));
      return;
    }
    completer->add(work_, std::move(callback));
  }

  Outcome block_stream(void* cuda_stream) override {
    return guarded([&] {
      COHORT_EXPECTS(finished_.has_value(), "block_stream is for collectives on CUDA memory");
      Stream::wrap_cuda(finished_->device(), cuda_stream).wait(*finished_);
    });
  }

 private:
  Work work_;
  // Weak: a callback run by the completer may drop the last reference to this work.
  std::weak_ptr<Completer> completer_;
  std::optional<Event> finished_;  // recorded after a CUDA collective
};

}  // namespace

Completer::~Completer() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) {
    thread_.join();  // every work ends, by its deadline at the latest
  }
}

void Completer::add(Work work, std::function<void(const Outcome&)> callback) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(work), std::move(callback));
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { run(); });
    }
  }
  wake_.notify_one();
}

void Completer::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      return;
    }
    auto [work, callback] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const Outcome outcome = recorded(guarded([&] { work.wait(); }));
    callback(outcome);
    lock.lock();
  }
}

WorldGroup::WorldGroup(WorldOptions options)
    : options_(options),
      host_([&] {
        WorldOptions host = options;
        host.backend = BackendChoice::host;
        return init(std::move(host));
      }()),
      host_streams_() {}

WorldGroup::~WorldGroup() {
  completer_.reset();  // its callbacks run before the worlds go
}

std::string WorldGroup::describe() const {
  return host_.describe();
}

World& WorldGroup::cuda_world(int device) {
  const std::lock_guard<std::mutex> lock(cuda_mutex_);
  if (!cuda_) {
    COHORT_EXPECTS(built_with_cuda(),
                   "a CUDA buffer was given, but this build of cohort has no CUDA backend "
                   "(it was built with COHORT_WITH_CUDA=OFF); rebuild the package where the CUDA "
                   "toolkit and NCCL are installed");
    // The GPU of the first buffer: in a subgroup the group-local rank names no GPU (global rank
    // 3 of a node may be rank 0 of its group, and still own cuda:3).
    WorldOptions cuda = options_;
    cuda.backend = BackendChoice::nccl;
    cuda.device = Device::cuda(device);
    cuda_.emplace(init(std::move(cuda)));
  }
  COHORT_EXPECTS(cuda_->device() == Device::cuda(device),
                 "the buffer is on cuda:" + std::to_string(device) + " but this rank's NCCL " +
                     "communicator of the group works on " + cuda_->device().to_string() +
                     " (the GPU of the group's first CUDA collective): give every collective of "
                     "a group buffers on one GPU per rank (torch.cuda.set_device(local_rank))");
  return *cuda_;
}

const Stream& HostStreams::choose(std::size_t bytes, bool async_op) {
  if (!async_op || bytes <= kBlockingBytes) {
    return caller;
  }
  if (!worker) {
    worker.emplace(Stream::create(Device::host(), HostExecution::worker));
  }
  return *worker;
}

Outcome WorldGroup::issue(Op op, const Buffer& input, const Buffer& output, Reduce reduce, int root,
                          void* cuda_stream, bool async_op, std::shared_ptr<PendingWork>* work) {
  // A collective that ran on the caller's thread and failed throws from here.
  return recorded(guarded([&] {
    const std::lock_guard<std::mutex> lock(issue_mutex_);
    const bool cuda = op == Op::barrier ? false : output.cuda;
    COHORT_EXPECTS(op == Op::barrier || op == Op::broadcast || input.cuda == output.cuda,
                   "input and output must both be host memory or both CUDA memory");
    Communicator& comm = cuda ? cuda_world(output.device).comm() : host_.comm();
    const std::size_t bytes = std::max(input.count * size_of(static_cast<DType>(input.dtype)),
                                       output.count * size_of(static_cast<DType>(output.dtype)));
    const Stream stream = cuda ? Stream::wrap_cuda(Device::cuda(output.device), cuda_stream)
                               : host_streams_.choose(bytes, async_op);
    const auto reduce_op = static_cast<ReduceOp>(reduce);
    Work issued;
    switch (op) {
      case Op::all_reduce:
        issued = comm.all_reduce(view_of(input), view_of(output), reduce_op, stream);
        break;
      case Op::reduce_scatter:
        issued = comm.reduce_scatter(view_of(input), view_of(output), reduce_op, stream);
        break;
      case Op::all_gather:
        issued = comm.all_gather(view_of(input), view_of(output), stream);
        break;
      case Op::broadcast:
        issued = comm.broadcast(view_of(output), root, stream);
        break;
      case Op::barrier:
        issued = comm.barrier(stream);
        break;
    }
    std::optional<Event> finished;
    if (cuda) {
      finished.emplace(Event::create(Device::cuda(output.device)));
      finished->record(stream);
    }
    *work = std::make_shared<WorldWork>(std::move(issued), completer_, std::move(finished));
  }));
}

void WorldGroup::abort(const std::string& reason) {
  host_.comm().abort(reason);
  const std::lock_guard<std::mutex> lock(cuda_mutex_);
  if (cuda_) {
    cuda_->comm().abort(reason);
  }
}

}  // namespace cohort::python
