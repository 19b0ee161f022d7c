// checkpoint_bench: a checkpoint's save and load throughput against the ceiling of the same bytes
// written (with fsync) and read back sequentially in the same folder, and the time an
// asynchronous save takes from training: `--window` steps after `save_async` (with the save copied
// and written in the background), plus the wait for it to finish if it has not, against as many
// steps with nothing in flight, measured in turn. A step is the all-reduce of the gradients and
// AdamW's update, plus `--compute-ms` of forward and backward work on the CPU (a fixed amount of
// arithmetic, timed once before the run), as in host training. Host ranks as threads; medians of
// --repeats runs after one warm-up.
//
//     checkpoint_bench --ranks 2 --elements 4000000 --dir /tmp/ckpt-bench

#include "common/bench_common.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/data_parallel_target.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>

#ifdef COHORT_CHECKPOINT_BENCH_GPU
#include <layers/math.hpp>
#endif

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using cohort::bench::median;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Drops the page cache of `path`, a file or every file under a folder (they are fsynced, so
/// their pages are clean): the next read comes from the disk, as after a restart elsewhere.
void drop_cache(const std::filesystem::path& path) {
  auto drop = [](const std::filesystem::path& file) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  };
  if (!std::filesystem::is_directory(path)) return drop(path);
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.is_regular_file()) drop(entry.path());
  }
}

/// The ceilings, in seconds: `bytes` written to one new file per rank (each its share, one thread
/// each) and fsynced; read back, each thread its file; and read back whole by every thread (the
/// bytes each rank must hold when the arrays are replicated).
struct PlainTimes {
  double write = 0;
  double read = 0;
  double read_all = 0;
};

