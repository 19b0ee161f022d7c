#include <cohort/ddp/rank_agreement.hpp>

#include <cohort/core/checksum.hpp>
#include <cohort/core/error.hpp>
#include <cohort/launch/store_group.hpp>
#include <cohort/memory/detail/stream_copy.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cohort {
namespace {

/// "ranks 0, 1 and 3" or "rank 2".
std::string list_ranks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

/// Gathers every rank's "<bytes> <checksum>" and throws, naming the ranks by what they hold,
/// when they differ (Note [Checking that ranks agree]).
void agree(World& world, std::uint64_t bytes, std::uint64_t digest, std::string_view name) {
  const std::string mine =
      std::to_string(bytes) + " bytes with checksum " + checksum_to_hex(digest);
  const std::vector<std::string> all =
      world.group().all_gather("check_ranks_agree/" + std::string(name), mine);
  // What each distinct value is held by, in the order of the first rank holding it.
  std::vector<std::pair<std::string, std::vector<int>>> holders;
  for (int rank = 0; rank < static_cast<int>(all.size()); ++rank) {
    const std::string& value = all[static_cast<std::size_t>(rank)];
    auto found = std::find_if(holders.begin(), holders.end(),
                              [&](const auto& entry) { return entry.first == value; });
    if (found == holders.end()) {
      holders.push_back({value, {rank}});
    } else {
      found->second.push_back(rank);
    }
  }
  if (holders.size() == 1) return;
  std::string message = "check_ranks_agree: '" + std::string(name) + "' differs across the " +
                        std::to_string(all.size()) + " ranks: ";
  for (std::size_t i = 0; i < holders.size(); ++i) {
    const auto& [value, ranks] = holders[i];
    if (i > 0) message += "; ";
    message += list_ranks(ranks) + (ranks.size() == 1 ? " holds " : " hold ") + value;
  }
  message +=
      ". State kept outside the ParamRegistry is neither averaged nor broadcast by DataParallel, "
      "nor saved by a Checkpointer: register it as a parameter, or keep it equal yourself "
      "(docs/getting-started.md)";
  COHORT_FAIL(InvalidArgument, message);
}

}  // namespace

void check_ranks_agree(World& world, TensorView data, std::string_view name, const Stream& stream) {
  COHORT_EXPECTS(data.device().is_host() || data.device() == stream.device(),
                 "check_ranks_agree: '" + std::string(name) + "' is " + data.device().to_string() +
                     " memory but the stream is " + stream.device().to_string() +
                     "'s; pass the stream that wrote it");
  if (data.device().is_host()) {
    stream.synchronize();
    agree(world, data.bytes(), Checksum::of(data.data(), data.bytes()), name);
    return;
  }
  constexpr std::size_t kChunk = std::size_t{64} << 20;
  std::vector<unsigned char> host(std::min(data.bytes(), kChunk));
  Checksum checksum;
  const auto* source = static_cast<const unsigned char*>(data.data());
  for (std::size_t done = 0; done < data.bytes(); done += host.size()) {
    const std::size_t part = std::min(host.size(), data.bytes() - done);
    detail::read_after(host.data(), source + done, part, stream);
    checksum.update(host.data(), part);
  }
  agree(world, data.bytes(), checksum.digest(), name);
}

void check_ranks_agree(World& world, TensorView data, std::string_view name) {
  COHORT_EXPECTS(data.device().is_host(),
                 "check_ranks_agree: '" + std::string(name) + "' is " + data.device().to_string() +
                     " memory; pass the stream that wrote it: check_ranks_agree(world, data, "
                     "name, stream)");
  agree(world, data.bytes(), Checksum::of(data.data(), data.bytes()), name);
}

}  // namespace cohort
