// allreduce_bench: collective bandwidth through cohort, in the table nccl-tests prints, against
// the raw backend.
//
//   cohortrun --nproc-per-node 8 build/default/benchmarks/allreduce_bench -b 8 -e 8G -f 2
//   cohortrun --nproc-per-node 8 allreduce_bench -b 8 -e 8G -f 2 --format nccl-tests   # parsers
//   cohortrun --nproc-per-node 8 allreduce_bench --collective all -b 1M -e 1G --min-busbw 200
//   build/ci/benchmarks/allreduce_bench --ranks 4 -b 1K -e 32M        # 4 host ranks, threads
//
// Every collective cohort has (all-reduce, reduce-scatter, all-gather, broadcast: cohort has no
// reduce or all-to-all), out of place and in place, sizes as nccl-tests counts them (the whole
// message: a reduce-scatter's input, an all-gather's output), checked element by element (-c).
// Times are nccl-tests' mean (--stat mean: -n iterations of -m collectives issued back to back,
// then one wait) or the median of iterations each waited for (--stat median), and over ranks
// the mean, rank 0's, the minimum or the maximum (-a 1, 0, 2, 3). busbw = algbw x the
// collective's factor (2(n-1)/n all-reduce, (n-1)/n reduce-scatter and all-gather, 1
// broadcast), as nccl-tests defines it; GB/s are 1e9 bytes per second.
// --format cohort (the default) adds the transport, the backend called directly on the same
// communicator and buffers (all-reduce on NCCL or Gloo: ncclAllReduce, gloo::allreduce), the
// paired ratio of the two, and on the host the memcpy ceiling (every rank copying the same bytes
// at once); --format nccl-tests prints only nccl-tests' columns, so that its parsers read it.
// Exit status: 0, 1 when a value was wrong, 2 for a usage error, 3 when the average bus bandwidth
// is below --min-busbw (or below 90% of NCCL_TESTS_MIN_BW, nccl-tests' rule).
// --issue-cost N first times the host cost of issuing one small all-reduce (the call alone, no
// synchronization; medians of N) through cohort and raw, and counts the threads the system
// created meanwhile (/proc/stat "processes"), to show whether a collective starts a thread.

#include "common/bench_common.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/version.hpp>

#include <gloo/allreduce.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <CLI/CLI.hpp>
#include <cli_checks.hpp>
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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
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
namespace cli = cohort::cli;

struct Options {
  std::string min_bytes = "32M";
  std::string max_bytes = "32M";
  double step_factor = 2.0;
  std::string step_bytes;  // -i: a fixed increment instead of -f
  int iters = 20;
  int warmup = 5;
  int agg_iters = 1;
  int check = 1;
  int average = 1;  // over ranks: 0 rank 0, 1 mean, 2 min, 3 max
  int blocking = 0;
  int graph = 0;
  int root = 0;
  std::string collective = "all_reduce";
  std::string stat;  // mean or median; "": mean for --format nccl-tests, median for cohort
  std::string format = "cohort";
  std::string dtype = "float";
  std::string op = "sum";
  double min_busbw = 0.0;
  int ranks = 0;          // host ranks as threads when not launched by a launcher
  std::string transport;  // host transport: shm, gloo or auto (unset: COHORT_HOST_TRANSPORT)
  std::string json;
  int issue_cost = 0;  // iterations of the host-cost measurement; 0: none
  std::vector<std::string> command_line;
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

/// Memory for one benchmark buffer: host memory, or CUDA memory for the NCCL backend. Uploads
/// and downloads run in `stream`'s order and are waited for: a plain cudaMemcpy runs on the
/// legacy stream, which the collectives' non-blocking stream does not wait for.
class Memory {
 public:
  Memory(cohort::Device device, std::size_t bytes, cohort::Stream stream)
      : device_(device), bytes_(bytes), stream_(std::move(stream)) {
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

  void* data() const {
    return data_;
  }
  void upload(const std::vector<std::byte>& bytes) {
    cohort::detail::write_now(data_, bytes.data(), bytes.size(), stream_);
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> bytes(bytes_);
    cohort::detail::read_after(bytes.data(), data_, bytes_, stream_);
    return bytes;
  }

 private:
  cohort::Device device_;
  std::size_t bytes_;
  cohort::Stream stream_;
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
    case cohort::ReduceOp::sum:
      return sum;
    case cohort::ReduceOp::avg:
      return sum / ranks;
    case cohort::ReduceOp::min:
      return low;
    case cohort::ReduceOp::max:
      return high;
  }
  return 0.0;
}

using cohort::from_double;
using cohort::to_double;

/// Rank `rank`'s contribution to element `i` of a collective's input, as `T`.
std::vector<std::byte> pattern_at(cohort::DType dtype, int rank, std::size_t first,
                                  std::size_t count) {
  std::vector<std::byte> bytes(count * cohort::size_of(dtype));
  cohort::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* values = reinterpret_cast<T*>(bytes.data());
    for (std::size_t i = 0; i < count; ++i)
      values[i] = from_double<T>(contribution(rank, first + i));
  });
  return bytes;
}

/// Elements of `bytes` that differ from `want(i)` (exactly, except avg in 16-bit floats).
std::size_t count_wrong(cohort::DType dtype, cohort::ReduceOp op,
                        const std::vector<std::byte>& bytes,
                        const std::function<double(std::size_t)>& want_at) {
  std::size_t wrong = 0;
  cohort::visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto* values = reinterpret_cast<const T*>(bytes.data());
    const std::size_t count = bytes.size() / sizeof(T);
    for (std::size_t i = 0; i < count; ++i) {
      double want = want_at(i);
      if constexpr (std::is_integral_v<T>) want = std::trunc(want);
      const double got = to_double(values[i]);
      // Exact, except avg in 16-bit floats, which rounds once (a relative 2^-8 for bf16).
      const double tolerance = op == cohort::ReduceOp::avg ? std::abs(want) / 128.0 : 0.0;
      if (std::abs(got - want) > tolerance) ++wrong;
    }
  });
  return wrong;
}

