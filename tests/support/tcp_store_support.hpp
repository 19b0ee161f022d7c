#pragma once

// For tests of the TCP store: a server and client options on 127.0.0.1, a client that sends
// whatever bytes a test gives it, and the protocol's frames written from its description
// (Note [TCP store protocol] in src/launch/tcp_protocol.cpp), not from the library's encoder, so
// that a test of the server does not trust the code it tests.

#include <cohort/launch/tcp_store.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace cohort_test {

/// A server on 127.0.0.1 and a free port.
inline cohort::TcpStoreServerOptions local_server(std::string token = {}) {
  cohort::TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.token = std::move(token);
  return options;
}

/// A client of the server on 127.0.0.1:`port` presenting `token` (empty: none).
inline cohort::TcpStoreOptions client_of(int port, std::string token = std::string(),
                                         cohort::Milliseconds timeout = std::chrono::seconds(10)) {
  cohort::TcpStoreOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.token = std::move(token);
  options.timeout = timeout;
  options.connect_timeout = std::chrono::seconds(5);
  return options;
}

inline std::string u32le(std::uint32_t value) {
  std::string out;
  for (int shift = 0; shift < 32; shift += 8)
    out.push_back(static_cast<char>((value >> shift) & 0xff));
  return out;
}

inline std::string u64le(std::uint64_t value) {
  std::string out;
  for (int shift = 0; shift < 64; shift += 8)
    out.push_back(static_cast<char>((value >> shift) & 0xff));
  return out;
}

inline std::string field(const std::string& bytes) {
  return u32le(static_cast<std::uint32_t>(bytes.size())) + bytes;
}

inline std::string frame(const std::string& payload) {
  return u32le(static_cast<std::uint32_t>(payload.size())) + payload;
}

/// HELLO, protocol version 1, no token. (Built by appending: GCC 12 warns falsely about
/// "literal" + std::string&& here.)
inline std::string hello_frame() {
  std::string payload(1, '\x01');
  payload += u64le(1);
  payload += field("");
  return frame(payload);
}

const std::string kHello = hello_frame();
const std::string kOkReply = frame(std::string(1, '\0'));

/// A TCP connection that speaks whatever bytes a test gives it.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  /// Sends `bytes` without asserting: false when the server has closed the connection.
  bool try_send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  void send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  /// Up to `size` bytes, waiting at most `timeout`; fewer when the server closes.
  std::string receive(std::size_t size, cohort::Milliseconds timeout) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < size) {
      pollfd entry{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<cohort::Milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&entry, 1, static_cast<int>(left.count())) <= 0) break;
      char buffer[4096];
      const ssize_t got = ::recv(fd_, buffer, std::min(sizeof(buffer), size - out.size()), 0);
      if (got <= 0) break;
      out.append(buffer, static_cast<std::size_t>(got));
    }
    return out;
  }

  /// Whether the server closes this connection within `timeout` (replies are read and dropped).
  bool closed_by_server(cohort::Milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      pollfd entry{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<cohort::Milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&entry, 1, static_cast<int>(left.count())) <= 0) return false;
      char buffer[4096];
      const ssize_t got = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

}  // namespace cohort_test
