// The TCP store client's side of the protocol: the reply to a request of any opcode, from a
// server that may be broken or hostile. The first byte picks the request's opcode; the rest is
// the reply's payload. Decoding either succeeds or throws DecodeError, nothing else.

#include "launch/tcp_protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tcp = cohort::detail::tcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto opcode = static_cast<tcp::Opcode>(1 + data[0] % 8);
  const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const tcp::Reply reply = tcp::decode_reply(opcode, payload);
    (void)reply;
  } catch (const tcp::DecodeError&) {
  }
  return 0;
}
