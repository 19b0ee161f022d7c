// Round-trip cost of the rendezvous stores: what a barrier or a unique-id exchange pays per call.
//
//   build/ci/benchmarks/store_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <cohort/launch/file_store.hpp>
#include <cohort/launch/memory_store.hpp>
#include <cohort/launch/tcp_store.hpp>

#include "common/benchmark_main.hpp"

#include <benchmark/benchmark.h>

#include <unistd.h>
#include <filesystem>
#include <memory>
#include <string>

namespace {

std::unique_ptr<cohort::Store> make_store(int kind,
                                          std::unique_ptr<cohort::TcpStoreServer>& server) {
  switch (kind) {
    case 0:
      return std::make_unique<cohort::MemoryStore>();
    case 1: {
      cohort::TcpStoreServerOptions server_options;
      server_options.host = "127.0.0.1";
      server_options.port = 0;
      server = std::make_unique<cohort::TcpStoreServer>(server_options);
      cohort::TcpStoreOptions client_options;
      client_options.host = "127.0.0.1";
      client_options.port = server->port();
      return std::make_unique<cohort::TcpStore>(client_options);
    }
    default: {
      const auto root = std::filesystem::temp_directory_path() / "cohort-store-bench";
      return std::make_unique<cohort::FileStore>(root, "run-" + std::to_string(getpid()));
    }
  }
}

const char* kStoreNames[] = {"memory", "tcp", "file"};

void BM_SetGet(benchmark::State& state) {
  std::unique_ptr<cohort::TcpStoreServer> server;
  const auto store = make_store(static_cast<int>(state.range(0)), server);
  const std::string value(static_cast<std::size_t>(state.range(1)), 'x');
  for (auto _ : state) {
    store->set("key", value);
    benchmark::DoNotOptimize(store->get("key"));
  }
  state.SetLabel(kStoreNames[state.range(0)]);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * state.range(1));
}
BENCHMARK(BM_SetGet)->ArgsProduct({{0, 1, 2}, {8, 128, 64 << 10}})->UseRealTime();

void BM_Add(benchmark::State& state) {
  std::unique_ptr<cohort::TcpStoreServer> server;
  const auto store = make_store(static_cast<int>(state.range(0)), server);
  for (auto _ : state) {
    benchmark::DoNotOptimize(store->add("counter", 1));
  }
  state.SetLabel(kStoreNames[state.range(0)]);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_Add)->DenseRange(0, 2)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  return cohort::bench::benchmark_main(
      argc, argv, "store_bench",
      "store_bench: the round-trip cost of the rendezvous stores (memory, file, TCP), what a "
      "barrier or a unique-id exchange pays per call.",
      "  store_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true\n");
}
