#pragma once

// The TCP store's wire format and the socket plumbing its client and server share.
// See Note [TCP store protocol] in tcp_protocol.cpp.

#include "store_detail.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::detail::tcp {

inline constexpr std::uint64_t kProtocolVersion = 1;
inline constexpr std::size_t kLengthBytes = 4;
/// The largest payload a server reads before HELLO: opcode, version, the token's length and the
/// token. Keeps what an unauthenticated connection can make the server hold to a few KiB
/// (Note [TCP store admission] in tcp_server_loop.cpp).
inline constexpr std::size_t kMaxHelloPayloadBytes = 4096;
/// The longest token a HELLO can carry within kMaxHelloPayloadBytes.
inline constexpr std::size_t kMaxTokenBytes = kMaxHelloPayloadBytes - 1 - 8 - 4;

enum class Opcode : std::uint8_t {
  hello = 1,
  set = 2,
  get = 3,
  wait = 4,
  check = 5,
  add = 6,
  compare_set = 7,
  remove = 8,
};

enum class Status : std::uint8_t {
  ok = 0,
  timeout = 1,           ///< + key list: the keys still missing
  invalid_argument = 2,  ///< + message (e.g. add on a value that is not an integer)
  error = 3,             ///< + message
  refused = 4,           ///< + message; the server closes the connection after it
};

/// A message that does not follow the protocol.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Builds one message: the length prefix, then the fields appended in order.
class MessageWriter {
 public:
  MessageWriter() : buffer_(kLengthBytes, '\0') {}
  MessageWriter& u8(std::uint8_t value);
  MessageWriter& u32(std::uint32_t value);
  MessageWriter& u64(std::uint64_t value);
  MessageWriter& i64(std::int64_t value) { return u64(static_cast<std::uint64_t>(value)); }
  MessageWriter& bytes(std::string_view value);
  MessageWriter& key_list(const std::vector<std::string>& keys);
  /// The finished message, length prefix filled in.
  std::string finish() &&;

 private:
  std::string buffer_;
};

/// Reads the fields of one payload (the bytes after the length prefix).
/// Every read throws DecodeError when the field runs past the end.
class MessageReader {
 public:
  explicit MessageReader(std::string_view payload) noexcept : rest_(payload) {}
  std::uint8_t u8();
  std::uint32_t u32();
  std::uint64_t u64();
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  std::string_view bytes();
  std::vector<std::string> key_list();
  /// @throws DecodeError when bytes are left over.
  void expect_end() const;

 private:
  std::string_view take(std::size_t count);
  std::string_view rest_;
};

/// The payload length in a 4-byte little-endian prefix.
std::uint32_t decode_length(std::string_view prefix) noexcept;

/// A request, decoded. Which fields matter depends on the opcode.
struct Request {
  Opcode opcode = Opcode::hello;
  std::uint64_t version = 0;      ///< hello
  std::string token;              ///< hello
  std::vector<std::string> keys;  ///< one for set/get/add/compare_set/remove; any for wait/check
  std::string value;              ///< set: the value; compare_set: the desired value
  std::string expected;           ///< compare_set
  std::int64_t delta = 0;         ///< add
  std::uint64_t timeout_ms = 0;   ///< get, wait
};

std::string encode_request(const Request& request);

/// @throws DecodeError on an unknown opcode, a field past the end or trailing bytes.
Request decode_request(std::string_view payload);

/// Where the first frame of a byte stream stands.
struct FrameScan {
  enum class State { incomplete, complete, too_long } state = State::incomplete;
  std::uint32_t length = 0;  ///< the payload length, once the prefix has arrived
};

/// Looks at the start of `input`: a whole frame (prefix and payload) is `complete`; a prefix
/// announcing more than `max_payload` bytes is `too_long` (the receiver closes the connection);
/// else more bytes are needed.
FrameScan scan_frame(std::string_view input, std::size_t max_payload) noexcept;

/// A reply, decoded. Which fields matter depends on the status and the request's opcode.
struct Reply {
  Status status = Status::ok;
  std::string value;              ///< ok to GET or CAS
  std::int64_t number = 0;        ///< ok to ADD
  bool flag = false;              ///< ok to CHECK (all present) or DELETE (existed)
  std::vector<std::string> keys;  ///< timeout: the keys still missing
  std::string message;            ///< invalid_argument, error, refused
};

/// Decodes the reply to a request with `opcode`.
/// @throws DecodeError on an unknown status, a field past the end or trailing bytes.
Reply decode_reply(Opcode opcode, std::string_view payload);

/// "host:port", with brackets around an IPv6 host.
std::string format_address(std::string_view host, int port);

/// The address of a connected or bound socket, "host:port".
std::string socket_address(int fd, bool peer);

/// A non-blocking, close-on-exec TCP socket connected to `host:port` with TCP_NODELAY set,
/// trying each address getaddrinfo gives. Returns an invalid fd and sets `error` on failure;
/// sets `*permanent` when retrying cannot help (the host name does not resolve).
UniqueFd try_connect(const std::string& host, int port, Clock::time_point deadline,
                     std::string& error, bool* permanent = nullptr);

/// A non-blocking listening socket bound to `host:port` with SO_REUSEADDR.
/// @throws Error naming the address and the system's reason.
UniqueFd listen_on(const std::string& host, int port);

/// Waits until `fd` has `events` (poll flags) or `deadline` passes; false on timeout.
/// Returns true on error conditions too, so the next read or write reports them.
bool wait_for(int fd, short events, Clock::time_point deadline);

/// Sends all of `bytes` on the non-blocking socket `fd`. Returns an empty string, or what went
/// wrong ("connection closed by the server", the system's reason, `too_slow` past `deadline`).
std::string send_all(int fd, std::string_view bytes, Clock::time_point deadline,
                     const std::string& too_slow);
/// Receives exactly `size` bytes into `out`; returns as `send_all`.
std::string receive_exact(int fd, char* out, std::size_t size, Clock::time_point deadline,
                          const std::string& too_slow);

/// Milliseconds from now to `deadline` for poll(): rounded up, clamped to [0, INT_MAX]; -1 for
/// a deadline at the clock's maximum.
int poll_timeout_ms(Clock::time_point deadline) noexcept;

}  // namespace cohort::detail::tcp
