#include "tcp_protocol.hpp"

#include <cohort/core/error.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <memory>

// Note [TCP store protocol]
// Every message, in either direction, is a frame: u32 N (little-endian), then N bytes of payload.
// A receiver closes the connection when N exceeds its max_message_bytes; it never allocates N
// bytes on the sender's word, only what actually arrives. Inside a payload, integers are
// little-endian, `bytes` is a u32 length and that many bytes, and a key list is a u32 count and
// that many `bytes`.
//
// Request payload: u8 opcode, then its fields.
//   HELLO   1  u64 protocol version, bytes token     (must be the first request)
//   SET     2  bytes key, bytes value
//   GET     3  bytes key, u64 timeout_ms
//   WAIT    4  key list, u64 timeout_ms
//   CHECK   5  key list
//   ADD     6  bytes key, i64 delta (two's complement in a u64)
//   CAS     7  bytes key, bytes expected, bytes desired
//   DELETE  8  bytes key
// Reply payload: u8 status, then its fields.
//   OK                0  HELLO, SET, WAIT: nothing; GET: bytes value; CHECK: u8 all present;
//                        ADD: i64 new value; CAS: bytes value afterwards; DELETE: u8 existed
//   TIMEOUT           1  key list: the keys still missing at the deadline (GET, WAIT)
//   INVALID_ARGUMENT  2  bytes message (an empty key, ADD on a value that is not an integer)
//   ERROR             3  bytes message
//   REFUSED           4  bytes message (HELLO with a wrong token or version); then the server
//                        closes the connection
//
// A client sends one request and reads its reply before it sends the next. The server answers
// GET and WAIT as soon as all their keys are set, or with TIMEOUT once timeout_ms has passed
// since it read the request; the client gives the server timeout_ms plus a grace before it
// declares the connection dead, so a dead server never hangs it. Anything the server cannot
// decode (an unknown opcode, a field running past the end, trailing bytes, a request before
// HELLO, a second HELLO) closes that one connection; the other clients never notice.

namespace cohort::detail::tcp {

MessageWriter& MessageWriter::u8(std::uint8_t value) {
  buffer_.push_back(static_cast<char>(value));
  return *this;
}

MessageWriter& MessageWriter::u32(std::uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) u8(static_cast<std::uint8_t>(value >> shift));
  return *this;
}

MessageWriter& MessageWriter::u64(std::uint64_t value) {
  for (int shift = 0; shift < 64; shift += 8) u8(static_cast<std::uint8_t>(value >> shift));
  return *this;
}

MessageWriter& MessageWriter::bytes(std::string_view value) {
  COHORT_EXPECTS(value.size() <= UINT32_MAX, "a TCP store field is limited to 4 GiB");
  u32(static_cast<std::uint32_t>(value.size()));
  buffer_.append(value);
  return *this;
}

MessageWriter& MessageWriter::key_list(const std::vector<std::string>& keys) {
  COHORT_EXPECTS(keys.size() <= UINT32_MAX, "too many keys for one TCP store request");
  u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) bytes(key);
  return *this;
}

std::string MessageWriter::finish() && {
  const std::size_t length = buffer_.size() - kLengthBytes;
  COHORT_EXPECTS(length <= UINT32_MAX, "a TCP store message is limited to 4 GiB");
  for (std::size_t i = 0; i < kLengthBytes; ++i) {
    buffer_[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  }
  return std::move(buffer_);
}

std::string_view MessageReader::take(std::size_t count) {
  if (count > rest_.size()) {
    throw DecodeError("a field of " + std::to_string(count) + " bytes runs past the end (" +
                      std::to_string(rest_.size()) + " left)");
  }
  const auto field = rest_.substr(0, count);
  rest_.remove_prefix(count);
  return field;
}

std::uint8_t MessageReader::u8() {
  return static_cast<std::uint8_t>(take(1)[0]);
}

std::uint32_t MessageReader::u32() {
  return decode_length(take(4));
}

std::uint64_t MessageReader::u64() {
  const auto field = take(8);
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    value |= std::uint64_t{static_cast<unsigned char>(field[i])} << (8 * i);
  }
  return value;
}

std::string_view MessageReader::bytes() {
  return take(u32());
}

std::vector<std::string> MessageReader::key_list() {
  const std::uint32_t count = u32();
  // Each key takes at least its 4-byte length: never reserve more than the payload can hold.
  if (count > rest_.size() / 4) throw DecodeError("a key list claims more keys than it holds");
  std::vector<std::string> keys;
  keys.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) keys.emplace_back(bytes());
  return keys;
}

void MessageReader::expect_end() const {
  if (!rest_.empty()) throw DecodeError(std::to_string(rest_.size()) + " trailing bytes");
}

std::uint32_t decode_length(std::string_view prefix) noexcept {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < kLengthBytes; ++i) {
    value |= std::uint32_t{static_cast<unsigned char>(prefix[i])} << (8 * i);
  }
  return value;
}

