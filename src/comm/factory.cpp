#include "comm/factory.hpp"

#include "comm/gloo/communicator.hpp"
#include "comm/hierarchical/communicator.hpp"
#include "comm/shm/communicator.hpp"
#if COHORT_WITH_CUDA
#include "comm/nccl/communicator.hpp"
#endif

#include <cohort/core/error.hpp>

namespace cohort::detail {
namespace {

std::unique_ptr<Communicator> make_host_communicator(std::shared_ptr<CommContext> context,
                                                     std::shared_ptr<const HostContext> host) {
  switch (context->backend) {
    case Backend::shm:
      return std::make_unique<ShmCommunicator>(std::move(context), std::move(host));
    case Backend::gloo:
      return std::make_unique<GlooCommunicator>(std::move(context), std::move(host));
    case Backend::hierarchical:
      return std::make_unique<HierarchicalCommunicator>(std::move(context), std::move(host));
    case Backend::nccl:
      break;
  }
  COHORT_FAIL(InvalidArgument, context->describe() + ": " +
                                   std::string(to_string(context->backend)) +
                                   " is not a host backend");
}

}  // namespace

std::unique_ptr<Communicator> make_communicator(std::shared_ptr<CommContext> context,
                                                HostContext host) {
  if (context->backend == Backend::nccl) {
#if COHORT_WITH_CUDA
    return std::make_unique<NcclCommunicator>(std::move(context));
#else
    COHORT_FAIL(InvalidArgument, context->describe() +
                                     ": the NCCL backend was decided, but cohort was built "
                                     "without CUDA");
#endif
  }
  host.make = &make_host_communicator;
  return make_host_communicator(std::move(context),
                                std::make_shared<const HostContext>(std::move(host)));
}

}  // namespace cohort::detail
