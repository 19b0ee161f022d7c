#pragma once

/// @file
/// Formatting shared by messages and reports in every layer.

#include <cstddef>
#include <string>

namespace cohort {

/// "512 B", "1.50 KiB", "3.00 GiB": bytes with a binary unit and two decimals.
std::string format_bytes(std::size_t bytes);

}  // namespace cohort
