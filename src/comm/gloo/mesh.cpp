#include "comm/gloo/mesh.hpp"

#include <cohort/core/error.hpp>

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <typeinfo>
#include <vector>

namespace cohort::detail {
namespace {

// Note [Connecting a Gloo mesh]
// Gloo's own full-mesh rendezvous leaves two things to chance, and both made a split hang:
// - The two sides of a pair see the connection at different times: the listening side is done
//   as soon as it accepts, the connecting side only when its event loop reports the connection.
//   A member that destroys the communicator at once (one whose only use of a split is to leave
//   it, or one that fails) closes a connection its peer is still completing; the peer fails in
//   its connect ("Connection closed by peer") and the peers still waiting for it wait in vain.
//   So creation ends with a handshake through the store (a barrier of the communicator's
//   StoreGroup): each member says it has connected all of its pairs and waits until every member
//   has, so no member tears a mesh down while another still connects to it.
// - Gloo waits five times the pair timeout for a connection, and nothing short of closing the
//   pair ends that wait. The pairs get a fifth of the deadline, so one wait ends by the deadline;
//   the connect is registered with the watchdog and closes its pairs when aborted (a failure on
//   another rank); between pairs the deadline and aborts are checked. The store exchanges are the
//   StoreGroup's, which CommContext makes end on an abort, and whose timeout names the members
//   that were not there.

/// A Gloo context whose pairs are connected by `connect_gloo_mesh`.
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int member, int members) : gloo::Context(member, members) {}
  gloo::transport::Context* transport() const { return transportContext_.get(); }
  void adopt(std::shared_ptr<gloo::transport::Device> device,
             std::shared_ptr<gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

using Clock = std::chrono::steady_clock;

// Note [Failing Gloo's pairs]
// What Gloo does when one of its waits times out is to fail every pair of the context
// (tcp::Context::signalException): each pair, under its lock, wakes every operation pending on it
// with the error, moves to closed and reads into no buffer again. That is the abort Gloo lacks
// (Note [Aborting Gloo]). The function is exported by libgloo but protected, and its header cannot
// be included here: Debian's libgloo-dev ships gloo/transport/tcp/context.h without the
// gloo/common/memory.h it includes. So it is called by its symbol (a non-virtual member taking a
// string: `this`, then the string's address, in the Itanium C++ ABI), only on a transport context
// whose dynamic type is tcp::Context; a link against a Gloo without it fails at build time, not at
// an abort.
constexpr const char* kTcpContextType = "N4gloo9transport3tcp7ContextE";

}  // namespace
}  // namespace cohort::detail

/// gloo::transport::tcp::Context::signalException(const std::string&) (Note [Failing Gloo's
/// pairs]).
extern "C" void gloo_tcp_context_fail_pairs(void* context, const std::string& why) __asm__(
    "_ZN4gloo9transport3tcp7Context15signalExceptionERKNSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEE");

namespace cohort::detail {
namespace {

class Connecting {
 public:
  explicit Connecting(CommContext& context)
      : context_(context), deadline_(Clock::now() + context.timeout()) {}

  /// Throws if the communicator was aborted or the deadline passed; `waiting_for` says for what.
  void check(const std::string& waiting_for) const {
    COHORT_CHECK(!context_.aborted(), Error,
                 who() + ": connecting " + context_.describe() + " was aborted while waiting for " +
                     waiting_for + ": " + context_.abort_reason());
    COHORT_CHECK(Clock::now() < deadline_, TimeoutError,
                 who() + ": connecting " + context_.describe() + " timed out after " +
                     std::to_string(context_.timeout().count()) + " ms waiting for " + waiting_for +
                     ". Check that every member reached the same point and can reach this host.");
  }

  std::string who() const {
    return "rank " + std::to_string(context_.global_rank(context_.rank()));
  }

 private:
  CommContext& context_;
  Clock::time_point deadline_;
};

}  // namespace

void fail_gloo_operations(gloo::Context& gloo, const std::string& why) noexcept {
  try {
    auto* mesh = dynamic_cast<MeshContext*>(&gloo);
    gloo::transport::Context* transport = mesh != nullptr ? mesh->transport() : nullptr;
    if (transport != nullptr && std::strcmp(typeid(*transport).name(), kTcpContextType) == 0) {
      gloo_tcp_context_fail_pairs(dynamic_cast<void*>(transport), why);
      return;
    }
    gloo.closeConnections();  // another transport: no data after this; waits end at its timeout
  } catch (const std::exception&) {
    // Failing the pairs allocates Gloo's error; without memory for it, closing them must do.
    gloo.closeConnections();
  }
}

std::shared_ptr<gloo::Context> connect_gloo_mesh(
    CommContext& context, const std::shared_ptr<gloo::transport::Device>& device,
    std::chrono::milliseconds operation_timeout) {
  const Connecting connecting(context);
  auto mesh = std::make_shared<MeshContext>(context.rank(), context.size());
  mesh->setTimeout(operation_timeout);
  std::shared_ptr<gloo::transport::Context> transport =
      device->createContext(context.rank(), context.size());
  transport->setTimeout(std::max(std::chrono::milliseconds(1), context.timeout() / 5));
  context.set_backend_abort([transport, size = context.size(), rank = context.rank()] {
    for (int peer = 0; peer < size; ++peer) {
      if (peer != rank) {
        transport->getPair(peer)->close();
      }
    }
  });

  // Every member publishes the addresses of its pairs, in member order, itself left out.
  std::string addresses;
  std::size_t entry = 0;
  for (int peer = 0; peer < context.size(); ++peer) {
    if (peer != context.rank()) {
      const std::vector<char> bytes = transport->createPair(peer)->address().bytes();
      entry = bytes.size();
      addresses.append(bytes.data(), bytes.size());
    }
  }
  const std::vector<std::string> published = context.group.all_gather("gloo/address", addresses);

  for (int peer = 0; peer < context.size(); ++peer) {
    if (peer == context.rank()) {
      continue;
    }
    const std::string member = "rank " + std::to_string(context.global_rank(peer));
    const std::string& theirs = published[static_cast<std::size_t>(peer)];
    COHORT_CHECK(theirs.size() == entry * static_cast<std::size_t>(context.size() - 1), Error,
                 connecting.who() + ": " + member + " published " + std::to_string(theirs.size()) +
                     " bytes of Gloo addresses for " + context.describe() + ", expected " +
                     std::to_string(entry * static_cast<std::size_t>(context.size() - 1)) +
                     ": are all ranks running the same build of cohort and Gloo?");
    const std::size_t index =
        static_cast<std::size_t>(context.rank() < peer ? context.rank() : context.rank() - 1);
    const std::vector<char> bytes(
        theirs.begin() + static_cast<std::ptrdiff_t>(index * entry),
        theirs.begin() + static_cast<std::ptrdiff_t>((index + 1) * entry));
    connecting.check("the connection to " + member);
    try {
      transport->getPair(peer)->connect(bytes);
    } catch (const std::exception& error) {
      connecting.check("the connection to " + member);  // an abort explains the error best
      COHORT_FAIL(Error, connecting.who() + ": connecting " + context.describe() + " to " + member +
                             " failed: " + error.what());
    }
  }
  connecting.check("the connections");  // an abort closes pairs, which then look connected

  context.group.barrier("gloo/connected");  // the handshake: see the Note
  mesh->adopt(device, std::move(transport));
  return mesh;
}

}  // namespace cohort::detail