std::string encode_request(const Request& request) {
  MessageWriter writer;
  writer.u8(static_cast<std::uint8_t>(request.opcode));
  switch (request.opcode) {
    case Opcode::hello:
      writer.u64(request.version).bytes(request.token);
      break;
    case Opcode::set:
      writer.bytes(request.keys.at(0)).bytes(request.value);
      break;
    case Opcode::get:
      writer.bytes(request.keys.at(0)).u64(request.timeout_ms);
      break;
    case Opcode::wait:
      writer.key_list(request.keys).u64(request.timeout_ms);
      break;
    case Opcode::check:
      writer.key_list(request.keys);
      break;
    case Opcode::add:
      writer.bytes(request.keys.at(0)).i64(request.delta);
      break;
    case Opcode::compare_set:
      writer.bytes(request.keys.at(0)).bytes(request.expected).bytes(request.value);
      break;
    case Opcode::remove:
      writer.bytes(request.keys.at(0));
      break;
  }
  return std::move(writer).finish();
}

Request decode_request(std::string_view payload) {
  if (payload.empty()) throw DecodeError("an empty request");
  MessageReader reader(payload);
  Request request;
  const std::uint8_t opcode = reader.u8();
  request.opcode = static_cast<Opcode>(opcode);
  switch (request.opcode) {
    case Opcode::hello:
      request.version = reader.u64();
      request.token = reader.bytes();
      break;
    case Opcode::set:
      request.keys.emplace_back(reader.bytes());
      request.value = reader.bytes();
      break;
    case Opcode::get:
      request.keys.emplace_back(reader.bytes());
      request.timeout_ms = reader.u64();
      break;
    case Opcode::wait:
      request.keys = reader.key_list();
      request.timeout_ms = reader.u64();
      break;
    case Opcode::check:
      request.keys = reader.key_list();
      break;
    case Opcode::add:
      request.keys.emplace_back(reader.bytes());
      request.delta = reader.i64();
      break;
    case Opcode::compare_set:
      request.keys.emplace_back(reader.bytes());
      request.expected = reader.bytes();
      request.value = reader.bytes();
      break;
    case Opcode::remove:
      request.keys.emplace_back(reader.bytes());
      break;
    default:
      throw DecodeError("unknown opcode " + std::to_string(opcode));
  }
  reader.expect_end();
  return request;
}

FrameScan scan_frame(std::string_view input, std::size_t max_payload) noexcept {
  FrameScan scan;
  if (input.size() < kLengthBytes) return scan;
  scan.length = decode_length(input);
  if (scan.length > max_payload) {
    scan.state = FrameScan::State::too_long;
  } else if (input.size() - kLengthBytes >= scan.length) {
    scan.state = FrameScan::State::complete;
  }
  return scan;
}

Reply decode_reply(Opcode opcode, std::string_view payload) {
  MessageReader reader(payload);
  Reply reply;
  const std::uint8_t status = reader.u8();
  reply.status = static_cast<Status>(status);
  switch (reply.status) {
    case Status::ok:
      switch (opcode) {
        case Opcode::get:
        case Opcode::compare_set:
          reply.value = reader.bytes();
          break;
        case Opcode::add:
          reply.number = reader.i64();
          break;
        case Opcode::check:
        case Opcode::remove:
          reply.flag = reader.u8() != 0;
          break;
        case Opcode::hello:
        case Opcode::set:
        case Opcode::wait:
          break;
      }
      break;
    case Status::timeout:
      reply.keys = reader.key_list();
      break;
    case Status::invalid_argument:
    case Status::error:
    case Status::refused:
      reply.message = reader.bytes();
      break;
    default:
      throw DecodeError("unknown status " + std::to_string(status));
  }
  reader.expect_end();
  return reply;
}

std::string format_address(std::string_view host, int port) {
  const bool ipv6 = host.find(':') != std::string_view::npos;
  std::string text;
  if (ipv6) text.push_back('[');
  text.append(host);
  if (ipv6) text.push_back(']');
  text.push_back(':');
  text.append(std::to_string(port));
  return text;
}

std::string socket_address(int fd, bool peer) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  auto* generic = reinterpret_cast<sockaddr*>(&address);
  if ((peer ? ::getpeername(fd, generic, &length) : ::getsockname(fd, generic, &length)) != 0) {
    return "?";
  }
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    port = ntohs(v6->sin6_port);
  } else {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    port = ntohs(v4->sin_port);
  }
  return format_address(host, port);
}

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const noexcept { ::freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

/// getaddrinfo for a TCP `host:port`; sets `error` (and `*permanent` when the name does not
/// exist, as opposed to a resolver that is temporarily unreachable) and returns null on failure.
AddrInfoList resolve(const std::string& host, int port, int flags, std::string& error,
                     bool* permanent = nullptr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;  // IPv4 and IPv6
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | flags;
  addrinfo* list = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) {
    error = "cannot resolve " + format_address(host, port) + ": " +
            (rc == EAI_SYSTEM ? system_error_text(errno) : std::string(::gai_strerror(rc)));
    if (permanent != nullptr) {
#ifdef EAI_NODATA
      *permanent = rc == EAI_NONAME || rc == EAI_FAIL || rc == EAI_NODATA;
#else
      *permanent = rc == EAI_NONAME || rc == EAI_FAIL;
#endif
    }
    return nullptr;
  }
  return AddrInfoList(list);
}