/// `size` bytes of `path` from `offset` into `into` with pread(2).
void read_range(const std::filesystem::path& path, char* into, std::size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::size_t done = 0;
  while (fd >= 0 && done < size) {
    const ssize_t n = ::pread(fd, into + done, size - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (fd >= 0) ::close(fd);
}

PlainTimes plain_io(const std::filesystem::path& folder, int ranks, std::size_t bytes, bool cold) {
  const std::size_t share = bytes / static_cast<std::size_t>(ranks);
  std::vector<std::vector<char>> data(static_cast<std::size_t>(ranks), std::vector<char>(share, 7));
  std::vector<std::vector<char>> whole(static_cast<std::size_t>(ranks),
                                       std::vector<char>(share * static_cast<std::size_t>(ranks), 7));
  auto file = [&](int r) { return folder / ("plain-" + std::to_string(r) + ".bin"); };
  auto each = [&](auto body) {
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) threads.emplace_back(body, r);
    for (auto& thread : threads) thread.join();
    return seconds_since(start);
  };
  auto drop = [&] {
    if (!cold) return;
    for (int r = 0; r < ranks; ++r) drop_cache(file(r));
  };
  PlainTimes times;
  times.write = each([&](int r) {
    const int fd = ::open(file(r).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    std::size_t done = 0;
    while (done < share) {
      const ssize_t n = ::write(fd, data[static_cast<std::size_t>(r)].data() + done, share - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::fsync(fd);
    ::close(fd);
  });
  drop();
  times.read = each([&](int r) { read_range(file(r), data[static_cast<std::size_t>(r)].data(), share); });
  drop();
  times.read_all = each([&](int r) {
    for (int other = 0; other < ranks; ++other) {
      read_range(file(other), whole[static_cast<std::size_t>(r)].data() + share * static_cast<std::size_t>(other),
                 share);
    }
  });
  for (int r = 0; r < ranks; ++r) std::filesystem::remove(file(r));
  return times;
}

/// Reads every file in `folder` once (the checkpoint's files are written around the page cache;
/// this puts them in it, as the plain write leaves its file, when the reads are not --cold).
void read_through_cache(const std::filesystem::path& folder) {
  std::vector<char> chunk(std::size_t{4} << 20);
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    while (::read(fd, chunk.data(), chunk.size()) > 0) {
    }
    ::close(fd);
  }
}

/// The first field of /proc/loadavg (the 1-minute load average), or -1.
double load_average() {
  double load = -1;
  if (std::FILE* file = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(file, "%lf", &load) != 1) load = -1;
    std::fclose(file);
  }
  return load;
}

/// A fixed amount of floating-point work standing for a step's forward and backward on the CPU.
double compute(std::uint64_t iterations, double seed) {
  double a = seed, b = 1.0 - seed;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    a = a * 0.999999 + b * 1e-6;
    b = b * 0.999998 + a * 2e-6;
  }
  return a + b;
}

/// Iterations of `compute` that take about `milliseconds` on this core now (median of 5 tries).
std::uint64_t calibrate(double milliseconds) {
  if (milliseconds <= 0) return 0;
  constexpr std::uint64_t kProbe = 2'000'000;
  std::vector<double> seconds;
  volatile double sink = 0;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    sink = sink + compute(kProbe, 0.25);
    seconds.push_back(seconds_since(start));
  }
  return static_cast<std::uint64_t>(milliseconds * 1e-3 / median(seconds) * kProbe);
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2;
  std::size_t elements = 4'000'000;
  int repeats = 5;
  int steps = 20;
  std::string dir = "checkpoint_bench_dir";
  bool cold = false;
  bool gather = false;
  bool no_gather = false;
  bool gpu = false;
  int window = 4;
  double compute_ms = 0;
  namespace cli = cohort::cli;
  CLI::App app{"checkpoint_bench: checkpoint save and load throughput against plain sequential "
               "I/O of the same bytes, and the stall of the training steps after save_async",
               "checkpoint_bench"};
  cli::conventions(app);
  app.add_option("--ranks", ranks, "ranks as threads (with --gpu: at most the GPUs; default all of them)")
      ->check(cli::whole(1, 64));
  app.add_flag("--gpu", gpu,
               "one rank per GPU (NCCL): parameters and AdamW state on the device, saved through "
               "pinned memory; --compute-ms is then fp32 GEMMs on the compute stream");
  app.add_option("--elements", elements, "f32 parameters (AdamW adds two state arrays)")
      ->check(cli::whole(1, 1e12));
  app.add_option("--repeats", repeats, "timed repetitions (after one warm-up)")
      ->check(cli::whole(1, 1e6));
  app.add_option("--steps", steps, "asynchronous saves for the stall measurement")
      ->check(cli::whole(4, 100000));
  app.add_option("--window", window, "steps after each save_async that count towards its stall")
      ->check(cli::whole(1, 1000));
  app.add_option("--compute-ms", compute_ms,
                 "work per step standing for forward and backward, in milliseconds (on an idle core, "
                 "or on the GPU with --gpu)")
      ->check(cli::number(0.0, 10000.0));
  app.add_option("--dir", dir, "folder for the files (removed afterwards)");
  app.add_flag("--gather", gather,
               "load: each rank reads a slice of the replicated arrays and the ranks all-gather them "
               "(the Checkpointer's default on the shared-memory transport)");
  app.add_flag("--no-gather", no_gather, "load: every rank reads the replicated arrays whole")
      ->excludes("--gather");
  app.add_flag("--cold", cold, "drop the files' page cache before each read (reads from the disk)");
  if (const std::optional<int> status = cli::parse(app, argc, argv)) return *status;
  const std::filesystem::path folder = std::filesystem::absolute(dir);
  std::filesystem::create_directories(folder);

  const double load_before = load_average();
  const std::uint64_t compute_iterations = gpu ? 0 : calibrate(compute_ms);
  std::mutex mutex;
  std::vector<double> save_seconds, load_seconds, plain_write, plain_read, step_plain, step_saving,
      save_call, first_plain, first_saving, save_steps, plain_read_all;
  std::size_t checkpoint_bytes = 0;
  cohort::WorldOptions world_options;
  world_options.backend = cohort::BackendChoice::host;
  if (gpu) {
#ifdef COHORT_CHECKPOINT_BENCH_GPU
    const int devices = cohort::cuda_device_count();
    if (devices == 0) {
      std::fprintf(stderr, "checkpoint_bench: --gpu needs a GPU: %s\n",
                   cohort::cuda_unavailable_reason().c_str());
      return 2;
    }
    if (app.count("--ranks") == 0) ranks = devices;
    if (ranks > devices) {
      std::fprintf(stderr, "checkpoint_bench: --ranks %d with --gpu, but this machine has %d GPUs\n",
                   ranks, devices);
      return 2;
    }
    world_options.backend = cohort::BackendChoice::nccl;
#else
    std::fprintf(stderr, "checkpoint_bench: --gpu needs cohort built with CUDA and the examples' "
                         "layers library\n");
    return 2;
#endif
  }
  // Unset: the Checkpointer's default for the communicator (Note [Checkpoint load]).
  const std::optional<bool> gathered = gather ? std::optional<bool>(true)
                                       : no_gather ? std::optional<bool>(false) : std::nullopt;
  std::string load_mode;
  cohort::run_local(ranks, [&](cohort::World& world) {
    cohort::ParamRegistry registry;
    registry.add("weights", {elements});
    cohort::DataParallelOptions dp_options;
    if (!gpu) {  // on a GPU the arena starts at zero: the same bytes to save and load
      dp_options.init = [](cohort::DataParallel& d) {
        auto* p = static_cast<float*>(d.param_arena().data());
        for (std::size_t i = 0; i < d.param_arena().count(); ++i) p[i] = 0.001f * static_cast<float>(i % 1000);
      };
    }
    cohort::DataParallel dp(world, registry, dp_options);
    cohort::AdamW optimizer(cohort::target_of(dp), {.lr = 1e-3f});
    cohort::Checkpointer checkpoints(dp, &optimizer, {.directory = folder / "ckpt", .keep_last = 1,
                                                         .gather_replicated = gathered});
    if (world.rank() == 0) {
      load_mode = checkpoints.gathers_replicated()
                      ? "each rank reads a slice of the replicated arrays and the ranks all-gather them"
                      : "every rank reads the replicated arrays whole";
      load_mode += gathered ? " (chosen)" : " (the default on this communicator)";
    }
    volatile double sink = 0;
    std::function<void()> device_compute = [] {};
#ifdef COHORT_CHECKPOINT_BENCH_GPU
    // On a GPU: square fp32 GEMMs on the compute stream, as many as take --compute-ms (timed
    // here, median of 5).
    std::optional<layers::Math> math;
    cohort::Buffer gemm_a, gemm_b, gemm_c;
    if (gpu && compute_ms > 0) {
      constexpr int kSide = 1024;
      math.emplace(dp.compute_stream());
      gemm_a = math->allocate_floats(std::size_t{kSide} * kSide);
      gemm_b = math->allocate_floats(std::size_t{kSide} * kSide);
      gemm_c = math->allocate_floats(std::size_t{kSide} * kSide);
      auto gemms = [&](int count) {
        for (int i = 0; i < count; ++i) {
          math->gemm(layers::Transpose::no, layers::Transpose::no, kSide, kSide, kSide, 1.0f,
                     static_cast<const float*>(gemm_a.data()), static_cast<const float*>(gemm_b.data()),
                     0.0f, static_cast<float*>(gemm_c.data()));
        }
      };
      gemms(10);
      dp.compute_stream().synchronize();
      std::vector<double> per_gemm;
      for (int i = 0; i < 5; ++i) {
        const auto start = Clock::now();
        gemms(20);
        dp.compute_stream().synchronize();
        per_gemm.push_back(seconds_since(start) / 20);
      }
      const int count = std::max(1, static_cast<int>(compute_ms * 1e-3 / median(per_gemm)));
      device_compute = [gemms, count] { gemms(count); };
    }
#endif
    auto step = [&] {
      device_compute();
      sink = sink + compute(compute_iterations, 0.25 + 0.01 * world.rank());
      dp.grad_ready(cohort::ParamHandle{0});
      dp.sync_grads();
      optimizer.step();
      dp.compute_stream().synchronize();
    };
    step();
    for (int repeat = 0; repeat <= repeats; ++repeat) {
      store_barrier(world.store(), "bench/save/" + std::to_string(repeat), world.size(), world.timeout());
      auto start = Clock::now();
      const std::filesystem::path saved = checkpoints.save({repeat, 0, 0, ""});
      const double save = seconds_since(start);
      if (world.rank() == 0) {
        if (cold) {
          drop_cache(saved);
        } else {
          read_through_cache(saved);
        }
      }
      store_barrier(world.store(), "bench/cache/" + std::to_string(repeat), world.size(), world.timeout());
      start = Clock::now();
      checkpoints.load();
      const double load = seconds_since(start);
      PlainTimes plain;
      if (world.rank() == 0) {
        if (checkpoint_bytes == 0) {
          for (const auto& entry : std::filesystem::directory_iterator(saved)) {
            if (entry.is_regular_file() && entry.path().extension() == ".bin") checkpoint_bytes += entry.file_size();
          }
        }
      }
      store_barrier(world.store(), "bench/plain/" + std::to_string(repeat), world.size(), world.timeout());
      if (world.rank() == 0) plain = plain_io(folder, world.size(), checkpoint_bytes, cold);
      store_barrier(world.store(), "bench/plain-done/" + std::to_string(repeat), world.size(), world.timeout());
      if (repeat == 0 || world.rank() != 0) continue;  // warm-up; rank 0 reports
      const std::lock_guard lock(mutex);
      save_seconds.push_back(save);
      load_seconds.push_back(load);
      plain_write.push_back(plain.write);
      plain_read.push_back(plain.read);
      plain_read_all.push_back(plain.read_all);
    }
    // The stall: `window` steps with nothing in flight, then save_async and `window` steps while
    // the save is copied and written in the background, then the wait for it to finish (when it
    // has not yet). The difference of the two is the time the save took from training.
    for (int i = 0; i < steps; ++i) {
      store_barrier(world.store(), "bench/stall/" + std::to_string(i), world.size(), world.timeout());
      std::vector<double> plain_steps, saving_steps;
      for (int s = 0; s < window; ++s) {
        const auto start = Clock::now();
        step();
        plain_steps.push_back(seconds_since(start));
      }
      auto start = Clock::now();
      checkpoints.save_async({1000 + i, 0, 0, ""});
      const double call = seconds_since(start);
      int finished_after = -1;  // steps after which the writer was done (rank 0's view)
      for (int s = 0; s < window; ++s) {
        const auto step_start = Clock::now();
        step();
        saving_steps.push_back(seconds_since(step_start));
        if (finished_after < 0 && !checkpoints.save_in_flight()) finished_after = s + 1;
      }
      checkpoints.wait();
      const double saving = seconds_since(start);
      if (world.rank() == 0 && i > 0) {
        double plain = 0;
        for (const double seconds : plain_steps) plain += seconds;
        const std::lock_guard lock(mutex);
        step_plain.push_back(plain);
        step_saving.push_back(saving);
        save_call.push_back(call);
        first_plain.push_back(median(plain_steps));
        first_saving.push_back(saving_steps.front());
        save_steps.push_back(finished_after < 0 ? window + 1 : finished_after);
      }
    }
  }, world_options);
  std::filesystem::remove_all(folder);

  const double mib = static_cast<double>(checkpoint_bytes) / (1 << 20);
  const double save = median(save_seconds), load = median(load_seconds);
  const double write = median(plain_write), read = median(plain_read);
  std::printf("checkpoint_bench: %d host ranks, %zu f32 parameters + AdamW state, %.1f MiB of files in %s"
              "%s\n", ranks, elements, mib, folder.string().c_str(), cold ? ", reads from the disk (--cold)" : "");
  std::printf("load: %s\n", load_mode.c_str());
  std::printf("%-28s %10s %10s %8s\n", "", "median s", "MiB/s", "of plain");
  std::printf("%-28s %10.4f %10.0f %8s\n", "plain write+fsync", write, mib / write, "");
  std::printf("%-28s %10.4f %10.0f %7.2fx\n", "checkpoint save", save, mib / save, write / save);
  std::printf("%-28s %10.4f %10.0f %8s\n", "plain read", read, mib / read, "");
  const double read_all = median(plain_read_all);
  std::printf("%-28s %10.4f %10.0f %8s\n", "plain read, all by each rank", read_all, mib / read_all, "");
  std::printf("%-28s %10.4f %10.0f %7.2fx %.2fx of all by each\n", "checkpoint load (all ranks)", load,
              mib / load, read / load, read_all / load);
  const double step_ms = 1e3 * median(first_plain);
  const double extra_ms = 1e3 * (median(step_saving) - median(step_plain));
  const double first_ms = 1e3 * (median(first_saving) - median(first_plain));
  std::printf("training step %.3f ms (%.1f ms of it compute); the save_async call %.3f ms;\n"
              "first step after save_async: +%.3f ms = %.1f%% of a step;\n"
              "%d steps after save_async plus the wait for the save: +%.3f ms = %.1f%% of one step "
              "(%.2f%% per step); the save was done after %.0f steps (medians)\n",
              step_ms, compute_ms, 1e3 * median(save_call), first_ms, 100.0 * first_ms / step_ms, window,
              extra_ms, 100.0 * extra_ms / step_ms, 100.0 * extra_ms / step_ms / window, median(save_steps));
  std::printf("%s; 1-minute load average %.2f before, %.2f after\n", cohort::bench::machine_line().c_str(),
              load_before, load_average());
  return 0;
}
