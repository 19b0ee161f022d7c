#include "comm/diagnosis.hpp"

#include "comm/call_signature.hpp"

#include <cohort/core/logging.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace cohort::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t unix_millis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// "node 1 (ranks 2, 3)": node `node` and the global ranks of its members in `context`.
std::string node_with_ranks(const CommContext& context, int node) {
  std::string ranks;
  int count = 0;
  for (int member = 0; member < context.size(); ++member) {
    if (context.placement.member_nodes[static_cast<std::size_t>(member)] == node) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(context.global_rank(member));
      ++count;
    }
  }
  return "node " + std::to_string(node) + (count == 1 ? " (rank " : " (ranks ") + ranks + ")";
}

/// Note [Naming an unreachable node]: a node whose every member is silent is named as a whole,
/// since that is what a cut link or a dead host looks like; `silent[m]` says whether member m
/// did not answer. Empty when the nodes are unknown (NCCL communicators do not record them).
std::string silent_nodes(const CommContext& context, const std::vector<bool>& silent) {
  if (context.placement.member_nodes.size() != static_cast<std::size_t>(context.size())) return "";
  const int mine = context.placement.member_nodes[static_cast<std::size_t>(context.rank())];
  std::vector<int> nodes(context.placement.member_nodes);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::string text;
  for (const int node : nodes) {
    bool all_silent = node != mine;
    for (int member = 0; member < context.size() && all_silent; ++member) {
      if (context.placement.member_nodes[static_cast<std::size_t>(member)] == node) {
        all_silent = silent[static_cast<std::size_t>(member)];
      }
    }
    if (all_silent) {
      text += node_with_ranks(context, node) +
              " does not answer at all: that host, or the network between it and this rank's "
              "node " +
              std::to_string(mine) + ", is down. ";
    }
  }
  return text;
}

/// Where the store is, for a rank that cannot reach it: the node of global rank 0 (the store's
/// host under cohortrun and torchrun), when that is another node. Global rank 0 need not be a
/// member (a hierarchical communicator's `across` part has one rank per node).
std::string store_node(const CommContext& context) {
  const Placement& place = context.placement;
  if (place.member_nodes.size() != static_cast<std::size_t>(context.size()) ||
      place.store_node < 0) {
    return "";
  }
  const int mine = place.member_nodes[static_cast<std::size_t>(context.rank())];
  if (place.store_node == mine) {
    return "";
  }
  const bool several = place.store_node_ranks.find(',') != std::string::npos;
  return " Or node " + std::to_string(place.store_node) + (several ? " (ranks " : " (rank ") +
         place.store_node_ranks +
         "), where the store runs beside rank 0, is unreachable from this rank's node " +
         std::to_string(mine) + ": that host, or the network between them, is down.";
}

}  // namespace

void write_progress(CommContext& context, std::int64_t answered) noexcept {
  try {
    const auto [pending, signature] = context.recorder->oldest_unfinished();
    context.monitor_store->set("progress/" + std::to_string(context.rank()),
                               std::to_string(context.issued.load()) + " " +
                                   std::to_string(context.recorder->last_finished()) + " " +
                                   std::to_string(unix_millis()) + " " + std::to_string(answered) +
                                   " " + std::to_string(pending) + " " + std::to_string(signature));
  } catch (const std::exception& error) {
    COHORT_LOG(debug) << "could not publish progress of " << context.describe() << ": "
                      << error.what();
  }
}

namespace {

/// What a member published of its progress, as a diagnosis read it.
struct Progress {
  bool published = false;
  std::uint64_t issued = 0;
  std::int64_t at = 0;
  std::int64_t answered = 0;
  std::uint64_t pending = 0;    // the oldest collective it had not finished
  std::uint64_t signature = 0;  // that one's call (Note [Call signatures])
};

// Note [Different calls at one point]
// A transport that does not compare the calls itself (Gloo, whose messages for different calls
// meet nowhere: Note [Gloo tags from the call]; NCCL, which may hang on them) leaves ranks that
// called different collectives at one point waiting until the deadline, every one of them
// having issued its call. Each rank publishes, with its progress, the signature of its oldest
// collective not finished, so the ranks still waiting in #sequence say what they called there.
// Progress a second old says it as truly as fresh progress: a rank whose oldest unfinished
// collective was #sequence is still in it, since #sequence cannot finish here.
std::string different_calls(const CommContext& context, std::uint64_t sequence,
                            const std::vector<Progress>& progress) {
  const std::optional<std::uint64_t> mine = context.recorder->signature(sequence);
  if (!mine) {
    return "";
  }
  std::string different;
  for (int member = 0; member < context.size(); ++member) {
    const Progress& p = progress[static_cast<std::size_t>(member)];
    if (member != context.rank() && p.published && p.pending == sequence && p.signature != *mine) {
      different += (different.empty() ? "" : ", ") + std::string("rank ") +
                   std::to_string(context.global_rank(member)) + " called " +
                   describe_signature(p.signature);
    }
  }
  if (different.empty()) {
    return "";
  }
  return "ranks called different collectives as #" + std::to_string(sequence) + ": " + different +
         ", where rank " + std::to_string(context.global_rank(context.rank())) +
         " (this rank) called " + describe_signature(*mine) + ". ";
}

}  // namespace

