// allreduce_bench: all-reduce bandwidth through cohort, against the raw backend, in the table
// nccl-tests' all_reduce_perf prints.
//
//   cohortrun --nproc-per-node 8 build/default/benchmarks/allreduce_bench -b 8 -e 8G -f 2
//   build/ci/benchmarks/allreduce_bench --ranks 4 -b 1K -e 32M        # 4 host ranks, threads
//   cohortrun --nproc-per-node 4 allreduce_bench --transport gloo -b 1K -e 64M -f 4
//
// Every rank runs each size out of place, in place, and through the backend called directly
// (ncclAllReduce or gloo::allreduce on the same communicator and buffers), one operation at a time
// and interleaved, so that load on the machine hits the three alike. Times are medians over the
// iterations (nccl-tests reports the mean of back-to-back launches), averaged over ranks. The
// ratio column is cohort's busbw over the raw backend's: the median, over iterations, of each
// in-place operation's time against the raw one that ran right after it.
// busbw = algbw x 2(n-1)/n, as nccl-tests defines it; GB/s are 1e9 bytes per second.
// Both paths are timed alike: enqueue, then the stream synchronized (cudaStreamSynchronize on
// GPUs); cohort's Work is collected only after that, so its poll interval is not timed.
// --issue-cost N first times the host cost of issuing one small all-reduce (the call alone, no
// synchronization; medians of N) through cohort and raw, and counts the threads the system
// created meanwhile (/proc/stat "processes"), to show whether a collective starts a thread.
// The transport column is the communicator's backend (shm, gloo, hierarchical or nccl); the raw
// column exists for gloo and nccl. On the host, the memcpy column is the median time of every
// rank copying the same bytes at once: the memory-bandwidth ceiling an all-reduce cannot beat.

#include "common/bench_common.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/version.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>
#include <gloo/allreduce.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <nlohmann/json.hpp>

#if COHORT_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using cohort::bench::machine_line;
using cohort::bench::median;
namespace bench = cohort::bench;

struct Options {
  std::string min_bytes = "32M";
  std::string max_bytes = "32M";
  double step_factor = 2.0;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  std::string dtype = "float";
  std::string op = "sum";
  int ranks = 0;  // host ranks as threads when not launched by a launcher
  std::string transport;  // host transport: shm, gloo or auto (unset: COHORT_HOST_TRANSPORT)
  std::string json;
  int issue_cost = 0;  // iterations of the host-cost measurement; 0: none
};

/// Threads and processes the system has created since boot (/proc/stat), or -1.
long long clones_since_boot() {
  std::ifstream stat("/proc/stat");
  std::string key;
  long long value = -1;
  while (stat >> key) {
    if (key == "processes") {
      stat >> value;
      return value;
    }
    stat.ignore(1 << 20, '\n');
  }
  return -1;
}

namespace cli = cohort::cli;

/// Bytes in `text` (a number with an optional K, M, G or B), or nullopt when it is not a whole
/// number of bytes from 1 to 64 GiB.
std::optional<std::size_t> size_bytes(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value)) return std::nullopt;
  const std::string unit(end);
  double scale = 1.0;
  if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024.0;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024.0 * 1024.0;
  else if (!unit.empty() && unit != "B") return std::nullopt;
  const double bytes = value * scale;
  if (bytes < 1.0 || bytes > 64.0 * 1024 * 1024 * 1024 || bytes != std::floor(bytes)) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

std::size_t parse_size(const std::string& text) { return size_bytes(text).value(); }

CLI::Validator size_text() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        return size_bytes(text) ? std::string()
                                : "'" + text + "' is not a size from 1 byte to 64G: use a whole "
                                               "number of bytes, or a number with K, M or G";
      },
      "SIZE");
}

