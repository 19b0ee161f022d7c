#include "comm/hierarchical/communicator.hpp"

#include "comm/host/select.hpp"
#include "comm/shm/reduce.hpp"
#include "comm/watchdog.hpp"

#include <cohort/core/error.hpp>

#include <cstring>
#include <vector>

namespace cohort::detail {

struct HierarchicalCommunicator::Parts {
  std::unique_ptr<Communicator> flat;    // every member, over Gloo
  std::unique_ptr<Communicator> node;    // the members on this host, over shared memory
  std::unique_ptr<Communicator> across;  // one member per host, same index, over Gloo
  Stream stream = Stream::create(Device::host());
  std::vector<std::byte> scratch;

  void execute(const Call& call, int size, int rank);
};

namespace {

/// The same members under another store scope, for a communicator built inside this one.
std::shared_ptr<CommContext> same_members(const CommContext& context, const std::string& suffix) {
  SplitPlan plan;
  plan.member = true;
  plan.rank = context.rank();
  for (int r = 0; r < context.size(); ++r) {
    plan.parent_ranks.push_back(r);
    plan.global_ranks.push_back(context.global_rank(r));
  }
  plan.id = context.id + "." + suffix;
  return make_child_context(context, plan, context.name + "." + suffix);
}

template <typename T>
void divide(T* data, std::size_t count, int divisor) {
  using A = Accumulator<T>;
  for (std::size_t i = 0; i < count; ++i) {
    data[i] = static_cast<T>(static_cast<A>(data[i]) / static_cast<A>(divisor));
  }
}

}  // namespace

void HierarchicalCommunicator::Parts::execute(const Call& call, int size, int rank) {
  if (call.op != CollectiveOp::all_reduce && call.op != CollectiveOp::reduce_scatter) {
    switch (call.op) {
      case CollectiveOp::all_gather:
        flat->all_gather(call.input, call.output, stream).wait();
        return;
      case CollectiveOp::broadcast:
        flat->broadcast(call.output, call.root, stream).wait();
        return;
      case CollectiveOp::barrier:
        flat->barrier(stream).wait();
        return;
      case CollectiveOp::all_reduce:
      case CollectiveOp::reduce_scatter:
        break;
    }
  }
  // Note [Hierarchical reduce-scatter]
  // A reduce-scatter runs the all-reduce below on its whole input and keeps this rank's block:
  // every element is then summed exactly as the all-reduce sums it (within the host in rank
  // order, then across hosts), whatever buffer it sits in, so the sharded modes of DataParallel,
  // which reduce-scatter what plain data parallel all-reduces, end bitwise equal to it on two
  // hosts (Gloo's sum of two is exact in either order). Its cross-host traffic is the
  // all-reduce's, less than the flat Gloo all-reduce of the whole input it replaces.
  const std::size_t count = call.input.count();
  if (call.output.count() == 0) {
    return;
  }
  const auto local = static_cast<std::size_t>(node->size());
  const std::size_t shard = (count + local - 1) / local;
  const std::size_t element = size_of(call.output.dtype());
  scratch.resize((local + 1) * shard * element);
  const TensorView padded(scratch.data(), local * shard, call.output.dtype(), Device::host());
  const TensorView mine = TensorView(scratch.data() + local * shard * element, shard,
                                     call.output.dtype(), Device::host());
  std::memcpy(scratch.data(), call.input.data(), call.input.bytes());
  std::memset(scratch.data() + call.input.bytes(), 0, (local * shard - count) * element);
  const ReduceOp op = call.reduce == ReduceOp::avg ? ReduceOp::sum : call.reduce;
  node->reduce_scatter(padded, mine, op, stream).wait();
  across->all_reduce(mine, op, stream).wait();
  node->all_gather(mine, padded, stream).wait();
  const std::size_t first = call.op == CollectiveOp::reduce_scatter
                                ? static_cast<std::size_t>(rank) * call.output.count()
                                : 0;
  std::memcpy(call.output.data(), scratch.data() + first * element, call.output.bytes());
  if (call.reduce == ReduceOp::avg) {
    visit_dtype(call.output.dtype(), [&](auto tag) {
      using T = decltype(tag);
      divide(static_cast<T*>(call.output.data()), call.output.count(), size);
    });
  }
}

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<CommContext> context,
                                                   std::shared_ptr<const HostContext> host)
    : Communicator(std::move(context)), host_(std::move(host)), parts_(std::make_shared<Parts>()) {
  CommContext& ctx = this->context();
  expect_backend(ctx, Backend::hierarchical);  // Note [The backend, decided once]
  const std::vector<int>& nodes = ctx.placement.member_nodes;
  const int node = nodes.at(static_cast<std::size_t>(ctx.rank()));
  int index = 0;  // among the members on this host
  for (int r = 0; r < ctx.rank(); ++r) {
    index += nodes[static_cast<std::size_t>(r)] == node ? 1 : 0;
  }
  // The flat part is Gloo, whatever the placement, and so is what it splits.
  auto flat_host = std::make_shared<HostContext>(*host_);
  flat_host->transport = HostTransport::gloo;
  auto flat = same_members(ctx, "flat");
  flat->backend = Backend::gloo;
  parts_->flat = host_->make(std::move(flat), std::move(flat_host));
  // The in-host part wants shared memory, the across part Gloo: the placement says so.
  auto split = [&](int color, int key, const std::string& suffix) {
    const SplitPlan plan = plan_split(ctx, color, key);
    auto child = make_child_context(ctx, plan, ctx.name + "." + suffix);
    child->backend = select_host_backend(host_->transport, child->placement.member_nodes);
    return host_->make(std::move(child), host_);
  };
  parts_->node = split(node, index, "node");
  parts_->across = split(index, node, "across");
  ctx.backend_version = "shared memory within hosts, Gloo across";
  worker_ = HostWorker::start();
  ctx.set_backend_abort([parts = parts_] {
    parts->flat->abort("the hierarchical communicator containing it was aborted");
    parts->node->abort("the hierarchical communicator containing it was aborted");
    parts->across->abort("the hierarchical communicator containing it was aborted");
  });
  if (auto watchdog = ctx.watchdog.lock()) {
    watchdog->add(shared_context());
  }
  publish_progress(ctx);
}

HierarchicalCommunicator::~HierarchicalCommunicator() {
  worker_->stop(/*aborted=*/context().aborted());  // Note [Host worker teardown]
}

void* HierarchicalCommunicator::native_handle() const noexcept {
  return parts_->flat->native_handle();
}

void HierarchicalCommunicator::run(const Call& call, const Stream& stream,
                                   const std::shared_ptr<WorkState>& work) {
  run_on_worker(*worker_, stream, work, shared_context(),
                [call, parts = parts_, size = context().size(), rank = context().rank()] {
                  parts->execute(call, size, rank);
                });
}

std::unique_ptr<Communicator> HierarchicalCommunicator::do_split(int color, int key,
                                                                 std::string name) {
  return split_host_communicator(context(), host_, color, key, std::move(name));
}

}  // namespace cohort::detail
