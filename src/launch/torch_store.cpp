#include <cohort/launch/torch_store.hpp>

#include "store_detail.hpp"
#include "tcp_protocol.hpp"

#include <cohort/core/backoff.hpp>
#include <cohort/core/env.hpp>
#include <cohort/core/error.hpp>

#include <cstring>
#include <mutex>

namespace cohort {

// Note [PyTorch TCPStore protocol]
// --------------------------------
// The facts this client relies on, read from PyTorch's sources (torch/csrc/distributed/c10d/
// TCPStore.cpp and its backends) and checked against torch 2.15's server, libuv and classic:
// - no framing: a request is a one-byte command and its arguments, a reply is bare. Integers are
//   in host byte order (little-endian), a string or blob is a u64 length and the bytes, a key
//   list a u64 count and the strings.
// - a connection starts with VALIDATE (0) and the u32 magic 0x3C85F7CE; no reply. Nothing newer
//   than torch 2.4's commands (0 to 12) is sent: a server closes the connection on a command it
//   does not know.
// - SET (1) key, blob: no reply. COMPARE_SET (2) key, expected, desired: the value afterwards,
//   except that for an absent key and a non-empty `expected` it echoes `expected` and stores
//   nothing. GET (3) key: the blob (of a key that exists: we WAIT first, as torch's client does,
//   since a missing key closes the connection on the classic server). ADD (4) key, i64: the new
//   i64; stored as decimal text. CHECK (5) keys: u8 0 when all exist, 1 otherwise. WAIT (6)
//   keys: u8 0 once all exist. DELETE_KEY (8) key: i64 0 or 1. CANCEL_WAIT (12): u8 1; a WAIT's
//   0 may come before it when the keys arrived meanwhile.
// - the server has no deadlines: a WAIT that times out here is cancelled with CANCEL_WAIT and
//   its reply drained, so the connection stays usable.
// - the libuv server (torch's default) resets a connection that sends a key above 8 KiB or a
//   blob above 8 MiB; such calls are refused here with InvalidArgument instead. ADD on a value
//   that is not an integer also ends the connection there: add() checks the value first.
// - the first reply on a new connection sometimes comes about 5 s late, on both of PyTorch's
//   servers (measured with torch 2.15 and raw Python sockets: 1 to 2 connections in 100, 5.01 to
//   5.25 s; never a later request on the same connection; none when 20 ms pass between connect
//   and request). So a connection starts with a CHECK of no keys, whose reply it waits for up to
//   kFirstReplyGrace, and only then serves calls, whose deadlines then hold. A later reply was
//   seen 5 s late once too (a COMPARE_SET of 8 connections at once, the client built with
//   AddressSanitizer), so a call waits kReplyGrace, three times that, before calling the server
//   dead; a server that is gone closes the connection and is seen at once.
namespace {

namespace tcp = detail::tcp;
using detail::Clock;

constexpr std::uint8_t kValidate = 0;
constexpr std::uint8_t kSet = 1;
constexpr std::uint8_t kCompareSet = 2;
constexpr std::uint8_t kGet = 3;
constexpr std::uint8_t kAdd = 4;
constexpr std::uint8_t kCheck = 5;
constexpr std::uint8_t kWait = 6;
constexpr std::uint8_t kDeleteKey = 8;
constexpr std::uint8_t kCancelWait = 12;
constexpr std::uint32_t kMagic = 0x3C85F7CE;
constexpr std::uint8_t kStopWaiting = 0;
constexpr std::uint8_t kWaitCanceled = 1;
constexpr std::size_t kMaxKeyBytes = 8 * 1024;
constexpr std::size_t kMaxValueBytes = 8 * 1024 * 1024;
/// How long past its deadline a call waits for the server's reply before calling it dead (Note
/// [PyTorch TCPStore protocol]: PyTorch's servers sometimes answer 5 s late).
constexpr Milliseconds kReplyGrace = std::chrono::seconds(15);
/// How long a new connection waits for its first reply (Note [PyTorch TCPStore protocol]).
constexpr Milliseconds kFirstReplyGrace = std::chrono::seconds(30);

class Request {
 public:
  Request(std::uint8_t command, const char* name) : name_(name) {
    bytes_.push_back(static_cast<char>(command));
  }
  template <typename Integer>
  Request& integer(Integer value) {
    char raw[sizeof(Integer)];
    std::memcpy(raw, &value, sizeof(Integer));  // host order, as PyTorch sends it
    bytes_.append(raw, sizeof(Integer));
    return *this;
  }
  Request& text(std::string_view value) {
    integer(static_cast<std::uint64_t>(value.size()));
    bytes_.append(value);
    return *this;
  }
  Request& keys(const std::vector<std::string>& keys) {
    integer(static_cast<std::uint64_t>(keys.size()));
    for (const std::string& key : keys) text(key);
    return *this;
  }
  const std::string& bytes() const noexcept { return bytes_; }
  /// The command's name in PyTorch's sources, for messages.
  const char* name() const noexcept { return name_; }

