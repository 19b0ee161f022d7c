#pragma once

// `WorldGroup`: the bridge's `Group` (bridge.hpp) over cohort worlds, one on the host and one
// on CUDA made at the first CUDA buffer. The torch backend holds one per process group.

#include "bridge.hpp"

#include <cohort/comm/world.hpp>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace cohort::python {

/// Turns whatever `fn` throws into an Outcome: InvalidArgument, TimeoutError, anything else.
template <typename Fn>
Outcome guarded(Fn&& fn) noexcept {
  try {
    fn();
    return {};
  } catch (const InvalidArgument& error) {
    return {Status::invalid_argument, error.what()};
  } catch (const TimeoutError& error) {
    return {Status::timeout, error.what()};
  } catch (const std::exception& error) {
    return {Status::error, error.what()};
  } catch (...) {
    return {Status::error, "unknown exception"};
  }
}

/// One thread that waits for works in the order they were handed to it and then calls their
/// callbacks (`PendingWork::when_done`). Started at its first work.
class Completer {
 public:
  Completer() = default;
  ~Completer();
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;
  void add(Work work, std::function<void(const Outcome&)> callback);

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<Work, std::function<void(const Outcome&)>>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

/// Note [Host streams of the Python API]
/// ----------------------------------------
/// A host collective runs on the caller's thread when the stream it is issued on has nothing
/// pending and the communicator's worker is idle (Note [Small host collectives inline]);
/// otherwise it goes to the worker, and the stream gets a task that waits for it. With one
/// worker stream for everything, a single collective sent to the worker left the stream with a
/// pending task until that stream's thread next ran, so the next collective went to the worker
/// too, and so on: under load (4 ranks on 2 busy cores) every dist.all_reduce of 1 KiB then
/// paid the thread hand-offs, 0.3 to 1.9 ms instead of 15 us, from whichever call first went
/// to the worker on. So calls that may block are issued on a caller-run stream, which never has
/// anything pending (its wait tasks run at once on the caller): those that are not asynchronous,
/// and small ones, whose time is less than the hand-offs an asynchronous one costs (the
/// communicator's worker, a stream's worker, the completion thread: three thread switches per
/// rank, each up to a scheduler slice under load). Only asynchronous ones over `kBlockingBytes`
/// use a worker stream, return at once, and overlap the caller's work (DDP's backward).
struct HostStreams {
  static constexpr std::size_t kBlockingBytes = std::size_t{1} << 20;

  /// The stream for a collective of `bytes` (input or output, the larger).
  const Stream& choose(std::size_t bytes, bool async_op);

  Stream caller = Stream::create(Device::host(), HostExecution::caller);
  std::optional<Stream> worker;  // made at the first large asynchronous collective
};

class WorldGroup final : public Group {
 public:
  /// Joins the host world now (collective over the group's ranks), through `options.store`.
  explicit WorldGroup(WorldOptions options);
  ~WorldGroup() override;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string describe() const override;
  Outcome issue(Op op, const Buffer& input, const Buffer& output, Reduce reduce, int root,
                void* cuda_stream, bool async_op, std::shared_ptr<PendingWork>* work) override;
  void abort(const std::string& reason) override;

 private:
  World& cuda_world(int device);

  WorldOptions options_;
  World host_;
  std::mutex issue_mutex_;  // torch may issue from several threads; a communicator takes one
  HostStreams host_streams_;
  std::mutex cuda_mutex_;
  std::optional<World> cuda_;
  std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();
};

}  // namespace cohort::python
