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

class WorldGroup final : public Group {
 public:
  /// Joins the host world now (collective over the group's ranks), through `options.store`.
  explicit WorldGroup(WorldOptions options);
  ~WorldGroup() override;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string describe() const override;
  Outcome issue(Op op, const Buffer& input, const Buffer& output, Reduce reduce, int root,
                void* cuda_stream, std::shared_ptr<PendingWork>* work) override;
  void abort(const std::string& reason) override;

 private:
  World& cuda_world(int device);

  WorldOptions options_;
  World host_;
  Stream host_stream_;
  std::mutex cuda_mutex_;
  std::optional<World> cuda_;
  std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();
};

}  // namespace cohort::python
