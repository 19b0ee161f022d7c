#include <cohort/core/checksum.hpp>

#include <cstring>

namespace cohort {
namespace {

constexpr std::uint64_t kMultiplier1 = 0x9e3779b97f4a7c15ULL;
constexpr std::uint64_t kMultiplier2 = 0xc2b2ae3d27d4eb4fULL;

constexpr std::uint64_t rotate_left(std::uint64_t value, int bits) noexcept {
  return (value << bits) | (value >> (64 - bits));
}

std::uint64_t load_word(const unsigned char* data) noexcept {
  std::uint64_t word;
  std::memcpy(&word, data, sizeof(word));
  return word;
}

/// Spreads every input bit over the whole word (an avalanche step before the digest is read).
constexpr std::uint64_t finish(std::uint64_t value) noexcept {
  value ^= value >> 33;
  value *= kMultiplier2;
  value ^= value >> 29;
  value *= kMultiplier1;
  value ^= value >> 32;
  return value;
}

/// One lane's step over one 8-byte word.
constexpr std::uint64_t round(std::uint64_t lane, std::uint64_t word) noexcept {
  return rotate_left(lane + word * kMultiplier2, 31) * kMultiplier1;
}

}  // namespace

// The lanes live in locals while blocks are consumed: `data` is bytes, which may alias the
// members, so a loop on `lanes_` itself stores and reloads them at every block (3x slower).
const unsigned char* Checksum::blocks(const unsigned char* data, std::size_t count) noexcept {
  std::uint64_t lane0 = lanes_[0], lane1 = lanes_[1], lane2 = lanes_[2], lane3 = lanes_[3];
  for (; count > 0; --count, data += 32) {
    lane0 = round(lane0, load_word(data));
    lane1 = round(lane1, load_word(data + 8));
    lane2 = round(lane2, load_word(data + 16));
    lane3 = round(lane3, load_word(data + 24));
  }
  lanes_[0] = lane0;
  lanes_[1] = lane1;
  lanes_[2] = lane2;
  lanes_[3] = lane3;
  return data;
}

void Checksum::update(const void* data, std::size_t bytes) noexcept {
  if (bytes == 0) {
    return;  // `data` may be null then, which memcpy must not be given even for 0 bytes
  }
  const auto* next = static_cast<const unsigned char*>(data);
  total_bytes_ += bytes;
  if (pending_bytes_ > 0) {
    const std::size_t take = bytes < 32 - pending_bytes_ ? bytes : 32 - pending_bytes_;
    std::memcpy(pending_ + pending_bytes_, next, take);
    pending_bytes_ += take;
    next += take;
    bytes -= take;
    if (pending_bytes_ < 32) return;
    blocks(pending_, 1);
    pending_bytes_ = 0;
  }
  next = blocks(next, bytes / 32);
  bytes %= 32;
  std::memcpy(pending_, next, bytes);
  pending_bytes_ = bytes;
}

std::uint64_t Checksum::digest() const noexcept {
  std::uint64_t value = rotate_left(lanes_[0], 1) + rotate_left(lanes_[1], 7) +
                        rotate_left(lanes_[2], 12) + rotate_left(lanes_[3], 18);
  // The tail (fewer than 32 bytes), byte by byte, then the length: "ab" and "ab\0" differ.
  for (std::size_t i = 0; i < pending_bytes_; ++i) {
    value = rotate_left(value ^ (pending_[i] * kMultiplier1), 11) * kMultiplier2;
  }
  return finish(value ^ (total_bytes_ * kMultiplier1));
}

std::uint64_t Checksum::of(const void* data, std::size_t bytes) noexcept {
  Checksum checksum;
  checksum.update(data, bytes);
  return checksum.digest();
}

std::string checksum_to_hex(std::uint64_t digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4)
    text[static_cast<std::size_t>(i)] = kDigits[digest & 0xf];
  return text;
}

bool checksum_from_hex(std::string_view text, std::uint64_t& digest) noexcept {
  if (text.size() != 16) return false;
  std::uint64_t value = 0;
  for (const char c : text) {
    int nibble;
    if (c >= '0' && c <= '9') {
      nibble = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      nibble = c - 'a' + 10;
    } else {
      return false;
    }
    value = (value << 4) | static_cast<std::uint64_t>(nibble);
  }
  digest = value;
  return true;
}

}  // namespace cohort
