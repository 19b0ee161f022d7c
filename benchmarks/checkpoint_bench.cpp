// checkpoint_bench: a checkpoint's save against the same bytes written plainly (with fsync); a
// start-up load against a DCP-style load of the same state, measured in the same run; a live
// load (a rollback, which checks every byte before it writes one) and plain reads for reference;
// and the time an asynchronous save takes from training.
//
// Each load goes into a new DataParallel and AdamW on every rank (new arenas, initialized, as at
// a program's start). The start-up load is the Checkpointer's (Note [Start-up load]); the
// DCP-style load is PyTorch DCP's way, written out here: every rank reads the manifest, then
// reads each piece of each array it needs into a temporary allocated for it, copies the part it
// needs into place and frees the temporary, with no checksum (torch.distributed.checkpoint's
// FileSystemReader: `torch.load` of the item into a new tensor, then `copy_`). Both take every
// rank's time from a barrier; the load's time is the slowest rank's. The two alternate in turn
// (which goes first alternates too); medians of --repeats runs after one warm-up, and the median
// of the ratios of each run's pair. With --cold every load reads from the disk: the files' pages
// are dropped first (posix_fadvise DONTNEED; --drop-caches: the whole page cache, as root), and
// the share of their pages still resident afterwards is printed.
//
// The stall: `--window` steps after `save_async` (with the save written in the background),
// plus the wait for it, against as many steps with nothing in flight. A step is the all-reduce
// of the gradients and AdamW's update, plus `--compute-ms` of work on the CPU (a fixed amount of
// arithmetic, timed once before the run), as in host training. Host ranks as threads.
//
//     checkpoint_bench --ranks 4 --elements 4000000 --dir /tmp/ckpt-bench [--cold]

#include "common/bench_common.hpp"

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/checkpoint/manifest.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/memory/detail/stream_copy.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/data_parallel_target.hpp>

#include <CLI/CLI.hpp>
#include <cli_checks.hpp>

#ifdef COHORT_CHECKPOINT_BENCH_GPU
#include <layers/math.hpp>
#endif

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
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
void read_range(const std::filesystem::path& path, char* into, std::size_t size,
                std::uint64_t offset = 0) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::size_t done = 0;
  while (fd >= 0 && done < size) {
    const ssize_t n = ::pread(fd, into + done, size - done, static_cast<off_t>(offset + done));
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (fd >= 0) ::close(fd);
}

