// checkpoint_bench: a checkpoint's save and load throughput against the ceiling of the same bytes
// written (with fsync) and read back sequentially in the same folder, and the stall an
// asynchronous save puts on a training step (the step after `save_async`, with the save copied and
// written in the background, against a step with nothing in flight). Host ranks as threads; medians of --repeats runs
// after one warm-up.
//
//     checkpoint_bench --ranks 2 --elements 4000000 --dir /tmp/ckpt-bench

#include "common/bench_common.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/data_parallel_target.hpp>

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
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
  for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
    if (entry.is_regular_file()) drop(entry.path());
  }
}

/// The ceiling: `bytes` written to one new file per rank (each its share, one thread each) and
/// fsynced, then read back.
std::pair<double, double> plain_io(const std::filesystem::path& folder, int ranks, std::size_t bytes,
                                   bool cold) {
  const std::size_t share = bytes / static_cast<std::size_t>(ranks);
  std::vector<std::vector<char>> data(static_cast<std::size_t>(ranks), std::vector<char>(share, 7));
  auto each = [&](auto body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) threads.emplace_back(body, r);
    for (auto& thread : threads) thread.join();
  };
  const auto write_start = Clock::now();
  each([&](int r) {
    const auto path = folder / ("plain-" + std::to_string(r) + ".bin");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    std::size_t done = 0;
    while (done < share) {
      const ssize_t n = ::write(fd, data[static_cast<std::size_t>(r)].data() + done, share - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::fsync(fd);
    ::close(fd);
  });
  const double write_seconds = seconds_since(write_start);
  if (cold) {
    for (int r = 0; r < ranks; ++r) drop_cache(folder / ("plain-" + std::to_string(r) + ".bin"));
  }
  const auto read_start = Clock::now();
  each([&](int r) {
    const auto path = folder / ("plain-" + std::to_string(r) + ".bin");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    std::size_t done = 0;
    while (done < share) {
      const ssize_t n = ::pread(fd, data[static_cast<std::size_t>(r)].data() + done, share - done,
                                static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
  });
  const double read_seconds = seconds_since(read_start);
  for (int r = 0; r < ranks; ++r) std::filesystem::remove(folder / ("plain-" + std::to_string(r) + ".bin"));
  return {write_seconds, read_seconds};
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
  CLI::App app{"Checkpoint save/load throughput vs plain sequential I/O, and the async-save stall"};
  app.add_option("--ranks", ranks, "host ranks (threads)")->check(CLI::Range(1, 64));
  app.add_option("--elements", elements, "f32 parameters (AdamW adds two state arrays)")
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repetitions (after one warm-up)")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "training steps for the stall measurement")->check(CLI::Range(4, 100000));
  app.add_option("--dir", dir, "folder for the files (removed afterwards)");
  app.add_flag("--gather", gather,
               "load: each rank reads a slice of the replicated arrays and the ranks all-gather them");
  app.add_flag("--cold", cold, "drop the files' page cache before each read (reads from the disk)");
  CLI11_PARSE(app, argc, argv);
  const std::filesystem::path folder = std::filesystem::absolute(dir);
  std::filesystem::create_directories(folder);

  std::mutex mutex;
  std::vector<double> save_seconds, load_seconds, plain_write, plain_read, step_plain, step_saving,
      save_call;
  std::size_t checkpoint_bytes = 0;
  cohort::WorldOptions world_options;
  world_options.backend = cohort::BackendChoice::gloo;
  cohort::run_local(ranks, [&](cohort::World& world) {
    cohort::ParamRegistry registry;
    registry.add("weights", {elements});
    cohort::DataParallel dp(world, registry, {.init = [](cohort::DataParallel& d) {
      auto* p = static_cast<float*>(d.param_arena().data());
      for (std::size_t i = 0; i < d.param_arena().count(); ++i) p[i] = 0.001f * static_cast<float>(i % 1000);
    }});
    cohort::AdamW optimizer(cohort::target_of(dp), {.lr = 1e-3f});
    cohort::Checkpointer checkpoints(dp, &optimizer, {.directory = folder / "ckpt", .keep_last = 1,
                                                         .gather_replicated = gather});
    auto step = [&] {
      dp.grad_ready(cohort::ParamHandle{0});
      dp.sync_grads();
      optimizer.step();
      dp.compute_stream().synchronize();
    };
    step();
    for (int repeat = 0; repeat <= repeats; ++repeat) {
      store_barrier(world.store(), "bench/save/" + std::to_string(repeat), world.size(), world.timeout());
      auto start = Clock::now();
      checkpoints.save({repeat, 0, 0, ""});
      const double save = seconds_since(start);
      if (cold) {
        if (world.rank() == 0) drop_cache(folder / "ckpt");
        store_barrier(world.store(), "bench/cold/" + std::to_string(repeat), world.size(), world.timeout());
      }
      start = Clock::now();
      checkpoints.load();
      const double load = seconds_since(start);
      std::pair<double, double> plain{0, 0};
      if (world.rank() == 0) {
        if (checkpoint_bytes == 0) {
          for (const auto& entry : std::filesystem::recursive_directory_iterator(folder / "ckpt")) {
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
      plain_write.push_back(plain.first);
      plain_read.push_back(plain.second);
    }
    // The stall: a step with no save in flight, then save_async followed by a step while the
    // save is copied and written in the background (its copy overlaps the step until the
    // optimizer's write; the writer competes for the cores). The difference is the stall.
    for (int i = 0; i < steps; ++i) {
      auto start = Clock::now();
      step();
      const double plain_step = seconds_since(start);
      start = Clock::now();
      checkpoints.save_async({1000 + i, 0, 0, ""});
      const double call = seconds_since(start);
      step();
      const double saving_step = seconds_since(start);
      checkpoints.wait();  // the next plain step runs with nothing in flight
      store_barrier(world.store(), "bench/stall/" + std::to_string(i), world.size(), world.timeout());
      if (world.rank() == 0 && i > 0) {
        const std::lock_guard lock(mutex);
        step_plain.push_back(plain_step);
        step_saving.push_back(saving_step);
        save_call.push_back(call);
      }
    }
  }, world_options);
  std::filesystem::remove_all(folder);

  const double mib = static_cast<double>(checkpoint_bytes) / (1 << 20);
  const double save = median(save_seconds), load = median(load_seconds);
  const double write = median(plain_write), read = median(plain_read);
  std::printf("checkpoint_bench: %d host ranks, %zu f32 parameters + AdamW state, %.1f MiB of files in %s"
              "%s\n", ranks, elements, mib, folder.string().c_str(), cold ? ", reads from the disk (--cold)" : "");
  if (gather) std::printf("load reads slices of the replicated arrays and all-gathers them (--gather)\n");
  std::printf("%-28s %10s %10s %8s\n", "", "median s", "MiB/s", "of plain");
  std::printf("%-28s %10.4f %10.0f %8s\n", "plain write+fsync", write, mib / write, "");
  std::printf("%-28s %10.4f %10.0f %7.2fx\n", "checkpoint save", save, mib / save, write / save);
  std::printf("%-28s %10.4f %10.0f %8s\n", "plain read", read, mib / read, "");
  std::printf("%-28s %10.4f %10.0f %7.2fx\n", "checkpoint load (all ranks)", load, mib / load, read / load);
  const double step_ms = 1e3 * median(step_plain), saving_ms = 1e3 * median(step_saving);
  std::printf("training step %.3f ms; save_async + the next step %.3f ms (the call itself %.3f ms):\n"
              "save_async stall %.3f ms = %.1f%% of a step (medians)\n",
              step_ms, saving_ms, 1e3 * median(save_call), saving_ms - step_ms,
              100.0 * (saving_ms - step_ms) / step_ms);
  return 0;
}
