#include "comm/shm/communicator.hpp"

#include "comm/host/select.hpp"
#include "comm/shm/collectives.hpp"
#include "comm/watchdog.hpp"

#include <algorithm>

namespace cohort::detail {

ShmCommunicator::ShmCommunicator(std::shared_ptr<CommContext> context,
                                 std::shared_ptr<const HostContext> host)
    : Communicator(std::move(context)), host_(std::move(host)) {
  CommContext& ctx = this->context();
  expect_backend(ctx, Backend::shm);  // Note [The backend, decided once]
  ctx.backend_version = "shared memory";
  ctx.group.barrier("shm/joined");
  engine_ = std::make_shared<ShmEngine>(ctx);
  worker_ = HostWorker::start();
  ctx.set_backend_abort([engine = engine_, rank = ctx.rank()] { engine->abort(rank); });
  if (auto watchdog = ctx.watchdog.lock()) {
    watchdog->add(shared_context());
  }
  publish_progress(ctx);
}

ShmCommunicator::~ShmCommunicator() {
  // An aborted collective ends at its next check (a few ms).
  worker_->stop(/*aborted=*/context().aborted());  // Note [Host worker teardown]
}

void* ShmCommunicator::native_handle() const noexcept {
  return engine_.get();
}

void ShmCommunicator::run(const Call& call, const Stream& stream,
                          const std::shared_ptr<WorkState>& work) {
  // Note [Small host collectives inline]
  constexpr std::size_t kInlineBytes = std::size_t{256} << 10;
  if (std::max(call.input.bytes(), call.output.bytes()) <= kInlineBytes &&
      try_run_inline(*worker_, stream, work, context(),
                     [&] { engine_->execute(call, work->deadline(), context()); })) {
    return;
  }
  run_on_worker(*worker_, stream, work, shared_context(),
                [call, work, engine = engine_, context = shared_context()] {
                  engine->execute(call, work->deadline(), *context);
                });
}

std::unique_ptr<Communicator> ShmCommunicator::do_split(int color, int key, std::string name) {
  return split_host_communicator(context(), host_, color, key, std::move(name));
}

}  // namespace cohort::detail