/// The collectives, by the names nccl-tests' programs have (all_reduce_perf...).
enum class Kind { all_reduce, reduce_scatter, all_gather, broadcast };

const char* name_of(Kind kind) {
  switch (kind) {
    case Kind::all_reduce:
      return "all_reduce";
    case Kind::reduce_scatter:
      return "reduce_scatter";
    case Kind::all_gather:
      return "all_gather";
    case Kind::broadcast:
      return "broadcast";
  }
  return "?";
}

bench::Collective bench_kind(Kind kind) {
  switch (kind) {
    case Kind::all_reduce:
      return bench::Collective::all_reduce;
    case Kind::reduce_scatter:
      return bench::Collective::reduce_scatter;
    case Kind::all_gather:
      return bench::Collective::all_gather;
    case Kind::broadcast:
      return bench::Collective::broadcast;
  }
  return bench::Collective::all_reduce;
}

bool reduces(Kind kind) {
  return kind == Kind::all_reduce || kind == Kind::reduce_scatter;
}

std::vector<Kind> kinds_of(const std::string& name) {
  if (name == "all")
    return {Kind::all_reduce, Kind::reduce_scatter, Kind::all_gather, Kind::broadcast};
  if (name == "reduce_scatter") return {Kind::reduce_scatter};
  if (name == "all_gather") return {Kind::all_gather};
  if (name == "broadcast") return {Kind::broadcast};
  return {Kind::all_reduce};
}

/// One size of one collective: the whole message (nccl-tests' "size"), and the count the
/// collective is called with (its "count": per rank for reduce-scatter's output and
/// all-gather's input).
struct Shape {
  std::size_t bytes = 0;  // the whole message
  std::size_t total = 0;  // elements of the whole message
  std::size_t count = 0;  // nccl-tests' count column
};

Shape shape_of(Kind kind, std::size_t bytes, std::size_t element, int ranks) {
  Shape shape;
  const auto n = static_cast<std::size_t>(ranks);
  shape.total = bytes / element;
  if (kind == Kind::reduce_scatter || kind == Kind::all_gather) {
    shape.total = shape.total / n * n;  // a whole share per rank
    shape.count = shape.total / n;
  } else {
    shape.count = shape.total;
  }
  shape.bytes = shape.total * element;
  return shape;
}

/// One timed side (out of place or in place): per iteration times on this rank.
struct Side {
  std::vector<double> us;  // per collective, one value per iteration (median) or one (mean)
  double time_us = 0.0;    // over ranks as -a says
  std::size_t wrong = 0;   // summed over ranks
  bool checked = false;
};

struct Row {
  Kind kind = Kind::all_reduce;
  Shape shape;
  int root = -1;
  Side oop, ip;
  std::optional<double> raw_us;     // the backend called directly (cohort format, all-reduce)
  std::optional<double> ratio;      // paired raw / cohort in place
  std::optional<double> memcpy_us;  // host only
  bench::Spread ip_spread;          // this rank's in-place iterations (us)
};

double algbw(std::size_t bytes, double us) {
  return cohort::bench::algbw_gbps(static_cast<double>(bytes), us * 1e-6);
}

/// Every rank's `value` through the store, reduced as nccl-tests' -a says: 0 rank 0's, 1 the
/// mean, 2 the minimum, 3 the maximum. Keys are unique per call.
double over_ranks(cohort::World& world, const std::string& key, double value, int how) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  const std::vector<std::string> all = world.group().all_gather(key, text.str());
  std::vector<double> values;
  for (const std::string& v : all) values.push_back(std::stod(v));
  switch (how) {
    case 0:
      return values.front();
    case 2:
      return *std::min_element(values.begin(), values.end());
    case 3:
      return *std::max_element(values.begin(), values.end());
    default:
      return bench::mean(values);
  }
}

double sum_over_ranks(cohort::World& world, const std::string& key, double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  double sum = 0.0;
  for (const std::string& v : world.group().all_gather(key, text.str())) sum += std::stod(v);
  return sum;
}

/// The backend called directly, in place, on the communicator's own handle.
class RawBackend {
 public:
  RawBackend(cohort::Communicator& comm, cohort::DType dtype, cohort::ReduceOp op)
      : comm_(comm), dtype_(dtype), op_(op) {}

  /// Enqueues the all-reduce and waits for it: cudaStreamSynchronize on GPUs, then the error
  /// check an NCCL user makes (ncclCommGetAsyncError), as cohort's timing includes work.wait().
  void all_reduce(void* data, std::size_t count, const cohort::Stream& stream) {
    enqueue(data, count, stream);
    stream.synchronize();
    collect_error();
  }

