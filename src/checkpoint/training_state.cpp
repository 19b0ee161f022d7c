// The training state beside a DistributedSampler: the data position in samples over all ranks,
// so that it means the same on any number of ranks.

#include <cohort/checkpoint/checkpoint.hpp>
#include <cohort/core/error.hpp>
#include <cohort/data/distributed_sampler.hpp>

#include <utility>

namespace cohort {

TrainingState TrainingState::at(std::int64_t steps, const DistributedSampler& sampler,
                                std::string user_blob) {
  const SamplerPosition position = sampler.position();
  return TrainingState{steps, position.epoch, position.step * sampler.global_batch(),
                       std::move(user_blob)};
}

void TrainingState::seek(DistributedSampler& sampler) const {
  const std::uint64_t global_batch = sampler.global_batch();
  COHORT_EXPECTS(data_position % global_batch == 0,
                 "the checkpoint stands at sample " + std::to_string(data_position) + " of epoch " +
                     std::to_string(epoch) +
                     " (over all ranks), which is not a whole number of this sampler's global "
                     "batches of " +
                     std::to_string(global_batch) + " samples (" +
                     std::to_string(sampler.options().batch_per_rank) + " per rank x " +
                     std::to_string(sampler.options().world_size) +
                     " ranks): resume with the global batch it was saved with");
  sampler.seek({epoch, data_position / global_batch});
}

}  // namespace cohort
