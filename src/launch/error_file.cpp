// record_failure: torchrun's error file (see launch_info.hpp).

#include <cohort/launch/launch_info.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>

namespace cohort {
namespace {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out.push_back(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

void record_failure(std::string_view message) noexcept {
  record_failure(message, process_environment());
}

void record_failure(std::string_view message, const EnvLookup& env) noexcept {
  try {
    const std::optional<std::string> path = env::text(env, env::kTorchErrorFile);
    if (!path) return;
    // torchrun reads "message" and "timestamp"; without a timestamp its summary says 1970 and
    // ranks this failure first whatever the time.
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    std::ofstream file(*path, std::ios::trunc);
    file << "{\"message\": " << json_string(message) << ", \"timestamp\": " << now << "}\n";
  } catch (...) {
  }
}

}  // namespace cohort
