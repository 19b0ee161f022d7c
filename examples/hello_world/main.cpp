/// hello_world: every rank says where it runs, and rank 0 lists them all.
///
///     cohortrun --nproc-per-node 4 ./hello_world
///
/// It reads its place in the run from the launcher's variables (`LaunchInfo`), meets the other
/// ranks through the rendezvous store (`connect_store`), and leaves through a store barrier.

#include <cohort/core/error.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/rendezvous.hpp>
#include <cohort/launch/store.hpp>

#include <unistd.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr cohort::Milliseconds kTimeout = std::chrono::seconds(60);

std::string host_name() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof buffer - 1) != 0) return "unknown-host";
  return buffer;
}

std::string rank_key(int rank) {
  return "hello/rank/" + std::to_string(rank);
}

struct RankLine {
  std::string host;
  std::string pid;
  std::string local_rank;
};

RankLine parse_line(const std::string& text) {
  RankLine line;
  std::istringstream in(text);
  in >> line.host >> line.pid >> line.local_rank;
  return line;
}

void print_table(const std::vector<RankLine>& lines) {
  std::ostringstream table;
  table << std::left << std::setw(6) << "rank" << std::setw(24) << "host" << std::setw(10) << "pid"
        << "local rank\n";
  for (std::size_t rank = 0; rank < lines.size(); ++rank) {
    table << std::left << std::setw(6) << rank << std::setw(24) << lines[rank].host << std::setw(10)
          << lines[rank].pid << lines[rank].local_rank << '\n';
  }
  std::cout << table.str() << std::flush;
}

int run() {
  const cohort::LaunchInfo info = cohort::LaunchInfo::from_environment();
  cohort::set_process_log_rank(info.rank);
  COHORT_LOG(info) << info.describe();
  const auto store = cohort::connect_store(info, kTimeout);

  store->set(rank_key(info.rank), host_name() + " " + std::to_string(::getpid()) + " " +
                                      std::to_string(info.local_rank));
  cohort::store_barrier(*store, "hello", info.world_size, kTimeout);

  std::vector<RankLine> lines;
  if (info.rank == 0) {
    std::set<std::string> hosts;
    for (int rank = 0; rank < info.world_size; ++rank) {
      lines.push_back(parse_line(store->get(rank_key(rank))));
      hosts.insert(lines.back().host);
    }
    store->set("hello/seen", std::to_string(lines.size()) + " " + std::to_string(hosts.size()));
  }
  // What rank 0 gathered: "<ranks> <hosts>".
  std::istringstream seen(store->get("hello/seen"));
  int ranks_seen = 0;
  int hosts_seen = 0;
  seen >> ranks_seen >> hosts_seen;

  const std::string launcher = info.launcher == cohort::Launcher::none
                                   ? "without a launcher"
                                   : "via " + std::string(cohort::to_string(info.launcher));
  std::ostringstream greeting;
  greeting << "rank " << info.rank << " of " << info.world_size << " (local " << info.local_rank
           << " of " << info.local_world_size << ", node " << info.node_rank << " of "
           << info.num_nodes << ") " << launcher << ": sees " << ranks_seen << " ranks on "
           << hosts_seen << " host(s) through " << store->describe() << '\n';
  std::cout << greeting.str() << std::flush;
  if (info.rank == 0) print_table(lines);

  // Rank 0 may host the store (under torchrun or srun): it leaves only after everyone is done.
  store->set("hello/done/" + std::to_string(info.rank), "1");
  if (info.rank == 0) {
    std::vector<std::string> done;
    for (int rank = 1; rank < info.world_size; ++rank) {
      done.push_back("hello/done/" + std::to_string(rank));
    }
    store->wait(done, kTimeout);
  }
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const cohort::Error& error) {
    std::cerr << "hello_world: " << error.what() << '\n';
    return 1;
  }
}
