#pragma once

// Connecting the members of a Gloo communicator to one another, within its deadline.

#include "comm/context.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace cohort::detail {

/// Ends every operation of `gloo` at once, on this member and (as its connections close) on the
/// others: Gloo's waits on its pairs fail with `why` instead of lasting until Gloo's timeout.
/// After it returns, Gloo's transport writes into no buffer of an operation (Note [Aborting
/// Gloo]). The communicator's abort; safe from any thread, more than once.
void fail_gloo_operations(gloo::Context& gloo, const std::string& why) noexcept;

/// Connects a pair between every two members of `context` over `device`, exchanging addresses
/// through the context's store, and returns once every member has connected all of its pairs
/// (see Note [Connecting a Gloo mesh]). Collective. `operation_timeout` is the Gloo context's
/// default for operations. Throws TimeoutError naming the members that were not connected by the
/// context's deadline, or Error when the context is aborted meanwhile or a connection fails.
std::shared_ptr<gloo::Context> connect_gloo_mesh(
    CommContext& context, const std::shared_ptr<gloo::transport::Device>& device,
    std::chrono::milliseconds operation_timeout);

}  // namespace cohort::detail