  /// After a finished all-reduce: NCCL's asynchronous error, which cohort's work.wait() collects
  /// too. Nothing for Gloo, whose call returned it.
  void collect_error() {
#if COHORT_WITH_CUDA
    if (comm_.backend() != cohort::Backend::nccl) return;
    ncclResult_t result = ncclSuccess;
    ncclCommGetAsyncError(static_cast<ncclComm_t>(comm_.native_handle()), &result);
    COHORT_CHECK(result == ncclSuccess, cohort::NcclError,
                 std::string("raw ncclAllReduce failed: ") + ncclGetErrorString(result));
#endif
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
    static constexpr ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat64, ncclFloat16, ncclBfloat16,
                                                ncclInt32,   ncclInt64,   ncclUint8};
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

/// Mean of a value over ranks, through the store (keys unique per call).
double mean_over_ranks(cohort::World& world, const std::string& key, double value) {
  return over_ranks(world, key, value, 1);
}

/// --issue-cost: the host time of issuing one all-reduce of 4 floats, cohort against raw.
/// `raw`: the backend's own library, or null where there is none (shared memory).
void report_issue_cost(cohort::World& world, RawBackend* raw, const cohort::Stream& stream,
                       int iterations) {
  Memory buffer(world.device(), 4 * sizeof(float), stream);
  buffer.upload(pattern_at(cohort::DType::f32, world.rank(), 0, 4));
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
      raw->collect_error();  // as cohort's work.wait() above: both timed alike, the call alone
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
    std::printf(
        "# host cost of issuing one all-reduce of 4 floats (median of %d, mean over "
        "ranks): cohort %.2f us, %s; threads created system-wide per collective on "
        "rank 0: %.2f\n",
        iterations, cohort_median, raw_text.c_str(),
        clones < 0 ? -1.0 : static_cast<double>(clones) / collectives);
  }
}

/// "host" or the GPU's PCI address, and its name, for nccl-tests' device lines.
std::pair<std::string, std::string> device_words(const cohort::World& world) {
  if (world.device().is_host()) {
    return {"host", machine_line() + ", " + std::string(to_string(world.backend()))};
  }
#if COHORT_WITH_CUDA
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, world.device().index()) == cudaSuccess) {
    char address[32];
    std::snprintf(address, sizeof(address), "%04x:%02x:%02x", properties.pciDomainID,
                  properties.pciBusID, properties.pciDeviceID);
    return {address, properties.name};
  }
#endif
  return {"?", world.device().to_string()};
}

/// The per-process memory the sizes need, checked against what the host has before the run.
void check_memory(const Options& options, std::size_t max_bytes, int ranks_here, bool host) {
  if (!host) return;  // device memory: cudaMalloc's own error names the size
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  unsigned long long available_kib = 0;
  while (meminfo >> key) {
    if (key == "MemAvailable:") {
      meminfo >> available_kib;
      break;
    }
    meminfo.ignore(1 << 20, '\n');
  }
  if (available_kib == 0) return;
  // Input, output and the memcpy scratch (cohort format) of the largest size, per rank.
  const double buffers = options.format == "cohort" ? 3.0 : 2.0;
  const double need = buffers * static_cast<double>(max_bytes) * ranks_here;
  const double have = static_cast<double>(available_kib) * 1024.0;
  if (need > have) {
    char text[256];
    std::snprintf(text, sizeof(text),
                  "-e %s needs about %.1f GiB of host memory in this process (%d rank(s) x %.0f "
                  "buffers of %.1f GiB) but %.1f GiB is available: lower -e or run fewer ranks "
                  "per node",
                  options.max_bytes.c_str(), need / 1073741824.0, ranks_here, buffers,
                  static_cast<double>(max_bytes) / 1073741824.0, have / 1073741824.0);
    COHORT_FAIL(cohort::OutOfMemory, text);
  }
}