std::string diagnose_stragglers(CommContext& context, std::uint64_t sequence,
                                ProgressRequests* requests) {
  std::vector<Progress> progress(static_cast<std::size_t>(context.size()));
  try {
    // Ask for fresh progress and give every watchdog a moment to answer.
    const std::int64_t request = requests != nullptr ? requests->request_progress() : 0;
    write_progress(context, requests != nullptr ? requests->answered_request() : 0);
    const auto give_up = Clock::now() + kAnswerWait;
    while (true) {
      // A member that left a request made ahead of the deadline unanswered for kAnswerWait
      // will not answer this one either: waiting for it only delays the error.
      const std::int64_t settled = requests != nullptr ? requests->settled_request() : 0;
      bool all_answered = true;
      for (int member = 0; member < context.size(); ++member) {
        Progress& p = progress[static_cast<std::size_t>(member)];
        const std::string key = "progress/" + std::to_string(member);
        if (member == context.rank() || !context.monitor_store->check({key})) {
          all_answered = all_answered && member == context.rank();
          continue;
        }
        std::istringstream fields(context.monitor_store->get(key, std::chrono::seconds(2)));
        // issued, finished (unused), time, answered, pending, signature
        fields >> p.issued >> p.at >> p.at >> p.answered >> p.pending >> p.signature;
        p.published = true;
        all_answered = all_answered && (p.answered >= request || p.answered < settled);
      }
      if (requests != nullptr) {
        requests->answer_progress_request();
      }
      if (all_answered || request == 0 || Clock::now() >= give_up) {
        for (Progress& p : progress) {
          p.answered = request == 0 ? 0 : (p.answered >= request ? 1 : -1);
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& error) {
    // Which ranks arrived is not known now (Note [What a silent rank last said]); what the ranks
    // read before the store went can still say that one called something else here (Note
    // [Different calls at one point]): the store's host, a rank, may have raised the same
    // deadline's error a moment sooner and exited.
    return different_calls(context, sequence, progress) +
           "the store could not be read to find which ranks had not arrived (" +
           std::string(error.what()) +
           "); the process that hosts it (rank 0 or cohortrun) may have died." +
           store_node(context) + " ";
  }
  // Note [What a silent rank last said]
  // A rank publishes its progress once a second (and when asked), so a rank that died has
  // published what it had issued up to a second before it died, and a small model issues
  // hundreds of collectives a second. The diagnosis used to list such a rank among those that
  // had not arrived, "last issued #875", beside ranks in lockstep with it at #1666: the 875 was
  // true a second earlier, and read as if the rank had fallen 800 collectives behind. A rank that
  // does not answer is now named as not responding, with what it last published and how long
  // ago: what is known of it, said as such. Only a rank that answers, whose progress is
  // fresh, is said not to have arrived.
  const std::int64_t now_ms = unix_millis();
  std::vector<bool> silent_members(static_cast<std::size_t>(context.size()), false);
  std::string not_arrived;
  std::string silent;
  for (int member = 0; member < context.size(); ++member) {
    if (member == context.rank()) {
      continue;
    }
    const Progress& p = progress[static_cast<std::size_t>(member)];
    const std::string name = "rank " + std::to_string(context.global_rank(member));
    if (!p.published || p.answered < 0) {
      std::string heard = " (it never published its progress)";
      if (p.published) {
        char age[32];
        std::snprintf(age, sizeof(age), "%.1f",
                      static_cast<double>(std::max<std::int64_t>(0, now_ms - p.at)) / 1000.0);
        heard = " (last heard from " + std::string(age) + " s ago, when it had issued #" +
                std::to_string(p.issued) + ")";
      }
      silent += (silent.empty() ? "" : ", ") + name + heard;
      silent_members[static_cast<std::size_t>(member)] = true;
      continue;
    }
    if (p.issued < sequence) {
      not_arrived += (not_arrived.empty() ? "" : ", ") + name + " (last issued #" +
                     std::to_string(p.issued) + ")";
    }
  }
  std::string text = different_calls(context, sequence, progress);
  if (!not_arrived.empty()) {
    text += "ranks that had not arrived: " + not_arrived + ". ";
  }
  if (!silent.empty()) {
    text += "ranks not responding (their process died or is stuck): " + silent + ". ";
    text += silent_nodes(context, silent_members);
  }
  if (text.empty()) {
    text =
        "every rank had issued it; the backend itself stalled or failed (check "
        "NCCL_DEBUG=WARN output, the network, and the GPUs). ";
  }
  return text;
}

}  // namespace cohort::detail
