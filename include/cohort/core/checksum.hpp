#pragma once

/// @file
/// A 64-bit checksum over four independent lanes of 64-bit words, so that it runs at memory speed
/// and costs little next to a write: checkpoint files carry it, and the ranks compare it to agree
/// that their bytes are equal (`check_ranks_agree`). It detects accidental damage (truncation,
/// flipped bits, stale blocks); it is not a cryptographic hash.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cohort {

/// A streaming checksum: `update` in any split gives the same `digest` as one call on the whole.
class Checksum {
 public:
  void update(const void* data, std::size_t bytes) noexcept;
  /// The digest of everything so far (the object may go on being updated).
  std::uint64_t digest() const noexcept;

  /// `digest` of `bytes` bytes at `data`, in one call.
  static std::uint64_t of(const void* data, std::size_t bytes) noexcept;

 private:
  /// Consumes `count` 32-byte blocks at `data`; returns the end of the last.
  const unsigned char* blocks(const unsigned char* data, std::size_t count) noexcept;

  std::uint64_t lanes_[4] = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0xa4093822299f31d0ULL,
                             0x082efa98ec4e6c89ULL};
  unsigned char pending_[32] = {};
  std::size_t pending_bytes_ = 0;
  std::uint64_t total_bytes_ = 0;
};

/// A digest as 16 lower-case hex digits, and back (nullopt-like failure: returns false).
std::string checksum_to_hex(std::uint64_t digest);
bool checksum_from_hex(std::string_view text, std::uint64_t& digest) noexcept;

}  // namespace cohort