/// Runs one size of one collective: checks it once, then times out of place and in place.
Row run_size(cohort::World& world, const Options& options, Kind kind, std::size_t bytes,
             cohort::DType dtype, cohort::ReduceOp op, RawBackend& raw, bool raw_supported,
             const cohort::Stream& stream, int sequence) {
  cohort::Communicator& comm = world.comm();
  const int n = world.size();
  const int me = world.rank();
  const std::size_t element = cohort::size_of(dtype);
  Row row;
  row.kind = kind;
  row.shape = shape_of(kind, bytes, element, n);
  row.root = kind == Kind::broadcast ? options.root : -1;
  const std::size_t total = row.shape.total;
  const std::size_t share = row.shape.count;
  const auto offset = static_cast<std::size_t>(me) * (kind == Kind::broadcast ? 0 : share);
  const bool host = world.device().is_host();

  // Buffers: the input of the out-of-place call, and the output, which the in-place call uses
  // as both (a reduce-scatter's input is the whole buffer, its output this rank's share of it;
  // an all-gather's input is this rank's share of its output).
  const std::size_t in_count = kind == Kind::all_gather ? share : total;
  const std::size_t out_count = kind == Kind::reduce_scatter ? share : total;
  Memory input(world.device(), in_count * element, stream);
  Memory output(world.device(), total * element, stream);
  const auto view = [&](Memory& m, std::size_t first, std::size_t count) {
    return cohort::TensorView(static_cast<std::byte*>(m.data()) + first * element, count, dtype,
                              world.device());
  };
  const auto in_view = view(input, 0, in_count);
  const auto out_view = view(output, 0, out_count);
  // In place, nccl-tests' way: the output is the rank's share inside the whole buffer.
  const auto whole = view(output, 0, total);
  const auto mine = view(output, offset, share);

  auto issue_oop = [&]() -> cohort::Work {
    switch (kind) {
      case Kind::all_reduce:
        return comm.all_reduce(in_view, out_view, op, stream);
      case Kind::reduce_scatter:
        return comm.reduce_scatter(in_view, out_view, op, stream);
      case Kind::all_gather:
        return comm.all_gather(in_view, whole, stream);
      case Kind::broadcast:
        break;
    }
    // Broadcast has no second buffer: "out of place" copies the input first, as a user would.
    return comm.broadcast(in_view, options.root, stream);
  };
  auto issue_ip = [&]() -> cohort::Work {
    switch (kind) {
      case Kind::all_reduce:
        return comm.all_reduce(whole, op, stream);
      case Kind::reduce_scatter:
        return comm.reduce_scatter(whole, mine, op, stream);
      case Kind::all_gather:
        return comm.all_gather(mine, whole, stream);
      case Kind::broadcast:
        break;
    }
    return comm.broadcast(whole, options.root, stream);
  };

  // The expected values, element by element.
  const auto reduced = [&](std::size_t i) { return expected(op, n, i); };
  auto check = [&](bool in_place) -> std::size_t {
    // Fresh inputs, one collective, then every element of the result.
    if (kind == Kind::all_gather) {
      (in_place ? output : input)
          .upload(in_place ? pattern_at(dtype, me, 0, total)
                           : pattern_at(dtype, me, offset, share));
      if (in_place) {
        // Only this rank's share is its own; the rest is what the collective must overwrite.
        std::vector<std::byte> garbage = pattern_at(dtype, n + 7, 0, total);
        const std::vector<std::byte> own = pattern_at(dtype, me, offset, share);
        std::copy(own.begin(), own.end(),
                  garbage.begin() + static_cast<std::ptrdiff_t>(offset * element));
        output.upload(garbage);
      }
    } else {
      (in_place ? output : input).upload(pattern_at(dtype, me, 0, in_place ? total : in_count));
      if (!in_place) output.upload(pattern_at(dtype, n + 7, 0, out_count));
    }
    if (kind == Kind::broadcast) {
      // Broadcast has one buffer: "out of place" is the input buffer, in place the output one.
      (in_place ? output : input)
          .upload(pattern_at(dtype, me == options.root ? me : n + 7, 0, total));
    }
    cohort::Work work = in_place ? issue_ip() : issue_oop();
    stream.synchronize();
    work.wait();
    const std::vector<std::byte> all =
        kind == Kind::broadcast && !in_place ? input.download() : output.download();
    switch (kind) {
      case Kind::all_reduce:
        return count_wrong(dtype, op, all, reduced);
      case Kind::reduce_scatter: {
        // Out of place: the share is at the start of the output; in place, at the rank's offset.
        const std::size_t first = in_place ? offset : 0;
        const std::vector<std::byte> part(
            all.begin() + static_cast<std::ptrdiff_t>(first * element),
            all.begin() + static_cast<std::ptrdiff_t>((first + share) * element));
        return count_wrong(dtype, op, part, [&](std::size_t i) { return reduced(offset + i); });
      }
      case Kind::all_gather:
        return count_wrong(dtype, cohort::ReduceOp::sum, all, [&](std::size_t i) {
          return contribution(static_cast<int>(i / share), i);
        });
      case Kind::broadcast:
        return count_wrong(dtype, cohort::ReduceOp::sum, all,
                           [&](std::size_t i) { return contribution(options.root, i); });
    }
    return 0;
  };

  // Timing: --stat mean is nccl-tests' (every iteration issued back to back, one wait at the
  // end; with -z each collective waited for and followed by a barrier); --stat median times
  // each iteration of -m collectives on its own.
  const bool by_mean = options.stat == "mean";
  const int agg = options.agg_iters;
  auto run_block = [&](const std::function<cohort::Work()>& issue) -> std::vector<double> {
    comm.barrier(stream).wait();
    stream.synchronize();
    std::vector<double> us;
    if (by_mean) {
      std::vector<cohort::Work> works;
      const auto begin = Clock::now();
      for (int i = 0; i < options.iters * agg; ++i) {
        works.push_back(issue());
        if (options.blocking != 0) {
          stream.synchronize();
          works.back().wait();
          comm.barrier(stream).wait();
        }
      }
      stream.synchronize();
      for (cohort::Work& work : works) work.wait();
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count() /
                   (options.iters * agg));
      return us;
    }
    for (int i = 0; i < options.iters; ++i) {
      std::vector<cohort::Work> works;
      const auto begin = Clock::now();
      for (int k = 0; k < agg; ++k) works.push_back(issue());
      stream.synchronize();
      for (cohort::Work& work : works) work.wait();
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count() / agg);
    }
    return us;
  };

  input.upload(pattern_at(dtype, me, 0, in_count));
  output.upload(pattern_at(dtype, me, 0, total));
  for (int i = 0; i < options.warmup; ++i) {
    issue_oop().wait();
    issue_ip().wait();
    stream.synchronize();
  }
  const std::string key = "bench/" + std::to_string(sequence);
  row.oop.us = run_block(issue_oop);
  row.ip.us = run_block(issue_ip);
  const double oop_here = by_mean ? row.oop.us.front() : median(row.oop.us);
  const double ip_here = by_mean ? row.ip.us.front() : median(row.ip.us);
  row.ip_spread = bench::spread(row.ip.us);
  row.oop.time_us = over_ranks(world, key + "/oop", oop_here, options.average);
  row.ip.time_us = over_ranks(world, key + "/ip", ip_here, options.average);

  if (options.format == "cohort" && kind == Kind::all_reduce && raw_supported) {
    // The backend called directly after each in-place all-reduce, paired under the same load.
    std::vector<double> cohort_us, raw_us;
    for (int i = 0; i < options.iters; ++i) {
      auto begin = Clock::now();
      cohort::Work work = issue_ip();
      stream.synchronize();
      work.wait();
      cohort_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
      begin = Clock::now();
      raw.all_reduce(output.data(), total, stream);
      raw_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
    }
    std::vector<double> paired;
    for (std::size_t i = 0; i < raw_us.size(); ++i) paired.push_back(raw_us[i] / cohort_us[i]);
    row.raw_us = over_ranks(world, key + "/raw", median(raw_us), options.average);
    row.ratio = over_ranks(world, key + "/ratio", median(paired), 1);
  }
  if (options.format == "cohort" && host) {
    // The memory-bandwidth ceiling: every rank copies the same bytes at once.
    std::vector<std::byte> scratch(total * element);
    std::vector<double> copies;
    comm.barrier(stream).wait();
    for (int i = 0; i < options.iters; ++i) {
      const auto begin = Clock::now();
      std::memcpy(scratch.data(), output.data(), scratch.size());
      copies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
    }
    row.memcpy_us = over_ranks(world, key + "/memcpy", median(copies), options.average);
  }
  if (options.check > 0) {
    row.oop.checked = row.ip.checked = true;
    row.oop.wrong = static_cast<std::size_t>(
        sum_over_ranks(world, key + "/w1", static_cast<double>(check(false))));
    row.ip.wrong = static_cast<std::size_t>(
        sum_over_ranks(world, key + "/w2", static_cast<double>(check(true))));
  }
  return row;
}