 private:
  const char* name_;
  std::string bytes_;
};

void check_key_size(std::string_view key) {
  detail::check_key(key);
  COHORT_EXPECTS(key.size() <= kMaxKeyBytes,
                 "a key of " + std::to_string(key.size()) +
                     " bytes is above the 8 KiB that PyTorch's TCPStore accepts");
}

void check_value_size(std::string_view value) {
  COHORT_EXPECTS(value.size() <= kMaxValueBytes,
                 "a value of " + std::to_string(value.size()) +
                     " bytes is above the 8 MiB that PyTorch's TCPStore accepts");
}

}  // namespace

struct TorchStore::Impl {
  std::string host;
  int port = 0;
  std::string description;
  std::mutex mutex;
  detail::UniqueFd socket;
  std::string broken;        // why the connection is unusable; empty while it works
  const char* pending = "";  // the command whose reply is awaited, for messages

  void connect(Milliseconds timeout);
  /// Marks the connection broken and throws, naming `what` went wrong.
  [[noreturn]] void fail(const std::string& what) {
    broken = what;
    socket.reset();
    COHORT_FAIL(Error, description + ": " + what);
  }
  void expect_usable() const {
    COHORT_CHECK(broken.empty(), Error,
                 description + ": the connection is unusable after an earlier error (" + broken +
                     "); create a new TorchStore");
  }
  void send(const Request& request, Clock::time_point deadline) {
    pending = request.name();
    if (auto error = tcp::send_all(socket.get(), request.bytes(), deadline,
                                   "the server took no " + std::string(pending) + " request for " +
                                       env::describe_duration(kReplyGrace));
        !error.empty()) {
      fail(error);
    }
  }
  /// Reads `size` bytes; false at `deadline` when `may_time_out`, else that is a failure.
  bool receive(char* out, std::size_t size, Clock::time_point deadline, bool may_time_out) {
    const std::string too_slow = "no reply to " + std::string(pending) + " from the server in time";
    const std::string error = tcp::receive_exact(socket.get(), out, size, deadline, too_slow);
    if (error.empty()) return true;
    if (may_time_out && error == too_slow) return false;
    fail(error + " (after " + pending + ")");
  }
  template <typename Integer>
  Integer receive_integer(Clock::time_point deadline) {
    char raw[sizeof(Integer)];
    receive(raw, sizeof(raw), deadline, false);
    Integer value;
    std::memcpy(&value, raw, sizeof(Integer));
    return value;
  }
  std::string receive_blob(Clock::time_point deadline) {
    const auto size = receive_integer<std::uint64_t>(deadline);
    if (size > kMaxValueBytes) fail("a reply of " + std::to_string(size) + " bytes");
    std::string value(static_cast<std::size_t>(size), '\0');
    receive(value.data(), value.size(), deadline, false);
    return value;
  }
  /// Sends `request` and returns a deadline for its reply.
  Clock::time_point start(const Request& request) {
    expect_usable();
    const auto deadline = detail::deadline_after(kReplyGrace);
    send(request, deadline);
    return deadline;
  }
  /// WAIT for `keys` until `timeout`; false when it passed (the wait is cancelled).
  bool wait(const std::vector<std::string>& keys, Milliseconds timeout);
};

void TorchStore::Impl::connect(Milliseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  Backoff backoff(std::chrono::milliseconds(10), std::chrono::milliseconds(500));
  std::string error;
  for (;;) {
    bool permanent = false;
    socket = tcp::try_connect(host, port, deadline, error, &permanent);
    COHORT_CHECK(!permanent, Error, error + "; check MASTER_ADDR");
    if (socket.valid()) break;
    COHORT_CHECK(Clock::now() < deadline, TimeoutError,
                 "could not connect to torchrun's store at " + tcp::format_address(host, port) +
                     " within " + std::to_string(timeout.count()) + " ms (last error: " + error +
                     "); check that torchrun is running and MASTER_ADDR and MASTER_PORT");
    backoff.sleep(deadline);
  }
  // The first reply on a new connection may come late: see the Note. Take it here, on a request
  // that changes nothing (CHECK of no keys), so that no caller's deadline pays for it.
  send(Request(kValidate, "VALIDATE").integer(kMagic), deadline);
  send(Request(kCheck, "CHECK").keys({}), deadline);
  receive_integer<std::uint8_t>(detail::deadline_after(kFirstReplyGrace));
}

bool TorchStore::Impl::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  expect_usable();
  const auto deadline = detail::deadline_after(timeout);
  send(Request(kWait, "WAIT").keys(keys), detail::deadline_after(kReplyGrace));
  char answer = 0;
  if (receive(&answer, 1, deadline, true)) {
    if (static_cast<std::uint8_t>(answer) != kStopWaiting) fail("an unexpected reply to WAIT");
    return true;
  }
  // The server waits forever: cancel, then drain. A STOP_WAITING that crossed the cancel comes
  // first, and means that the keys arrived after all.
  const auto grace = detail::deadline_after(kReplyGrace);
  send(Request(kCancelWait, "CANCEL_WAIT"), grace);
  bool arrived = false;
  for (;;) {
    receive(&answer, 1, grace, false);
    if (static_cast<std::uint8_t>(answer) == kWaitCanceled) return arrived;
    if (static_cast<std::uint8_t>(answer) != kStopWaiting) fail("an unexpected reply to CANCEL");
    arrived = true;
  }
}

