#pragma once

// The words of a store's errors (not public API), shared by every store and by the stores that
// wrap one (the world's FailureAwareStore), so that they all fail alike. Their code is in
// src/launch/store_messages.cpp. Note [Private headers of an area] in docs/design.md.

#include <cohort/launch/store.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::detail {

/// `key` in double quotes, with bytes that are not printable ASCII written as \xNN, cut after
/// `max_bytes` bytes (marked with "...").
std::string quote_bytes(std::string_view bytes, std::size_t max_bytes = 128);

/// "cohort: timed out after ... waiting for keys ... in <store>; check that ..." without the
/// "cohort: " prefix that the error macros add.
std::string timeout_message(std::string_view store, const std::vector<std::string>& missing_keys,
                            Milliseconds waited);

}  // namespace cohort::detail