/// Memory for one benchmark buffer: host memory, or CUDA memory for the NCCL backend.
class Memory {
 public:
  Memory(cohort::Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
    if (device.is_host()) {
      host_.resize(std::max<std::size_t>(bytes, 1));
      data_ = host_.data();
      return;
    }
#if COHORT_WITH_CUDA
    if (cudaMalloc(&data_, std::max<std::size_t>(bytes, 1)) != cudaSuccess) {
      COHORT_FAIL(cohort::OutOfMemory, "cudaMalloc of " + std::to_string(bytes) + " bytes failed");
    }
#endif
  }
  ~Memory() {
#if COHORT_WITH_CUDA
    if (device_.is_cuda()) cudaFree(data_);
#endif
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void* data() const { return data_; }
  /// In `stream`'s order, waited for: a plain cudaMemcpy runs on the legacy stream, which the
  /// collectives' non-blocking stream does not wait for.
  void upload(const std::vector<std::byte>& bytes, const cohort::Stream& stream) {
    cohort::detail::write_now(data_, bytes.data(), bytes.size(), stream);
  }
  std::vector<std::byte> download(const cohort::Stream& stream) const {
    std::vector<std::byte> bytes(bytes_);
    cohort::detail::read_after(bytes.data(), data_, bytes_, stream);
    return bytes;
  }

 private:
  cohort::Device device_;
  std::size_t bytes_;
  std::vector<std::byte> host_;
  void* data_ = nullptr;
};

// Rank r contributes (r + i) % 5 + 1 at element i: small integers, exact in every dtype, so the
// reduced value is exact and any difference is a wrong element (as nccl-tests checks).
double contribution(int rank, std::size_t i) {
  return static_cast<double>((static_cast<std::size_t>(rank) + i) % 5 + 1);
}

double expected(cohort::ReduceOp op, int ranks, std::size_t i) {
  double sum = 0.0, low = 1e300, high = -1e300;
  for (int r = 0; r < ranks; ++r) {
    const double v = contribution(r, i);
    sum += v;
    low = std::min(low, v);
    high = std::max(high, v);
  }
  switch (op) {
    case cohort::ReduceOp::sum: return sum;
    case cohort::ReduceOp::avg: return sum / ranks;
    case cohort::ReduceOp::min: return low;
    case cohort::ReduceOp::max: return high;
  }
  return 0.0;
}

using cohort::from_double;
using cohort::to_double;

std::vector<std::byte> pattern(cohort::DType dtype, int rank, std::size_t count) {
  std::vector<std::byte> bytes(count * cohort::size_of(dtype));
  cohort::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* values = reinterpret_cast<T*>(bytes.data());
    for (std::size_t i = 0; i < count; ++i) values[i] = from_double<T>(contribution(rank, i));
  });
  return bytes;
}

std::size_t count_wrong(cohort::DType dtype, cohort::ReduceOp op, int ranks,
                        const std::vector<std::byte>& bytes) {
  std::size_t wrong = 0;
  cohort::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto* values = reinterpret_cast<const T*>(bytes.data());
    const std::size_t count = bytes.size() / sizeof(T);
    for (std::size_t i = 0; i < count; ++i) {
      double want = expected(op, ranks, i);
      if constexpr (std::is_integral_v<T>) want = std::trunc(want);
      const double got = to_double(values[i]);
      // Exact, except avg in 16-bit floats, which rounds once (a relative 2^-8 for bf16).
      const double tolerance = op == cohort::ReduceOp::avg ? std::abs(want) / 128.0 : 0.0;
      if (std::abs(got - want) > tolerance) ++wrong;
    }
  });
  return wrong;
}

/// The backend called directly, in place, on the communicator's own handle.
class RawBackend {
 public:
  RawBackend(cohort::Communicator& comm, cohort::DType dtype, cohort::ReduceOp op)
      : comm_(comm), dtype_(dtype), op_(op) {}

  /// Enqueues the all-reduce and waits for it: cudaStreamSynchronize on GPUs.
  void all_reduce(void* data, std::size_t count, const cohort::Stream& stream) {
    enqueue(data, count, stream);
    stream.synchronize();
  }

  /// Issues the all-reduce (on the host backend: runs it).
  void enqueue(void* data, std::size_t count, const cohort::Stream& stream) {
    if (comm_.backend() == cohort::Backend::gloo) {
      auto* context = static_cast<gloo::Context*>(comm_.native_handle());
      std::shared_ptr<gloo::Context> shared(std::shared_ptr<gloo::Context>(), context);
      cohort::visit_dtype(dtype_, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
                      std::is_same_v<T, std::uint8_t>) {
          gloo::AllreduceOptions options(shared);
          options.setOutput(static_cast<T*>(data), count);
          using Reduce = void (*)(void*, const void*, const void*, std::size_t);
          Reduce reduce = static_cast<Reduce>(&gloo::sum<T>);
          if (op_ == cohort::ReduceOp::min) reduce = static_cast<Reduce>(&gloo::min<T>);
          if (op_ == cohort::ReduceOp::max) reduce = static_cast<Reduce>(&gloo::max<T>);
          options.setReduceFunction(reduce);
          gloo::allreduce(options);
        } else {
          COHORT_FAIL(cohort::InvalidArgument, "raw Gloo timing covers f32, f64 and integers");
        }
      });
      return;
    }