TorchStore::TorchStore(std::string host, int port, Milliseconds timeout)
    : Store(timeout), impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->description = "TorchStore(" + tcp::format_address(impl_->host, port) + ")";
  impl_->connect(timeout);
}

TorchStore::~TorchStore() = default;

void TorchStore::set(std::string_view key, std::string_view value) {
  check_key_size(key);
  check_value_size(value);
  const std::lock_guard lock(impl_->mutex);
  impl_->start(Request(kSet, "SET").text(key).text(value));
}

std::string TorchStore::get(std::string_view key, Milliseconds timeout) {
  check_key_size(key);
  wait({std::string(key)}, timeout);
  const std::lock_guard lock(impl_->mutex);
  return impl_->receive_blob(impl_->start(Request(kGet, "GET").text(key)));
}

void TorchStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  for (const std::string& key : keys) check_key_size(key);
  if (keys.empty()) return;
  {
    const std::lock_guard lock(impl_->mutex);
    if (impl_->wait(keys, timeout)) return;
  }
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!check({key})) missing.push_back(key);
  }
  COHORT_FAIL(TimeoutError, detail::timeout_message(describe(), missing, timeout));
}

bool TorchStore::check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) check_key_size(key);
  const std::lock_guard lock(impl_->mutex);
  const auto deadline = impl_->start(Request(kCheck, "CHECK").keys(keys));
  return impl_->receive_integer<std::uint8_t>(deadline) == 0;
}

std::int64_t TorchStore::add(std::string_view key, std::int64_t delta) {
  check_key_size(key);
  // PyTorch's server drops the connection when the value is not an integer (its std::stoll
  // throws) and wraps on overflow: check first, as every cohort store fails alike (apply_add).
  // Another client could change the value in between; then the server's behaviour is what
  // remains, which cohort's own keys never meet (they only ever add to counters).
  if (check({std::string(key)})) {
    const std::string current = get(key, timeout());
    std::string error;
    COHORT_CHECK(detail::apply_add(key, &current, delta, error).has_value(), InvalidArgument,
                 error + " in " + describe());
  }
  const std::lock_guard lock(impl_->mutex);
  const auto deadline = impl_->start(Request(kAdd, "ADD").text(key).integer(delta));
  return impl_->receive_integer<std::int64_t>(deadline);
}

std::string TorchStore::compare_set(std::string_view key, std::string_view expected,
                                    std::string_view desired) {
  check_key_size(key);
  check_value_size(expected);
  check_value_size(desired);
  std::string after;
  {
    const std::lock_guard lock(impl_->mutex);
    after = impl_->receive_blob(
        impl_->start(Request(kCompareSet, "COMPARE_SET").text(key).text(expected).text(desired)));
  }
  // PyTorch echoes a non-empty `expected` for an absent key; this interface says "" then.
  if (!expected.empty() && after == expected && expected != desired && !check({std::string(key)})) {
    return {};
  }
  return after;
}

bool TorchStore::remove(std::string_view key) {
  check_key_size(key);
  const std::lock_guard lock(impl_->mutex);
  const auto deadline = impl_->start(Request(kDeleteKey, "DELETE_KEY").text(key));
  return impl_->receive_integer<std::int64_t>(deadline) != 0;
}

std::unique_ptr<Store> TorchStore::clone() const {
  return std::make_unique<TorchStore>(impl_->host, impl_->port, timeout());
}

std::string TorchStore::describe() const {
  return impl_->description;
}

}  // namespace cohort
