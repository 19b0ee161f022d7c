#include <cohort/core/format.hpp>

#include <iomanip>
#include <iterator>
#include <sstream>

namespace cohort {

std::string format_bytes(std::size_t bytes) {
  if (bytes < 1024) {
    return std::to_string(bytes) + " B";
  }
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << value << ' ' << kUnits[unit];
  return out.str();
}

}  // namespace cohort
