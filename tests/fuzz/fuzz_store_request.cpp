// The TCP store server's side of the protocol: a byte stream from an untrusted client, cut into
// frames under the server's limits (the small one before HELLO, then max_message_bytes) and
// decoded. Every request that decodes must encode back to exactly the bytes it came from.

#include "launch/tcp_protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace tcp = cohort::detail::tcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool greeted = false;
  for (;;) {
    const std::size_t limit = greeted ? std::size_t{1} << 20 : tcp::kMaxHelloPayloadBytes;
    const tcp::FrameScan scan = tcp::scan_frame(input, limit);
    if (scan.state != tcp::FrameScan::State::complete) return 0;  // the server waits or closes
    const std::string_view whole = input.substr(0, tcp::kLengthBytes + scan.length);
    input.remove_prefix(whole.size());
    tcp::Request request;
    try {
      request = tcp::decode_request(whole.substr(tcp::kLengthBytes));
    } catch (const tcp::DecodeError&) {
      return 0;  // the server closes the connection
    }
    if (tcp::encode_request(request) != whole) std::abort();
    greeted = true;
  }
}
