#include <cohort/launch/detail/store_messages.hpp>

namespace cohort::detail {

std::string quote_bytes(std::string_view bytes, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < bytes.size() && i < max_bytes; ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '"' && byte != '\\') {
      out.push_back(static_cast<char>(byte));
    } else {
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xf]);
    }
  }
  out.push_back('"');
  if (bytes.size() > max_bytes) out += "...";
  return out;
}

std::string timeout_message(std::string_view store, const std::vector<std::string>& missing_keys,
                            Milliseconds waited) {
  std::string message = "timed out after " + std::to_string(waited.count()) + " ms waiting for ";
  message += missing_keys.size() == 1 ? "key " : "keys ";
  for (std::size_t i = 0; i < missing_keys.size(); ++i) {
    if (i > 0) message += ", ";
    message += quote_bytes(missing_keys[i]);
  }
  message += " in ";
  message += store;
  message += "; check that every rank reached this point and that all ranks use the same store";
  return message;
}

}  // namespace cohort::detail
