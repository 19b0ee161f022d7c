// What a checkpoint's arrays are cut into (Note [Checkpoint arrays] in manifest.hpp), and the
// registry as the manifest lists it: shared by the save and the load.

#include "checkpointer_impl.hpp"

#include <cohort/checkpoint/checksum.hpp>

#include <algorithm>
#include <sstream>
#include <utility>

namespace cohort::detail {

PieceRange piece_range(std::uint64_t count, std::uint64_t shard_count, int rank) noexcept {
  const std::uint64_t begin = std::min(count, shard_count * static_cast<std::uint64_t>(rank));
  const std::uint64_t end = std::min(count, begin + shard_count);
  return {begin, end};
}

BucketPlan checkpoint_plan(const DataParallel& dp) {
  if (dp.options().sharding == Sharding::none) return dp.plan();
  return arena_layout(dp.registry(), dp.shard_layout().world_size);
}

std::vector<ManifestParam> manifest_params(const DataParallel& dp) {
  std::vector<ManifestParam> params;
  const auto infos = dp.registry().params();
  const BucketPlan plan = checkpoint_plan(dp);
  for (std::size_t i = 0; i < infos.size(); ++i) {
    ManifestParam param;
    param.name = infos[i].name;
    param.shape.assign(infos[i].shape.begin(), infos[i].shape.end());
    param.dtype = infos[i].dtype;
    param.offset = plan.slots[i].offset;
    params.push_back(std::move(param));
  }
  return params;
}

std::string registry_fingerprint(const std::vector<ManifestParam>& params) {
  std::ostringstream text;
  for (const ManifestParam& param : params) {
    text << param.name << '\n' << to_string(param.dtype) << '@' << param.offset << ':';
    for (const std::uint64_t extent : param.shape) text << extent << ',';
    text << '\n';
  }
  const std::string bytes = text.str();
  return checksum_to_hex(Checksum::of(bytes.data(), bytes.size()));
}

}  // namespace cohort::detail
