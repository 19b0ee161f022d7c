#include "bench_common.hpp"

#include <cohort/version.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <numeric>
#include <thread>

extern char** environ;  // NOLINT: POSIX's process environment

namespace cohort::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(rank));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (values[above] - values[below]) * (rank - static_cast<double>(below));
}

Spread spread(const std::vector<double>& values) {
  Spread s;
  s.count = values.size();
  if (values.empty()) return s;
  s.p10 = percentile(values, 10.0);
  s.median = median(values);
  s.p90 = percentile(values, 90.0);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  s.mean = mean(values);
  return s;
}

nlohmann::json spread_json(const Spread& s, double scale) {
  if (s.count == 0) return nullptr;
  return {{"p10", s.p10 * scale}, {"median", s.median * scale}, {"p90", s.p90 * scale},
          {"min", s.min * scale}, {"max", s.max * scale},       {"mean", s.mean * scale},
          {"n", s.count}};
}

std::string commit() {
  return
#include "cohort_commit.inc"
      ;
}

nlohmann::json relevant_environment() {
  nlohmann::json out = nlohmann::json::object();
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const std::size_t equals = text.find('=');
    if (equals == std::string::npos) continue;
    const std::string name = text.substr(0, equals);
    const bool wanted = name.starts_with("NCCL_") || name.starts_with("COHORT_") ||
                        name.starts_with("GLOO_") || name.starts_with("CUDA_") ||
                        name == "OMP_NUM_THREADS" || name == "OPENBLAS_NUM_THREADS";
    if (!wanted) continue;
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const bool secret = upper.find("TOKEN") != std::string::npos ||
                        upper.find("SECRET") != std::string::npos ||
                        upper.find("PASSWORD") != std::string::npos || upper.ends_with("_KEY");
    out[name] = secret ? std::string("(set, not shown)") : text.substr(equals + 1);
  }
  return out;
}

nlohmann::json provenance(const std::string& schema, const std::vector<std::string>& command_line,
                          const std::vector<std::string>& hosts) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &utc);
  std::vector<std::string> distinct;
  for (const std::string& host : hosts) {
    if (std::find(distinct.begin(), distinct.end(), host) == distinct.end())
      distinct.push_back(host);
  }
  return {{"schema", schema},
          {"timestamp", stamp},
          {"cohort_version", cohort::version()},
          {"commit", commit()},
          {"hosts", distinct},
          {"rank_hosts", hosts},
          {"machine", machine_line()},
          {"command_line", command_line},
          {"environment", relevant_environment()}};
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "unknown host";
  return host;
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
  return host_name() + ", " + cpu_model() + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
}

}  // namespace cohort::bench
