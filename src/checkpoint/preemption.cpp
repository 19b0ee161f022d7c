#include <cohort/checkpoint/preemption.hpp>

#include <cohort/core/logging.hpp>
#include <cohort/memory/detail/state_resource.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/memory/pinned_host.hpp>

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace cohort {
namespace {

// The one piece of process-wide state here: a signal arrives for the process, not for a rank.
std::atomic<int> g_preemption_flag{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_preemption_signal(int /*signal*/) {
  g_preemption_flag.store(1, std::memory_order_relaxed);
}

}  // namespace

void install_preemption_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_handler = on_preemption_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(SIGTERM, &action, nullptr);
    ::sigaction(SIGUSR1, &action, nullptr);
    // The first SIGINT is a request to save, the second Ctrl-C's usual "stop now": SA_RESETHAND
    // puts the default action back as the first arrives (Note [Preemption signals]).
    struct sigaction previous {};
    ::sigaction(SIGINT, nullptr, &previous);
    if (previous.sa_handler != SIG_IGN) {
      action.sa_flags = static_cast<int>(SA_RESTART | SA_RESETHAND);
      ::sigaction(SIGINT, &action, nullptr);
    }
  });
}

bool preemption_requested() noexcept {
  return g_preemption_flag.load(std::memory_order_relaxed) != 0;
}
void request_preemption() noexcept {
  g_preemption_flag.store(1, std::memory_order_relaxed);
}
void clear_preemption() noexcept {
  g_preemption_flag.store(0, std::memory_order_relaxed);
}

PreemptionWatch::PreemptionWatch(World& world, Stream stream)
    : world_(world),
      stream_(std::move(stream)),
      flag_(detail::default_state_resource(world.device()), sizeof(std::int32_t),
            MemoryCategory::other) {
  if (!stream_.device().is_host()) {
    pinned_ = Buffer(make_pinned_host_resource(), 4 * sizeof(std::int32_t), MemoryCategory::other);
    answered_[0] = Event::create(stream_.device());
    answered_[1] = Event::create(stream_.device());
  }
  install_preemption_handlers();
}

PreemptionWatch::~PreemptionWatch() {
  // The last all-reduce may still write `flag_` and `pinned_`, which go with this object.
  for (auto& event : answered_) {
    if (!event) continue;
    try {
      event->synchronize();
    } catch (const std::exception& error) {
      COHORT_LOG(error) << "PreemptionWatch: waiting for its last all-reduce failed: "
                        << error.what();
    }
  }
}

bool PreemptionWatch::agreed() {
  std::int32_t flag = preemption_requested() ? 1 : 0;
  const TensorView view(flag_.data(), 1, DType::i32, world_.device());
  if (stream_.device().is_host()) {
    detail::write_now(flag_.data(), &flag, sizeof(flag), stream_);
    world_.comm().all_reduce(view, ReduceOp::max, stream_);
    detail::read_after(&flag, flag_.data(), sizeof(flag), stream_);
    return flag != 0;
  }
  // Note [Agreeing without waiting for the GPU]: this call's slot was last used two calls ago,
  // whose answer arrived before the previous call's, which is waited for here first.
  auto* words = static_cast<std::int32_t*>(pinned_.data());
  const std::size_t slot = calls_ % 2;
  const std::size_t previous = 1 - slot;
  bool answer = false;
  if (calls_ > 0) {
    answered_[previous]->synchronize();
    answer = words[2 + previous] != 0;
  }
  words[slot] = flag;
  detail::copy_to_device_async(flag_.data(), &words[slot], sizeof(std::int32_t), stream_);
  world_.comm().all_reduce(view, ReduceOp::max, stream_);
  detail::copy_to_host_async(&words[2 + slot], flag_.data(), sizeof(std::int32_t), stream_);
  answered_[slot]->record(stream_);
  ++calls_;
  return answer;
}

}  // namespace cohort
