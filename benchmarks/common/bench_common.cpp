#include "bench_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

namespace cohort::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

double algbw_gbps(double bytes, double seconds) {
  return seconds > 0.0 ? bytes / seconds / 1e9 : 0.0;
}

double bus_factor(Collective collective, int ranks) {
  if (ranks < 1) return 0.0;
  const double n = ranks;
  switch (collective) {
    case Collective::all_reduce:
      return 2.0 * (n - 1.0) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
      return (n - 1.0) / n;
    case Collective::broadcast:
      return 1.0;
  }
  return 0.0;
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

}  // namespace

std::string machine_line() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return std::string(host[0] != '\0' ? host : "unknown host") + ", " + cpu_model() + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
}

}  // namespace cohort::bench