PlainTimes plain_io(const std::filesystem::path& folder, int ranks, std::size_t bytes, bool cold) {
  const std::size_t share = bytes / static_cast<std::size_t>(ranks);
  std::vector<std::vector<char>> data(static_cast<std::size_t>(ranks), std::vector<char>(share, 7));
  std::vector<std::vector<char>> whole(
      static_cast<std::size_t>(ranks),
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
  times.read =
      each([&](int r) { read_range(file(r), data[static_cast<std::size_t>(r)].data(), share); });
  drop();
  times.read_all = each([&](int r) {
    for (int other = 0; other < ranks; ++other) {
      read_range(
          file(other),
          whole[static_cast<std::size_t>(r)].data() + share * static_cast<std::size_t>(other),
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

/// The share of the pages of the files under `folder` that are in the page cache now (mincore).
double resident_share(const std::filesystem::path& folder) {
  std::uint64_t pages = 0, resident = 0;
  const long page_size = ::sysconf(_SC_PAGESIZE);
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (!entry.is_regular_file() || entry.file_size() == 0) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const std::size_t size = entry.file_size();
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) continue;
    std::vector<unsigned char> in_core((size + static_cast<std::size_t>(page_size) - 1) /
                                       static_cast<std::size_t>(page_size));
    if (::mincore(map, size, in_core.data()) == 0) {
      pages += in_core.size();
      for (const unsigned char page : in_core) resident += page & 1U;
    }
    ::munmap(map, size);
  }
  return pages == 0 ? 0.0 : static_cast<double>(resident) / static_cast<double>(pages);
}

/// Drops the whole page cache (needs root); false when it cannot.
bool drop_page_cache_globally() {
  ::sync();
  std::ofstream control("/proc/sys/vm/drop_caches");
  control << "3\n";
  control.flush();
  return static_cast<bool>(control);
}

/// PyTorch DCP's load written out (see the top): the manifest, then for each array this rank
/// needs, each piece that holds some of it read whole into a temporary of its own, the part
/// needed copied into place, the temporary freed. No checksum. Returns the bytes read.
std::uint64_t dcp_style_load(const std::filesystem::path& checkpoint, cohort::DataParallel& dp,
                             cohort::Optimizer& optimizer) {
  std::ifstream in(checkpoint / "manifest.json", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const cohort::Manifest manifest = cohort::parse_manifest(text.str());
  struct Need {
    std::string name;
    cohort::TensorView view;
    std::uint64_t offset;  ///< the element of the global array at view[0]
  };
  std::vector<Need> needs{{"params", dp.param_arena(), 0}};
  for (const cohort::OptimizerStateView& state : optimizer.state()) {
    needs.push_back({"optimizer/" + state.name, state.view, optimizer.shard_offset()});
  }
  std::uint64_t read = 0;
  for (const Need& need : needs) {
    const cohort::ManifestArray* array = manifest.find_array(need.name);
    if (array == nullptr) throw std::runtime_error("DCP-style load: no array " + need.name);
    const std::size_t element = cohort::size_of(array->dtype);
    const std::uint64_t begin = std::min(array->count, need.offset);
    const std::uint64_t end = std::min(array->count, need.offset + need.view.count());
    for (const cohort::ManifestPiece& piece : array->pieces) {
      const std::uint64_t from = std::max(begin, piece.element_offset);
      const std::uint64_t to = std::min(end, piece.element_offset + piece.count);
      if (from >= to) continue;
      const std::size_t bytes = piece.count * element;
      std::unique_ptr<unsigned char[]> temporary(new unsigned char[bytes]);  // a new tensor
      read_range(checkpoint / manifest.files[piece.file].name,
                 reinterpret_cast<char*>(temporary.get()), bytes, piece.byte_offset);
      read += bytes;
      auto* place = static_cast<unsigned char*>(need.view.data()) + (from - need.offset) * element;
      const unsigned char* part = temporary.get() + (from - piece.element_offset) * element;
      if (need.view.device().is_host()) {
        std::memcpy(place, part, (to - from) * element);
      } else {
        cohort::detail::write_now(place, part, (to - from) * element, dp.compute_stream());
      }
    }
  }
  return read;
}

/// Medians and ranges of a series of seconds.
struct Series {
  std::vector<double> values;
  double median() const { return cohort::bench::median(values); }
  double min() const {
    return values.empty() ? 0 : *std::min_element(values.begin(), values.end());
  }
  double max() const {
    return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
  }
};

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4;
  std::size_t elements = 4'000'000;
  int repeats = 5;
  int steps = 20;
  std::string dir = "checkpoint_bench_dir";
  bool cold = false;
  bool drop_caches = false;
  bool gather = false;
  bool no_gather = false;
  bool gpu = false;
  int window = 4;
  double compute_ms = 0;
  namespace cli = cohort::cli;
  CLI::App app{
      "checkpoint_bench: checkpoint save against a plain write, the start-up load against "
      "a DCP-style load of the same state, and the stall of the training steps after "
      "save_async",
      "checkpoint_bench"};
  cli::conventions(app);
  app.add_option("--ranks", ranks,
                 "ranks as threads (with --gpu: at most the GPUs; default all of them)")
      ->check(cli::whole(1, 64));
  app.add_flag("--gpu", gpu,
               "one rank per GPU (NCCL): parameters and AdamW state on the device, saved through "
               "pinned memory; --compute-ms is then fp32 GEMMs on the compute stream");
  app.add_option("--elements", elements, "f32 parameters (AdamW adds two state arrays)")
      ->check(cli::whole(1, 1e12));
  app.add_option("--repeats", repeats, "timed repetitions (after one warm-up)")
      ->check(cli::whole(1, 1e6));
  app.add_option("--steps", steps, "asynchronous saves for the stall measurement (0: none)")
      ->check(cli::whole(0, 100000));
  app.add_option("--window", window, "steps after each save_async that count towards its stall")
      ->check(cli::whole(1, 1000));
  app.add_option(
         "--compute-ms", compute_ms,
         "work per step standing for forward and backward, in milliseconds (on an idle core, "
         "or on the GPU with --gpu)")
      ->check(cli::number(0.0, 10000.0));
  app.add_option("--dir", dir, "folder for the files (removed afterwards)");
  app.add_flag(
      "--gather", gather,
      "loads: each rank reads a slice of the replicated arrays and the ranks all-gather them "
      "(gather_replicated = true; unset: the load measures and chooses)");
  app.add_flag("--no-gather", no_gather, "loads: every rank reads the replicated arrays whole")
      ->excludes("--gather");
  app.add_flag("--cold", cold, "drop the files' pages before each read (reads from the disk)");
  app.add_flag("--drop-caches", drop_caches,
               "with --cold: drop the whole page cache (echo 3 > /proc/sys/vm/drop_caches, root) "
               "instead of the files' pages alone");
  if (const std::optional<int> status = cli::parse(app, argc, argv)) return *status;
  const std::filesystem::path folder = std::filesystem::absolute(dir);
  std::filesystem::create_directories(folder);

  const double load_before = load_average();
  const std::uint64_t compute_iterations = gpu ? 0 : calibrate(compute_ms);
  std::mutex mutex;
  Series save_seconds, plain_write, plain_read, plain_read_all, startup_load, dcp_load, live_load,
      pair_ratio, resident_before_loads;
  std::vector<double> step_plain, step_saving, save_call, first_plain, first_saving, save_steps;
  std::vector<std::string> choices;  // rank 0's describe() of each timed start-up load
  int gathered = 0, read_all = 0;
  std::size_t checkpoint_bytes = 0;
  std::uint64_t dcp_bytes_per_rank = 0;
  bool dropped_globally = true;
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
      std::fprintf(stderr,
                   "checkpoint_bench: --ranks %d with --gpu, but this machine has %d GPUs\n", ranks,
                   devices);
      return 2;
    }
    world_options.backend = cohort::BackendChoice::nccl;
#else
    std::fprintf(stderr,
                 "checkpoint_bench: --gpu needs cohort built with CUDA and the examples' "
                 "layers library\n");
    return 2;
#endif
  }
  std::vector<double> seconds_of_rank(static_cast<std::size_t>(ranks));  // of the load timed now
  const std::optional<bool> gather_option = gather      ? std::optional<bool>(true)
                                            : no_gather ? std::optional<bool>(false)
                                                        : std::nullopt;
  cohort::run_local(
      ranks,
      [&](cohort::World& world) {
        cohort::ParamRegistry registry;
        registry.add("weights", {elements});
        cohort::DataParallelOptions dp_options;
        dp_options.bucket_bytes = std::size_t{4} << 20;  // no link measurement at each construction
        if (!gpu) {  // on a GPU the arena starts at zero: the same bytes to save and load
          dp_options.init = [](cohort::DataParallel& d) {
            auto* p = static_cast<float*>(d.param_arena().data());
            for (std::size_t i = 0; i < d.param_arena().count(); ++i)
              p[i] = 0.001f * static_cast<float>(i % 1000);
          };
        }
        cohort::DataParallel dp(world, registry, dp_options);
        cohort::AdamW optimizer(cohort::target_of(dp), {.lr = 1e-3f});
        const std::filesystem::path root = folder / "ckpt";
        cohort::Checkpointer checkpoints(
            dp, &optimizer,
            {.directory = root, .keep_last = 1, .gather_replicated = gather_option});
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
                         static_cast<const float*>(gemm_a.data()),
                         static_cast<const float*>(gemm_b.data()), 0.0f,
                         static_cast<float*>(gemm_c.data()));
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
        cohort::Store& store = world.store();
        auto barrier = [&](const std::string& name) {
          store_barrier(store, "bench/" + name, world.size(), world.timeout());
        };
        // Puts the checkpoint's files in the page cache (warm) or takes them out (cold), on rank 0,
        // then measures how much of them is resident; every rank waits for it.
        auto prepare = [&](const std::filesystem::path& saved, const std::string& name) {
          double share = 0;
          if (world.rank() == 0) {
            if (!cold) {
              read_through_cache(saved);
            } else if (drop_caches) {
              if (!drop_page_cache_globally()) {
                dropped_globally = false;
                drop_cache(saved);
              }
            } else {
              drop_cache(saved);
            }
            share = resident_share(saved);
          }
          barrier(name);
          return share;
        };
        // Every rank's seconds of one load into a new model, from a barrier; the slowest rank's.
        auto timed_on_every_rank = [&](const std::string& name, const std::function<void()>& body) {
          barrier(name + "/start");
          const auto start = Clock::now();
          body();
          const double seconds = seconds_since(start);
          {
            const std::lock_guard lock(mutex);
            seconds_of_rank[static_cast<std::size_t>(world.rank())] = seconds;
          }
          barrier(name + "/end");
          return *std::max_element(seconds_of_rank.begin(), seconds_of_rank.end());
        };
        for (int repeat = 0; repeat <= repeats; ++repeat) {
          const std::string round = std::to_string(repeat);
          barrier("save/" + round);
          auto start = Clock::now();
          const std::filesystem::path saved = checkpoints.save({repeat, 0, 0, ""});
          const double save = seconds_since(start);
          if (world.rank() == 0 && checkpoint_bytes == 0) {
            for (const auto& entry : std::filesystem::directory_iterator(saved)) {
              if (entry.is_regular_file() && entry.path().extension() == ".bin")
                checkpoint_bytes += entry.file_size();
            }
          }
          // The start-up load and the DCP-style load, each into a new model, in turn.
          double startup = 0, dcp = 0, resident = 0;
          std::optional<cohort::LoadReport> report;
          for (int turn = 0; turn < 2; ++turn) {
            const bool startup_turn = (turn == 0) == (repeat % 2 == 0);
            cohort::DataParallel fresh(world, registry, dp_options);
            cohort::AdamW fresh_optimizer(cohort::target_of(fresh), {.lr = 1e-3f});
            fresh.compute_stream().synchronize();
            resident =
                std::max(resident, prepare(saved, "prepare/" + round + "/" + std::to_string(turn)));
            if (startup_turn) {
              cohort::Checkpointer loader(fresh, &fresh_optimizer,
                                          {.directory = root, .gather_replicated = gather_option});
              startup = timed_on_every_rank("startup/" + round, [&] { loader.load(); });
              report = loader.last_load();
            } else {
              std::uint64_t bytes = 0;
              dcp = timed_on_every_rank("dcp/" + round, [&] {
                bytes = dcp_style_load(saved, fresh, fresh_optimizer);
                fresh.compute_stream().synchronize();
              });
              if (world.rank() == 0) dcp_bytes_per_rank = bytes;
            }
          }
          // A live load: this Checkpointer has saved, so it checks every byte before writing.
          prepare(saved, "prepare-live/" + round);
          const double live = timed_on_every_rank("live/" + round, [&] { checkpoints.load(); });
          PlainTimes plain;
          barrier("plain/" + round);
          if (world.rank() == 0) plain = plain_io(folder, world.size(), checkpoint_bytes, cold);
          barrier("plain-done/" + round);
          if (repeat == 0 || world.rank() != 0) continue;  // warm-up; rank 0 reports
          const std::lock_guard lock(mutex);
          save_seconds.values.push_back(save);
          startup_load.values.push_back(startup);
          dcp_load.values.push_back(dcp);
          pair_ratio.values.push_back(dcp / startup);
          live_load.values.push_back(live);
          resident_before_loads.values.push_back(resident);
          plain_write.values.push_back(plain.write);
          plain_read.values.push_back(plain.read);
          plain_read_all.values.push_back(plain.read_all);
          if (report) {
            choices.push_back(report->describe());
            (report->replicated.read == cohort::ReplicatedRead::slice_then_gather ? gathered
                                                                                  : read_all)++;
          }
        }
        // The stall: `window` steps with nothing in flight, then save_async and `window` steps
        // while the save is copied and written in the background, then the wait for it to finish
        // (when it has not yet). The difference of the two is the time the save took from training.
        for (int i = 0; i < steps; ++i) {
          barrier("stall/" + std::to_string(i));
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
      },
      world_options);
  std::filesystem::remove_all(folder);

  const double mib = static_cast<double>(checkpoint_bytes) / (1 << 20);
  std::printf(
      "checkpoint_bench: %d %s ranks, %zu f32 parameters + AdamW state, %.1f MiB of files in %s, "
      "%d repeats after a warm-up\n",
      ranks, gpu ? "GPU" : "host", elements, mib, folder.string().c_str(), repeats);
  if (cold) {
    std::printf(
        "reads from the disk (--cold): %s before each load; at most %.1f%% of the files' pages "
        "were resident then\n",
        drop_caches && dropped_globally ? "the whole page cache dropped"
                                        : "the files' pages dropped",
        100.0 * resident_before_loads.max());
  } else {
    std::printf(
        "reads from the page cache (warm): %.1f%% of the files' pages resident before the loads "
        "(least)\n",
        100.0 * resident_before_loads.min());
  }
  std::printf("%-46s %9s %19s %8s\n", "", "median s", "(min to max)", "MiB/s");
  auto row = [&](const char* name, const Series& series, double bytes_mib,
                 const std::string& tail) {
    std::printf("%-46s %9.4f (%7.4f to %7.4f) %8.0f %s\n", name, series.median(), series.min(),
                series.max(), bytes_mib / series.median(), tail.c_str());
  };
  char text[160];
  row("plain write+fsync (one file per rank)", plain_write, mib, "");
  std::snprintf(text, sizeof(text), "%.2fx of the plain write",
                plain_write.median() / save_seconds.median());
  row("checkpoint save", save_seconds, mib, text);
  row("DCP-style load (temporary + copy, unchecked)", dcp_load, mib, "");
  std::snprintf(text, sizeof(text), "%.2fx of DCP-style (ratio of medians)",
                dcp_load.median() / startup_load.median());
  row("start-up load (into the arenas, then checked)", startup_load, mib, text);
  std::printf("%-46s %9.2fx (%.2fx to %.2fx): median of each run's DCP-style s / start-up s\n",
              "start-up load against DCP-style, paired", pair_ratio.median(), pair_ratio.min(),
              pair_ratio.max());
  std::snprintf(text, sizeof(text), "%.2fx of DCP-style", dcp_load.median() / live_load.median());
  row("live load (checked before anything is written)", live_load, mib, text);
  row("plain read (each rank its file)", plain_read, mib, "");
  row("plain read, all files by each rank", plain_read_all, mib, "");
  std::printf("DCP-style reads %.1f MiB per rank\n",
              static_cast<double>(dcp_bytes_per_rank) / (1 << 20));
  std::printf(
      "start-up load's choice: slice then all-gather in %d of %d runs, read all in %d; the last:\n "
      " %s\n",
      gathered, gathered + read_all, read_all, choices.empty() ? "(none)" : choices.back().c_str());
  if (!step_plain.empty()) {
    const double step_ms = 1e3 * median(first_plain);
    const double extra_ms = 1e3 * (median(step_saving) - median(step_plain));
    const double first_ms = 1e3 * (median(first_saving) - median(first_plain));
    std::printf(
        "training step %.3f ms (%.1f ms of it compute); the save_async call %.3f ms;\n"
        "first step after save_async: +%.3f ms = %.1f%% of a step;\n"
        "%d steps after save_async plus the wait for the save: +%.3f ms = %.1f%% of one step "
        "(%.2f%% per step); the save was done after %.0f steps (medians)\n",
        step_ms, compute_ms, 1e3 * median(save_call), first_ms, 100.0 * first_ms / step_ms, window,
        extra_ms, 100.0 * extra_ms / step_ms, 100.0 * extra_ms / step_ms / window,
        median(save_steps));
  }
  std::printf("%s; 1-minute load average %.2f before, %.2f after\n",
              cohort::bench::machine_line().c_str(), load_before, load_average());
  return 0;
}