#if COHORT_WITH_CUDA
    static constexpr ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat64, ncclFloat16,
                                                ncclBfloat16, ncclInt32, ncclInt64, ncclUint8};
    static constexpr ncclRedOp_t kOps[] = {ncclSum, ncclAvg, ncclMin, ncclMax};
    auto comm = static_cast<ncclComm_t>(comm_.native_handle());
    auto cuda_stream = static_cast<cudaStream_t>(stream.native_handle());
    ncclResult_t result = ncclAllReduce(data, data, count, kTypes[static_cast<int>(dtype_)],
                                        kOps[static_cast<int>(op_)], comm, cuda_stream);
    while (result == ncclInProgress) {
      ncclCommGetAsyncError(comm, &result);
    }
    COHORT_CHECK(result == ncclSuccess, cohort::NcclError,
                 std::string("raw ncclAllReduce failed: ") + ncclGetErrorString(result));
#else
    (void)stream;
#endif
  }

 private:
  cohort::Communicator& comm_;
  cohort::DType dtype_;
  cohort::ReduceOp op_;
};

struct Row {
  std::size_t bytes = 0;
  std::size_t count = 0;
  double oop_us = 0, ip_us = 0, raw_us = 0, memcpy_us = 0;
  double ratio = 0;  // median over iterations of raw time / cohort in-place time (paired)
  std::size_t oop_wrong = 0, ip_wrong = 0;
};

double algbw(std::size_t bytes, double us) {
  return cohort::bench::algbw_gbps(static_cast<double>(bytes), us * 1e-6);
}

/// Mean of a value over ranks, through the store (keys unique per call).
double mean_over_ranks(cohort::World& world, const std::string& key, double value) {
  world.store().set(key + "/" + std::to_string(world.rank()), std::to_string(value));
  double sum = 0.0;
  for (int r = 0; r < world.size(); ++r) {
    sum += std::stod(world.store().get(key + "/" + std::to_string(r)));
  }
  return sum / world.size();
}

/// --issue-cost: the host time of issuing one all-reduce of 4 floats, cohort against raw.
/// `raw`: the backend's own library, or null where there is none (shared memory).
void report_issue_cost(cohort::World& world, RawBackend* raw, const cohort::Stream& stream,
                       int iterations) {
  Memory buffer(world.device(), 4 * sizeof(float));
  buffer.upload(pattern(cohort::DType::f32, world.rank(), 4), stream);
  const auto view = cohort::TensorView(buffer.data(), 4, cohort::DType::f32, world.device());
  std::vector<double> cohort_us, raw_us;
  const long long clones_before = clones_since_boot();
  for (int i = 0; i < iterations + 5; ++i) {
    auto start = Clock::now();
    const cohort::Work work = world.comm().all_reduce(view, cohort::ReduceOp::sum, stream);
    const double issued = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    stream.synchronize();
    work.wait();
    double raw_issued = 0.0;
    if (raw != nullptr) {
      start = Clock::now();
      raw->enqueue(buffer.data(), 4, stream);
      raw_issued = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      stream.synchronize();
    }
    if (i >= 5) {  // the first ones connect and warm up
      cohort_us.push_back(issued);
      raw_us.push_back(raw_issued);
    }
  }
  const long long clones = clones_since_boot() - clones_before;
  const double cohort_median = mean_over_ranks(world, "issue/cohort", median(cohort_us));
  const std::string backend(to_string(world.comm().backend()));
  std::string raw_text = "raw: none for " + backend;
  if (raw != nullptr) {
    char text[64];
    std::snprintf(text, sizeof(text), "raw %s %.2f us", backend.c_str(),
                  mean_over_ranks(world, "issue/raw", median(raw_us)));
    raw_text = text;
  }
  const double collectives = (raw != nullptr ? 2.0 : 1.0) * (iterations + 5);
  if (world.rank() == 0) {
    std::printf("# host cost of issuing one all-reduce of 4 floats (median of %d, mean over "
                "ranks): cohort %.2f us, %s; threads created system-wide per collective on "
                "rank 0: %.2f\n",
                iterations, cohort_median, raw_text.c_str(),
                clones < 0 ? -1.0 : static_cast<double>(clones) / collectives);
  }
}