/// nccl-tests' number formatting: width `width`, fewer decimals as the number grows.
std::string fitted(double value, int width) {
  int power = 0;
  for (double v = 1.0; value >= v && power < 40; v *= 10.0) ++power;
  char text[48];
  if (power < width - 2)
    std::snprintf(text, sizeof(text), "%*.2f", width, value);
  else if (power < width - 1)
    std::snprintf(text, sizeof(text), "%*.1f", width, value);
  else if (power < width + 1)
    std::snprintf(text, sizeof(text), "%*.0f", width, value);
  else
    std::snprintf(text, sizeof(text), "%*.1e", width, value);
  return text;
}

std::string wrong_text(const Side& side, int width) {
  char text[32];
  if (!side.checked) {
    std::snprintf(text, sizeof(text), "%*s", width, "N/A");
  } else {
    std::snprintf(text, sizeof(text), "%*zu", width, side.wrong);
  }
  return text;
}

void print_header(const cohort::World& world, const Options& options, std::size_t min_bytes,
                  std::size_t max_bytes, const std::vector<std::string>& device_lines,
                  const std::string& rounding) {
  const bool nccl = options.format == "nccl-tests";
  const std::string step = options.step_bytes.empty()
                               ? cli::words(options.step_factor) + "(factor)"
                               : std::to_string(*cli::size_bytes(options.step_bytes)) + "(bytes)";
  std::printf("# cohort allreduce_bench %s (%s): %d ranks on %s, %s\n", cohort::version(),
              bench::commit().c_str(), world.size(),
              world.device().is_host() ? "host ranks" : "GPUs",
              std::string(to_string(world.backend())).c_str());
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: 0\n",
      min_bytes, max_bytes, step.c_str(), options.warmup, options.iters, options.agg_iters,
      options.check);
  std::printf(
      "# time: %s of %s, %s over ranks (-a %d)%s\n",
      options.stat == "mean" ? "the mean" : "the median",
      options.stat == "mean" ? "back-to-back iterations (nccl-tests' way)"
                             : "iterations each waited for",
      options.average == 0   ? "rank 0's"
      : options.average == 2 ? "the minimum"
      : options.average == 3 ? "the maximum"
                             : "the mean",
      options.average,
      options.blocking != 0 ? "; blocking (-z 1): each collective waited for, then a barrier" : "");
  if (!rounding.empty()) std::printf("# %s\n", rounding.c_str());
  std::printf("#\n# Using devices\n");
  for (const std::string& line : device_lines) std::printf("%s\n", line.c_str());
  std::printf("#\n");
  if (nccl) {
    std::printf(
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place         "
        " \n",
        "", "", "", "", "");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
    return;
  }
  std::printf("# %14s %10s %12s %6s %6s %5s | %-28s | %-28s | %-13s | %8s\n", "", "", "", "", "",
              "", "out-of-place", "in-place", "raw", "memcpy");
  std::printf("# %14s %10s %12s %6s %6s %5s | %7s %6s %6s %6s | %7s %6s %6s %6s | %6s %6s | %8s\n",
              "collective", "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
              "#wrong", "time", "algbw", "busbw", "#wrong", "busbw", "ratio", "time");
  std::printf("# %14s %10s %12s %6s %6s %5s | %7s %6s %6s %6s | %7s %6s %6s %6s | %6s %6s | %8s\n",
              "", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
              "(GB/s)", "", "(GB/s)", "", "(us)");
}

void print_row(const Options& options, const Row& row, int n) {
  const double factor = bench::bus_factor(bench_kind(row.kind), n);
  const double oop_algbw = algbw(row.shape.bytes, row.oop.time_us);
  const double ip_algbw = algbw(row.shape.bytes, row.ip.time_us);
  const std::string redop = reduces(row.kind) ? options.op : "none";
  if (options.format == "nccl-tests") {
    std::printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
                row.shape.bytes, row.shape.count, options.dtype.c_str(), redop.c_str(), row.root,
                fitted(row.oop.time_us, 7).c_str(), fitted(oop_algbw, 6).c_str(),
                fitted(oop_algbw * factor, 6).c_str(), wrong_text(row.oop, 6).c_str(),
                fitted(row.ip.time_us, 7).c_str(), fitted(ip_algbw, 6).c_str(),
                fitted(ip_algbw * factor, 6).c_str(), wrong_text(row.ip, 6).c_str());
    std::fflush(stdout);
    return;
  }
  const std::string raw_busbw =
      row.raw_us ? fitted(algbw(row.shape.bytes, *row.raw_us) * factor, 6) : std::string("   N/A");
  const std::string ratio = row.ratio ? fitted(*row.ratio, 6) : std::string("   N/A");
  const std::string copy = row.memcpy_us ? fitted(*row.memcpy_us, 8) : std::string("     N/A");
  std::printf(
      "  %14s %10zu %12zu %6s %6s %5d | %7s %6s %6s %6s | %7s %6s %6s %6s | %6s %6s | %8s\n",
      name_of(row.kind), row.shape.bytes, row.shape.count, options.dtype.c_str(), redop.c_str(),
      row.root, fitted(row.oop.time_us, 7).c_str(), fitted(oop_algbw, 6).c_str(),
      fitted(oop_algbw * factor, 6).c_str(), wrong_text(row.oop, 6).c_str(),
      fitted(row.ip.time_us, 7).c_str(), fitted(ip_algbw, 6).c_str(),
      fitted(ip_algbw * factor, 6).c_str(), wrong_text(row.ip, 6).c_str(), raw_busbw.c_str(),
      ratio.c_str(), copy.c_str());
  std::fflush(stdout);
}