// Note [A store host that vanishes]
// A store host whose link is cut (or that loses power) sends nothing more: no FIN, no RST. A
// client blocked on its reply would wait for the request's own deadline, and the watchdog, whose
// heartbeat is such a request, could not fail the collective at its deadline meanwhile (a node
// cut off from the store took 15 s longer than its deadline to report). So a client socket
// gives up on a silent peer within about 5 s: unacknowledged data for 5 s (TCP_USER_TIMEOUT),
// or an idle connection whose keepalive probes (after 2 s, then every 1 s, 3 of them) go
// unanswered. Only a peer that stops acknowledging at the TCP level is affected: a busy server
// process still has its kernel acknowledge. The connection then fails with ETIMEDOUT, and every
// later use of it fails at once.
void detect_dead_peer(int fd) noexcept {
  const int on = 1;
  const int idle_s = 2;
  const int interval_s = 1;
  const int probes = 3;
  const unsigned int user_timeout_ms = 5000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

}  // namespace

UniqueFd try_connect(const std::string& host, int port, Clock::time_point deadline,
                     std::string& error, bool* permanent) {
  const auto addresses = resolve(host, port, 0, error, permanent);
  if (!addresses) return {};
  for (const addrinfo* entry = addresses.get(); entry != nullptr; entry = entry->ai_next) {
    UniqueFd fd(::socket(entry->ai_family, entry->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         entry->ai_protocol));
    if (!fd.valid()) {
      error = "socket() failed: " + system_error_text(errno);
      continue;
    }
    int rc = ::connect(fd.get(), entry->ai_addr, entry->ai_addrlen);
    if (rc != 0 && (errno == EINPROGRESS || errno == EINTR)) {
      if (!wait_for(fd.get(), POLLOUT, deadline)) {
        error = "connecting to " + format_address(host, port) + " timed out";
        continue;
      }
      int so_error = 0;
      socklen_t length = sizeof(so_error);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &length);
      errno = so_error;
      rc = so_error == 0 ? 0 : -1;
    }
    if (rc != 0) {
      error = "connecting to " + format_address(host, port) + ": " + system_error_text(errno);
      continue;
    }
    const int on = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    detect_dead_peer(fd.get());
    return fd;
  }
  return {};
}

UniqueFd listen_on(const std::string& host, int port) {
  std::string error;
  const auto addresses = resolve(host, port, AI_PASSIVE, error);
  COHORT_CHECK(addresses != nullptr, Error, "TcpStoreServer cannot listen: " + error);
  for (const addrinfo* entry = addresses.get(); entry != nullptr; entry = entry->ai_next) {
    UniqueFd fd(::socket(entry->ai_family, entry->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         entry->ai_protocol));
    const int on = 1;
    if (fd.valid() && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == 0 &&
        ::bind(fd.get(), entry->ai_addr, entry->ai_addrlen) == 0 &&
        ::listen(fd.get(), SOMAXCONN) == 0) {
      return fd;
    }
    error = system_error_text(errno);
  }
  COHORT_FAIL(Error, "TcpStoreServer cannot listen on " + format_address(host, port) + ": " +
                         error + "; is another server using the port?");
}

bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int rc = ::poll(&entry, 1, poll_timeout_ms(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the read or write report the error
    if (rc == 0 && Clock::now() >= deadline) return false;
  }
}

int poll_timeout_ms(Clock::time_point deadline) noexcept {
  if (deadline == Clock::time_point::max()) return -1;
  const auto remaining = deadline - Clock::now();
  if (remaining <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(remaining).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

std::string send_all(int fd, std::string_view bytes, Clock::time_point deadline,
                     const std::string& too_slow) {
  while (!bytes.empty()) {
    const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent >= 0) {
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLOUT, deadline)) return too_slow;
    } else if (errno != EINTR) {
      return errno == EPIPE || errno == ECONNRESET
                 ? "connection closed by the server"
                 : "sending to the server failed: " + system_error_text(errno);
    }
  }
  return {};
}

std::string receive_exact(int fd, char* out, std::size_t size, Clock::time_point deadline,
                          const std::string& too_slow) {
  while (size > 0) {
    const ssize_t got = ::recv(fd, out, size, 0);
    if (got > 0) {
      out += got;
      size -= static_cast<std::size_t>(got);
    } else if (got == 0) {
      return "connection closed by the server";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, deadline)) return too_slow;
    } else if (errno != EINTR) {
      return errno == ECONNRESET ? "connection reset by the server"
                                 : "receiving from the server failed: " + system_error_text(errno);
    }
  }
  return {};
}

}  // namespace cohort::detail::tcp