int run(cohort::World& world, const Options& options) {
  const auto dtype = cohort::parse_dtype(options.dtype);
  COHORT_EXPECTS(dtype.has_value(), "-d " + options.dtype + ": not a dtype (float, half, ...)");
  cohort::ReduceOp op = cohort::ReduceOp::sum;
  if (options.op == "avg") op = cohort::ReduceOp::avg;
  else if (options.op == "min") op = cohort::ReduceOp::min;
  else if (options.op == "max") op = cohort::ReduceOp::max;
  else COHORT_EXPECTS(options.op == "sum", "-o " + options.op + ": use sum, avg, min or max");

  cohort::Communicator& comm = world.comm();
  const cohort::Stream stream = cohort::Stream::create(world.device());
  const std::size_t element = cohort::size_of(*dtype);
  const std::size_t min_bytes = std::max(parse_size(options.min_bytes), element);
  const std::size_t max_bytes = std::max(parse_size(options.max_bytes), min_bytes);
  const int n = world.size();
  const bool leader = world.rank() == 0;
  // The backend called directly: NCCL, or Gloo on the Gloo transport (shared memory has no
  // library of its own to call; its ceiling is the memcpy column).
  const bool raw_supported = comm.backend() == cohort::Backend::nccl ||
                             (comm.backend() == cohort::Backend::gloo &&
                              *dtype != cohort::DType::f16 && *dtype != cohort::DType::bf16 &&
                              op != cohort::ReduceOp::avg);
  const std::string transport(to_string(comm.backend()));
  const bool host = world.device().is_host();
  RawBackend raw(comm, *dtype, op);
  if (options.issue_cost > 0) {
    // The backend called directly exists for NCCL and Gloo only (as raw_supported below).
    const bool has_raw =
        comm.backend() == cohort::Backend::nccl || comm.backend() == cohort::Backend::gloo;
    RawBackend raw_f32(comm, cohort::DType::f32, cohort::ReduceOp::sum);
    report_issue_cost(world, has_raw ? &raw_f32 : nullptr, stream, options.issue_cost);
  }

  if (leader) {
    std::printf("# cohort allreduce_bench: %d ranks on %s (%s), %s; cohort %s\n", n,
                world.device().to_string().c_str(), std::string(to_string(comm.backend())).c_str(),
                machine_line().c_str(), cohort::version());
    std::printf("# minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
                "validation: %d; times are medians, averaged over ranks\n#\n",
                min_bytes, max_bytes, options.step_factor, options.warmup, options.iters,
                options.check);
    std::printf("# %9s %10s %12s %6s %6s | %9s %8s %8s %6s | %9s %8s %8s %6s | %8s %6s | %8s\n",
                "", "", "", "", "", "out-of-place", "", "", "", "in-place", "", "", "", "raw", "",
                "memcpy");
    std::printf("# %9s %10s %12s %6s %6s | %9s %8s %8s %6s | %9s %8s %8s %6s | %8s %6s | %8s\n",
                "transport", "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong",
                "time", "algbw", "busbw", "#wrong", "busbw", "ratio", "time");
    std::printf("# %9s %10s %12s %6s %6s | %9s %8s %8s %6s | %9s %8s %8s %6s | %8s %6s | %8s\n",
                "", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "", "(GB/s)", "", "(us)");
  }

  const double bus_factor = n > 1 ? bench::bus_factor(bench::Collective::all_reduce, n) : 0.0;
  std::vector<Row> rows;
  std::size_t total_wrong = 0;
  int sequence = 0;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes;
       bytes = std::max(bytes + element, static_cast<std::size_t>(static_cast<double>(bytes) * options.step_factor))) {
    Row row;
    row.count = bytes / element;
    row.bytes = row.count * element;
    Memory input(world.device(), row.bytes);
    Memory output(world.device(), row.bytes);
    input.upload(pattern(*dtype, world.rank(), row.count), stream);
    const auto in_view = cohort::TensorView(input.data(), row.count, *dtype, world.device());
    const auto out_view = cohort::TensorView(output.data(), row.count, *dtype, world.device());

    auto timed = [&](auto&& body) {
      const auto start = Clock::now();
      body();
      return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    };
    auto cohort_oop = [&] {
      const cohort::Work work = comm.all_reduce(in_view, out_view, op, stream);
      stream.synchronize();
      work.wait();  // finished by now: only collects an error
    };
    auto cohort_ip = [&] {
      const cohort::Work work = comm.all_reduce(out_view, op, stream);
      stream.synchronize();
      work.wait();
    };
    auto raw_ip = [&] { raw.all_reduce(output.data(), row.count, stream); };
    // The memory-bandwidth ceiling: every rank copies the same bytes at once (host only).
    std::vector<std::byte> scratch(host ? row.bytes : 0);
    auto copy = [&] { std::memcpy(scratch.data(), input.data(), scratch.size()); };

    for (int i = 0; i < options.warmup; ++i) {
      cohort_oop();
      cohort_ip();
      if (raw_supported) raw_ip();
    }
    std::vector<double> oop, ip, direct, copies;
    for (int i = 0; i < options.iters; ++i) {
      oop.push_back(timed(cohort_oop));
      ip.push_back(timed(cohort_ip));
      if (raw_supported) direct.push_back(timed(raw_ip));
      if (host) copies.push_back(timed(copy));
    }
    const std::string key = "bench/" + std::to_string(sequence++);
    row.oop_us = mean_over_ranks(world, key + "/oop", median(oop));
    row.ip_us = mean_over_ranks(world, key + "/ip", median(ip));
    row.raw_us = raw_supported ? mean_over_ranks(world, key + "/raw", median(direct)) : 0.0;
    row.memcpy_us = host ? mean_over_ranks(world, key + "/memcpy", median(copies)) : 0.0;
    if (raw_supported) {
      // Each in-place op and the raw op after it ran under the same load: compare them in pairs.
      std::vector<double> paired;
      for (std::size_t i = 0; i < ip.size(); ++i) paired.push_back(direct[i] / ip[i]);
      row.ratio = mean_over_ranks(world, key + "/ratio", median(paired));
    }

    if (options.check > 0) {
      // Overwritten by the out-of-place result.
      output.upload(pattern(*dtype, 0, row.count), stream);
      comm.all_reduce(in_view, out_view, op, stream).wait();
      stream.synchronize();
      const double oop_wrong =
          static_cast<double>(count_wrong(*dtype, op, n, output.download(stream)));
      output.upload(pattern(*dtype, world.rank(), row.count), stream);
      comm.all_reduce(out_view, op, stream).wait();
      stream.synchronize();
      const double ip_wrong =
          static_cast<double>(count_wrong(*dtype, op, n, output.download(stream)));
      row.oop_wrong = static_cast<std::size_t>(mean_over_ranks(world, key + "/w1", oop_wrong) * n);
      row.ip_wrong = static_cast<std::size_t>(mean_over_ranks(world, key + "/w2", ip_wrong) * n);
      total_wrong += row.oop_wrong + row.ip_wrong;
    }
    if (leader) {
      const double raw_busbw = algbw(row.bytes, row.raw_us) * bus_factor;
      const double ip_busbw = algbw(row.bytes, row.ip_us) * bus_factor;
      char ratio[16] = "   n/a";
      if (raw_supported && raw_busbw > 0) std::snprintf(ratio, sizeof(ratio), "%6.3f", row.ratio);
      std::printf("  %9s %10zu %12zu %6s %6s | %9.1f %8.3f %8.3f %6zu | %9.1f %8.3f %8.3f %6zu | "
                  "%8.3f %6s | %8.1f\n",
                  transport.c_str(), row.bytes, row.count, options.dtype.c_str(),
                  options.op.c_str(), row.oop_us, algbw(row.bytes, row.oop_us),
                  algbw(row.bytes, row.oop_us) * bus_factor, row.oop_wrong, row.ip_us,
                  algbw(row.bytes, row.ip_us), ip_busbw, row.ip_wrong, raw_busbw, ratio,
                  row.memcpy_us);
      std::fflush(stdout);
    }
    rows.push_back(row);
  }

  if (leader) {
    double busbw_sum = 0.0;
    std::vector<double> ratios;
    for (const Row& row : rows) {
      busbw_sum += (algbw(row.bytes, row.oop_us) + algbw(row.bytes, row.ip_us)) * bus_factor;
      if (row.bytes >= (1u << 20) && row.raw_us > 0) ratios.push_back(row.ratio);
    }
    std::printf("# Out of bounds values : %zu %s\n", total_wrong, total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.3f GB/s\n",
                rows.empty() ? 0.0 : busbw_sum / (2.0 * static_cast<double>(rows.size())));
    if (!ratios.empty()) {
      std::printf("# cohort/raw busbw, median over sizes from 1 MiB: %.3f (%zu sizes)\n",
                  median(ratios), ratios.size());
    }
    if (!options.json.empty()) {
      nlohmann::json out;
      out["ranks"] = n;
      out["backend"] = std::string(to_string(comm.backend()));
      out["transport"] = transport;
      out["device"] = world.device().to_string();
      out["dtype"] = options.dtype;
      out["op"] = options.op;
      out["machine"] = machine_line();
      out["cohort_version"] = cohort::version();
      out["records"] = nlohmann::json::array();
      for (const Row& row : rows) {
        const double raw_busbw = algbw(row.bytes, row.raw_us) * bus_factor;
        nlohmann::json record;
        record["bytes"] = row.bytes;
        record["count"] = row.count;
        record["time_us"] = row.ip_us;
        record["algbw_gbps"] = algbw(row.bytes, row.ip_us);
        record["busbw_gbps"] = algbw(row.bytes, row.ip_us) * bus_factor;
        record["oop_time_us"] = row.oop_us;
        record["oop_busbw_gbps"] = algbw(row.bytes, row.oop_us) * bus_factor;
        record["wrong"] = row.oop_wrong + row.ip_wrong;
        record["raw_time_us"] = row.raw_us;
        record["raw_busbw_gbps"] = raw_busbw;
        record["ratio"] = row.ratio;
        record["memcpy_time_us"] = row.memcpy_us;
        out["records"].push_back(record);
      }
      cli::write_file("--json", options.json, out.dump(2) + "\n");
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"all-reduce bus bandwidth through cohort, against the raw backend"};
  app.add_option("-b,--minbytes", options.min_bytes, "smallest size (K, M, G suffixes)")
      ->check(size_text());
  app.add_option("-e,--maxbytes", options.max_bytes, "largest size")->check(size_text());
  app.add_option("-f,--stepfactor", options.step_factor, "multiply the size by this each step")
      ->check(cli::number_in(1.0, false, 1024.0, false));
  app.add_option("-n,--iters", options.iters, "timed iterations per size")->check(cli::whole(1, 1e7));
  app.add_option("-w,--warmup_iters", options.warmup, "untimed iterations per size")->check(cli::whole(0, 1e7));
  app.add_option("-c,--check", options.check, "check results (0: don't)")->check(cli::whole(0, 1));
  app.add_option("-d,--datatype", options.dtype, "float, double, half, bfloat16, int32, int64, uint8")
      ->check(CLI::IsMember({"float", "double", "half", "bfloat16", "int32", "int64", "uint8"}));
  app.add_option("-o,--op", options.op, "sum, avg, min, max")
      ->check(CLI::IsMember({"sum", "avg", "min", "max"}));
  app.add_option("--ranks", options.ranks,
                 "run this many host ranks as threads (when not started by a launcher)")
      ->check(cli::whole(1, 1024));
  app.add_option("--json", options.json, "write one record per size to this file")
      ->check(cli::writable_file());
  app.add_option("--transport", options.transport,
                 "host transport: shm, gloo or auto (default: COHORT_HOST_TRANSPORT, else auto)")
      ->check(CLI::IsMember({"shm", "gloo", "auto"}));
  app.add_option("--issue-cost", options.issue_cost,
                 "first time the host cost of issuing a small all-reduce, this many times")
      ->check(cli::whole(0, 1e7));
  CLI11_PARSE(app, argc, argv);

  try {
    int status = 0;
    cohort::WorldOptions world_options;
    if (options.transport == "shm") world_options.host_transport = cohort::HostTransport::shm;
    if (options.transport == "gloo") world_options.host_transport = cohort::HostTransport::gloo;
    if (options.transport == "auto") world_options.host_transport = cohort::HostTransport::automatic;
    if (options.ranks > 0) {
      world_options.backend = cohort::BackendChoice::host;
      cohort::run_local(options.ranks, [&](cohort::World& world) {
        const int rank_status = run(world, options);
        if (world.rank() == 0) status = rank_status;
      }, world_options);
    } else {
      cohort::World world = cohort::init(world_options);
      status = run(world, options);
    }
    return status;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "allreduce_bench: %s\n", error.what());
    return 2;
  }
}