int run(cohort::World& world, const Options& options) {
  const auto dtype = cohort::parse_dtype(options.dtype);
  COHORT_EXPECTS(dtype.has_value(), "-d " + options.dtype + ": not a dtype (float, half, ...)");
  cohort::ReduceOp op = cohort::ReduceOp::sum;
  if (options.op == "avg")
    op = cohort::ReduceOp::avg;
  else if (options.op == "min")
    op = cohort::ReduceOp::min;
  else if (options.op == "max")
    op = cohort::ReduceOp::max;
  const std::vector<Kind> kinds = kinds_of(options.collective);
  COHORT_EXPECTS(options.root < world.size(), "-r " + std::to_string(options.root) +
                                                  ": the root must be a rank below " +
                                                  std::to_string(world.size()));

  cohort::Communicator& comm = world.comm();
  const cohort::Stream stream = cohort::Stream::create(world.device());
  const std::size_t element = cohort::size_of(*dtype);
  const std::size_t min_bytes = *cli::size_bytes(options.min_bytes);
  const std::size_t max_bytes = *cli::size_bytes(options.max_bytes);
  const int n = world.size();
  const bool leader = world.rank() == 0;
  const bool raw_supported =
      comm.backend() == cohort::Backend::nccl ||
      (comm.backend() == cohort::Backend::gloo && *dtype != cohort::DType::f16 &&
       *dtype != cohort::DType::bf16 && op != cohort::ReduceOp::avg);
  RawBackend raw(comm, *dtype, op);
  if (options.issue_cost > 0) {
    const bool has_raw =
        comm.backend() == cohort::Backend::nccl || comm.backend() == cohort::Backend::gloo;
    RawBackend raw_f32(comm, cohort::DType::f32, cohort::ReduceOp::sum);
    report_issue_cost(world, has_raw ? &raw_f32 : nullptr, stream, options.issue_cost);
  }

  // nccl-tests' device lines, every rank's, in rank order.
  const auto [address, device_name] = device_words(world);
  char line[512];
  std::snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s",
                world.rank(), 0, static_cast<int>(getpid()), bench::host_name().c_str(),
                world.device().is_host() ? world.local_rank() : world.device().index(),
                address.c_str(), device_name.c_str());
  const std::vector<std::string> device_lines = world.group().all_gather("devices", line);
  const std::vector<std::string> hosts = world.group().all_gather("hosts", bench::host_name());

  // The sizes: -b to -e by -f (or -i), each a whole number of elements; a reduce-scatter or
  // all-gather rounds down to a whole share per rank, and the header says so.
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes;) {
    sizes.push_back(bytes);
    const std::size_t next =
        options.step_bytes.empty()
            ? static_cast<std::size_t>(static_cast<double>(bytes) * options.step_factor)
            : bytes + *cli::size_bytes(options.step_bytes);
    bytes = std::max(next, bytes + element) / element * element;
  }
  std::string rounding;
  for (const Kind kind : kinds) {
    if (kind != Kind::reduce_scatter && kind != Kind::all_gather) continue;
    for (const std::size_t bytes : sizes) {
      if (shape_of(kind, bytes, element, n).bytes != bytes) {
        rounding =
            "reduce_scatter and all_gather round each size down to a whole share per rank "
            "(a multiple of " +
            std::to_string(n) + " ranks x " + std::to_string(element) +
            " bytes): the size column says what ran";
        break;
      }
    }
  }
  if (leader) print_header(world, options, min_bytes, max_bytes, device_lines, rounding);

  std::vector<Row> rows;
  std::size_t total_wrong = 0;
  double busbw_sum = 0.0;
  int busbw_count = 0;
  int sequence = 0;
  for (const Kind kind : kinds) {
    for (const std::size_t bytes : sizes) {
      if (shape_of(kind, bytes, element, n).total == 0) continue;  // smaller than one share
      Row row =
          run_size(world, options, kind, bytes, *dtype, op, raw, raw_supported, stream, sequence++);
      total_wrong += row.oop.wrong + row.ip.wrong;
      const double factor = bench::bus_factor(bench_kind(kind), n);
      busbw_sum +=
          (algbw(row.shape.bytes, row.oop.time_us) + algbw(row.shape.bytes, row.ip.time_us)) *
          factor;
      busbw_count += 2;
      if (leader) print_row(options, row, n);
      rows.push_back(std::move(row));
    }
  }

  const double average_busbw = busbw_count > 0 ? busbw_sum / busbw_count : 0.0;
  // The floor: --min-busbw exactly; NCCL_TESTS_MIN_BW with nccl-tests' own 10% allowance.
  std::optional<double> floor;
  std::string floor_words;
  if (options.min_busbw > 0.0) {
    floor = options.min_busbw;
    floor_words = "--min-busbw " + cli::words(options.min_busbw);
  } else if (const char* env = std::getenv("NCCL_TESTS_MIN_BW"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double value = std::strtod(env, &end);
    COHORT_EXPECTS(end != env && *end == '\0' && std::isfinite(value) && value >= 0.0,
                   std::string("NCCL_TESTS_MIN_BW='") + env + "' is not a bandwidth in GB/s");
    floor = 0.9 * value;
    floor_words = "90% of NCCL_TESTS_MIN_BW=" + std::string(env);
  }
  const bool below = floor && average_busbw < *floor;
  const bool checked = options.check > 0;
  if (leader) {
    if (checked) {
      std::printf("# %-20s : %zu %s\n", "Out of bounds values", total_wrong,
                  total_wrong == 0 ? "OK" : "FAILED");
    } else {
      std::printf("# %-20s : N/A (not checked: -c 0)\n", "Out of bounds values");
    }
    std::printf("# %-20s : %g %s\n", "Avg bus bandwidth", average_busbw,
                !floor  ? ""
                : below ? "FAILED"
                        : "OK");
    if (floor) {
      std::printf("# bandwidth floor: %.4g GB/s (%s): %s\n", *floor, floor_words.c_str(),
                  below ? "FAILED" : "passed");
    }
    if (options.format == "cohort") {
      std::vector<double> ratios;
      for (const Row& row : rows) {
        if (row.shape.bytes >= (1u << 20) && row.ratio) ratios.push_back(*row.ratio);
      }
      if (!ratios.empty()) {
        std::printf("# cohort/raw busbw, median over sizes from 1 MiB: %.3f (%zu sizes)\n",
                    median(ratios), ratios.size());
      }
    }
    std::printf("#\n");
    std::fflush(stdout);
    if (!options.json.empty()) {
      nlohmann::json out =
          bench::provenance("cohort.allreduce_bench/2", options.command_line, hosts);
      out["ranks"] = n;
      out["backend"] = std::string(to_string(comm.backend()));
      out["device"] = world.device().is_host() ? "host" : "cuda";
      out["dtype"] = options.dtype;
      out["op"] = options.op;
      out["statistic"] = options.stat;
      out["over_ranks"] = options.average == 0   ? "rank 0"
                          : options.average == 2 ? "min"
                          : options.average == 3 ? "max"
                                                 : "mean";
      out["iterations"] = options.iters;
      out["aggregated_iterations"] = options.agg_iters;
      out["warmup_iterations"] = options.warmup;
      out["validation"] = checked;
      out["devices"] = device_lines;
      out["records"] = nlohmann::json::array();
      for (const Row& row : rows) {
        const double factor = bench::bus_factor(bench_kind(row.kind), n);
        const auto side = [&](const Side& s) {
          return nlohmann::json{
              {"time_s", s.time_us * 1e-6},
              {"algbw_bytes_per_s", algbw(row.shape.bytes, s.time_us) * 1e9},
              {"busbw_bytes_per_s", algbw(row.shape.bytes, s.time_us) * factor * 1e9},
              {"wrong", s.checked ? nlohmann::json(s.wrong) : nlohmann::json(nullptr)}};
        };
        nlohmann::json record;
        record["collective"] = name_of(row.kind);
        record["bytes"] = row.shape.bytes;
        record["count"] = row.shape.count;
        record["root"] = row.root < 0 ? nlohmann::json(nullptr) : nlohmann::json(row.root);
        record["bus_factor"] = factor;
        record["out_of_place"] = side(row.oop);
        record["in_place"] = side(row.ip);
        record["in_place_iterations_s_rank0"] = bench::spread_json(row.ip_spread, 1e-6);
        record["raw"] = row.raw_us
                            ? nlohmann::json{{"time_s", *row.raw_us * 1e-6},
                                             {"busbw_bytes_per_s",
                                              algbw(row.shape.bytes, *row.raw_us) * factor * 1e9},
                                             {"ratio", *row.ratio}}
                            : nlohmann::json(nullptr);
        record["memcpy_time_s"] =
            row.memcpy_us ? nlohmann::json(*row.memcpy_us * 1e-6) : nlohmann::json(nullptr);
        out["records"].push_back(record);
      }
      out["average_busbw_bytes_per_s"] = average_busbw * 1e9;
      out["busbw_floor_bytes_per_s"] =
          floor ? nlohmann::json(*floor * 1e9) : nlohmann::json(nullptr);
      out["wrong"] = checked ? nlohmann::json(total_wrong) : nlohmann::json(nullptr);
      cli::write_file("--json", options.json, out.dump(2) + "\n");
    }
  }
  if (total_wrong > 0) return 1;
  return below ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 0; i < argc; ++i) options.command_line.emplace_back(argv[i]);
  CLI::App app{
      "allreduce_bench: collective bus bandwidth through cohort, in nccl-tests' table, "
      "against the raw "
      "backend. Exit status: 0; 1 when a value was wrong; 2 for a usage error; 3 when "
      "the average bus bandwidth is below --min-busbw (or 90% of NCCL_TESTS_MIN_BW).",
      "allreduce_bench"};
  cli::conventions(app);
  app.add_option("-b,--minbytes", options.min_bytes, "smallest size (K, M, G suffixes)")
      ->check(cli::size_text());
  app.add_option("-e,--maxbytes", options.max_bytes, "largest size")->check(cli::size_text());
  app.add_option("-f,--stepfactor", options.step_factor, "multiply the size by this each step")
      ->check(cli::number_in(1.0, false, 1024.0, false));
  app.add_option("-i,--stepbytes", options.step_bytes,
                 "add this to the size each step (instead of -f)")
      ->check(cli::size_text());
  app.add_option("-n,--iters", options.iters, "timed iterations per size")
      ->check(cli::whole(1, 1e7));
  app.add_option("-w,--warmup_iters", options.warmup, "untimed iterations per size")
      ->check(cli::whole(0, 1e7));
  app.add_option("-m,--agg_iters", options.agg_iters,
                 "collectives issued back to back per iteration")
      ->check(cli::whole(1, 1e6));
  app.add_option("-c,--check", options.check, "check every element of the results (0: don't)")
      ->check(cli::whole(0, 1));
  app.add_option("-d,--datatype", options.dtype, "element type")
      ->check(cli::one_of({"float", "double", "half", "bfloat16", "int32", "int64", "uint8"}));
  app.add_option("-o,--op", options.op, "reduction of all_reduce and reduce_scatter")
      ->check(cli::one_of({"sum", "avg", "min", "max"}));
  app.add_option("-r,--root", options.root, "broadcast's root rank")->check(cli::whole(0, 1 << 20));
  app.add_option("-a,--average", options.average,
                 "time over ranks: 0 rank 0's, 1 the mean, 2 the minimum, 3 the maximum")
      ->check(cli::whole(0, 3));
  app.add_option("-z,--blocking", options.blocking,
                 "1: wait for each collective and a barrier before the next (--stat mean)")
      ->check(cli::whole(0, 1));
  app.add_option("-G,--cudagraph", options.graph,
                 "CUDA graph launches: refused (cohort never captures collectives)")
      ->check(cli::whole(0, 1e6));
  app.add_option("--collective", options.collective, "which collective, or all")
      ->check(cli::one_of({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all"}));
  app.add_option("--stat", options.stat,
                 "mean (nccl-tests: back-to-back iterations, one wait) or median (each iteration "
                 "waited for); default mean with --format nccl-tests, else median")
      ->check(cli::one_of({"mean", "median"}));
  app.add_option("--format", options.format,
                 "cohort (with transport, raw backend and memcpy columns) or nccl-tests (only its "
                 "columns, for its parsers)")
      ->check(cli::one_of({"cohort", "nccl-tests"}));
  app.add_option("--min-busbw", options.min_busbw,
                 "fail (exit 3) when the average bus bandwidth is below this (GB/s); 0: none")
      ->check(cli::number(0.0, 1e6));
  app.add_option("--ranks", options.ranks,
                 "run this many host ranks as threads (only without a launcher)")
      ->check(cli::whole(1, 256));
  app.add_option("--json", options.json, "write one record per size to this file")
      ->check(cli::writable_file());
  app.add_option("--transport", options.transport,
                 "host transport: shm, gloo or auto (default: COHORT_HOST_TRANSPORT, else auto)")
      ->check(cli::one_of({"shm", "gloo", "auto"}));
  app.add_option("--issue-cost", options.issue_cost,
                 "first time the host cost of issuing a small all-reduce, this many times")
      ->check(cli::whole(0, 1e7));
  if (const std::optional<int> status = cli::parse(app, argc, argv)) return *status;

  // What nccl-tests would refuse, and what it silently gets wrong, refused here with the reason.
  if (options.graph != 0) {
    return cli::usage_error(app, "-G " + std::to_string(options.graph) +
                                     ": cohort never captures collectives into a CUDA graph "
                                     "(docs/design.md, Note [Graph capture]); use -G 0");
  }
  const auto dtype = cohort::parse_dtype(options.dtype);
  const std::size_t element = dtype ? cohort::size_of(*dtype) : 1;
  const std::size_t min_bytes = *cli::size_bytes(options.min_bytes);
  const std::size_t max_bytes = *cli::size_bytes(options.max_bytes);
  if (min_bytes > max_bytes) {
    return cli::usage_error(app, "-b " + options.min_bytes + " is larger than -e " +
                                     options.max_bytes + ": nothing to run");
  }
  for (const auto& [flag, text, bytes] : {std::tuple{"-b", options.min_bytes, min_bytes},
                                          std::tuple{"-e", options.max_bytes, max_bytes}}) {
    if (bytes % element != 0) {
      return cli::usage_error(app, std::string(flag) + " " + text + " is " + std::to_string(bytes) +
                                       " bytes, not a whole number of " + options.dtype +
                                       " elements (" + std::to_string(element) +
                                       " bytes each): use a multiple of " +
                                       std::to_string(element));
    }
  }
  if (app.count("-i") > 0 && app.count("-f") > 0) {
    return cli::usage_error(app, "-i (a fixed step) and -f (a factor) contradict: give one");
  }
  if (const auto refused =
          cli::refuse_unless(app, options.collective == "broadcast" || options.collective == "all",
                             {"-r"}, "applies only to --collective broadcast")) {
    return *refused;
  }
  if (options.stat.empty()) options.stat = options.format == "nccl-tests" ? "mean" : "median";
  if (const auto refused = cli::refuse_unless(app, options.stat == "mean", {"-z"},
                                              "applies only to --stat mean (nccl-tests' timing)")) {
    return *refused;
  }
  const bool launched = cohort::LaunchInfo::from_environment().launcher != cohort::Launcher::none;
  if (launched && options.ranks > 0) {
    return cli::usage_error(
        app,
        "--ranks starts host ranks as threads, but a launcher started this process: every "
        "launched process would run its own world of " +
            std::to_string(options.ranks) + " ranks; drop --ranks (the launcher chose the ranks)");
  }

  try {
    int status = 0;
    cohort::WorldOptions world_options;
    if (options.transport == "shm") world_options.host_transport = cohort::HostTransport::shm;
    if (options.transport == "gloo") world_options.host_transport = cohort::HostTransport::gloo;
    if (options.transport == "auto")
      world_options.host_transport = cohort::HostTransport::automatic;
    if (options.ranks > 0) {
      check_memory(options, max_bytes, options.ranks, true);
      std::fprintf(stderr, "allreduce_bench: starting %d host ranks as threads of this process\n",
                   options.ranks);
      world_options.backend = cohort::BackendChoice::host;
      cohort::run_local(
          options.ranks,
          [&](cohort::World& world) {
            const int rank_status = run(world, options);
            if (world.rank() == 0) status = rank_status;
          },
          world_options);
    } else {
      cohort::World world = cohort::init(world_options);
      check_memory(options, max_bytes, 1, world.device().is_host());
      status = run(world, options);
    }
    return status;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "allreduce_bench: out of memory allocating the buffers of -e %s: lower -e "
                 "or run fewer ranks per node\n",
                 options.max_bytes.c_str());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "allreduce_bench: %s\n", error.what());
    return 1;
  }
}
