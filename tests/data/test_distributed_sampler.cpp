// DistributedSampler on the host: the permutation, each rank's shard, the last-batch policies,
// resumption from a position and the row gather.

#include <cohort/core/error.hpp>
#include <cohort/data/distributed_sampler.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

namespace {

using cohort::DistributedSampler;
using cohort::LastBatch;
using cohort::SamplerOptions;
using cohort::SamplerPosition;

cohort::Stream host_stream() {
  return cohort::Stream::create(cohort::Device::host());
}

SamplerOptions options_of(std::uint64_t n, std::uint32_t batch, int rank, int ranks,
                          LastBatch policy = LastBatch::drop, std::uint64_t seed = 7) {
  SamplerOptions options;
  options.dataset_size = n;
  options.batch_per_rank = batch;
  options.rank = rank;
  options.world_size = ranks;
  options.seed = seed;
  options.last_batch = policy;
  return options;
}

std::vector<std::int64_t> indices_of(const cohort::SampledBatch& batch) {
  return {batch.indices, batch.indices + batch.size};
}

bool is_permutation_of_range(std::vector<std::int64_t> values) {
  std::sort(values.begin(), values.end());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

TEST(SamplerPermutation, IsAPermutationThatDependsOnSeedAndEpoch) {
  for (const std::uint64_t n : {1u, 2u, 17u, 1000u}) {
    EXPECT_TRUE(is_permutation_of_range(cohort::sampler_permutation(n, 3, 0))) << n;
  }
  const auto a = cohort::sampler_permutation(1000, 3, 0);
  EXPECT_EQ(a, cohort::sampler_permutation(1000, 3, 0));
  EXPECT_NE(a, cohort::sampler_permutation(1000, 3, 1));
  EXPECT_NE(a, cohort::sampler_permutation(1000, 4, 0));
  // A shuffled order: about one fixed point expected; far fewer than 20.
  int fixed = 0;
  for (std::size_t i = 0; i < a.size(); ++i) fixed += a[i] == static_cast<std::int64_t>(i);
  EXPECT_LT(fixed, 20);
}

TEST(SamplerPermutation, StaysTheSameAcrossVersions) {
  // Checkpoints store (epoch, step) and rely on the permutation never changing: these values
  // were computed once from the definition (splitmix64 keys, Note [Sampler permutation]).
  const std::vector<std::int64_t> expected = {3, 6, 1, 5, 0, 4, 9, 7, 8, 2};
  EXPECT_EQ(cohort::sampler_permutation(10, 42, 3), expected);
}

TEST(DistributedSampler, RanksShareEachGlobalBatchWhateverTheirNumber) {
  // 1, 3 and 4 ranks with the same global batch of 12 see the same samples at every step.
  constexpr std::uint64_t kSamples = 100;
  std::vector<std::vector<std::int64_t>> reference;
  for (const int ranks : {1, 3, 4}) {
    std::vector<DistributedSampler> samplers;
    for (int r = 0; r < ranks; ++r) {
      samplers.emplace_back(options_of(kSamples, static_cast<std::uint32_t>(12 / ranks), r, ranks),
                            host_stream());
    }
    ASSERT_EQ(samplers[0].steps_per_epoch(), 8u);
    std::vector<std::vector<std::int64_t>> steps;
    for (std::uint64_t s = 0; s < 2 * samplers[0].steps_per_epoch(); ++s) {
      std::vector<std::int64_t> global;
      for (auto& sampler : samplers) {
        const auto batch = sampler.next_batch();
        EXPECT_EQ(batch.repeated, 0u);
        const auto mine = indices_of(batch);
        global.insert(global.end(), mine.begin(), mine.end());
      }
      steps.push_back(global);
    }
    if (reference.empty()) {
      reference = steps;
      // Within an epoch no sample repeats; the two epochs differ.
      std::set<std::int64_t> seen;
      for (std::size_t s = 0; s < 8; ++s) seen.insert(steps[s].begin(), steps[s].end());
      EXPECT_EQ(seen.size(), 96u);
      EXPECT_NE(steps[0], steps[8]);
    } else {
      EXPECT_EQ(steps, reference) << ranks << " ranks";
    }
  }
}

TEST(DistributedSampler, PadCompletesTheLastBatchAndSaysHowMuch) {
  // 10 samples, 2 ranks x 3: steps of 6, the second holds 4 new samples and 2 repeats.
  std::vector<std::int64_t> seen;
  std::uint32_t repeated = 0;
  for (int r = 0; r < 2; ++r) {
    DistributedSampler sampler(options_of(10, 3, r, 2, LastBatch::pad), host_stream());
    ASSERT_EQ(sampler.steps_per_epoch(), 2u);
    for (int s = 0; s < 2; ++s) {
      const auto batch = sampler.next_batch();
      repeated += batch.repeated;
      const auto mine = indices_of(batch);
      seen.insert(seen.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(sampler.position(), (SamplerPosition{1, 0}));
  }
  EXPECT_EQ(repeated, 2u);
  EXPECT_EQ(std::set<std::int64_t>(seen.begin(), seen.end()).size(), 10u);  // every sample
  const auto permutation = cohort::sampler_permutation(10, 7, 0);
  // The padding is the start of the permutation: rank 1's last batch holds entries 9, 0, 1.
  EXPECT_EQ(seen[9], permutation[9]);
  EXPECT_EQ(seen[10], permutation[0]);
  EXPECT_EQ(seen[11], permutation[1]);
}

TEST(DistributedSampler, PadCoversABatchLargerThanTheDataSet) {
  DistributedSampler sampler(options_of(3, 4, 1, 2, LastBatch::pad), host_stream());
  ASSERT_EQ(sampler.steps_per_epoch(), 1u);
  const auto batch = sampler.next_batch();
  EXPECT_EQ(batch.repeated, 4u);
  const auto permutation = cohort::sampler_permutation(3, 7, 0);
  EXPECT_EQ(indices_of(batch), (std::vector<std::int64_t>{permutation[1], permutation[2],
                                                          permutation[0], permutation[1]}));
}

TEST(DistributedSampler, DropSkipsTheRemainder) {
  DistributedSampler sampler(options_of(10, 3, 0, 2, LastBatch::drop), host_stream());
  EXPECT_EQ(sampler.steps_per_epoch(), 1u);
  (void)sampler.next_batch();
  EXPECT_EQ(sampler.position(), (SamplerPosition{1, 0}));
}

TEST(DistributedSampler, ResumesFromAPosition) {
  DistributedSampler straight(options_of(50, 4, 1, 3), host_stream());
  std::vector<std::vector<std::int64_t>> expected;
  for (int s = 0; s < 10; ++s) expected.push_back(indices_of(straight.next_batch()));
  // 4 steps per epoch: resuming at step 3 crosses into epochs 1 and 2.
  DistributedSampler resumed(options_of(50, 4, 1, 3), host_stream());
  resumed.seek({0, 3});
  for (int s = 3; s < 10; ++s) {
    const auto batch = resumed.next_batch();
    EXPECT_EQ(indices_of(batch), expected[static_cast<std::size_t>(s)]) << s;
    EXPECT_EQ(resumed.host_indices(batch.position), expected[static_cast<std::size_t>(s)]) << s;
  }
  EXPECT_EQ(resumed.position(), (SamplerPosition{2, 2}));
  // A step past the end of an epoch is the next epoch's start.
  resumed.seek({0, 9});
  EXPECT_EQ(resumed.position(), (SamplerPosition{2, 1}));
  EXPECT_EQ(indices_of(resumed.next_batch()), expected[9]);
}

TEST(DistributedSampler, WithoutShuffleVisitsInOrder) {
  SamplerOptions options = options_of(8, 2, 1, 2);
  options.shuffle = false;
  DistributedSampler sampler(options, host_stream());
  EXPECT_EQ(indices_of(sampler.next_batch()), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(indices_of(sampler.next_batch()), (std::vector<std::int64_t>{6, 7}));
  EXPECT_EQ(sampler.download_permutation(), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(DistributedSampler, GathersRowsOnTheStream) {
  constexpr std::size_t kRow = 3;
  DistributedSampler sampler(options_of(20, 5, 0, 1), host_stream());
  std::vector<float> table(20 * kRow);
  std::iota(table.begin(), table.end(), 0.5f);
  std::vector<float> rows(5 * kRow, -1.0f);
  const auto batch = sampler.next_batch();
  sampler.gather(batch, std::span<float>(table), kRow, std::span<float>(rows));
  sampler.stream().synchronize();
  for (std::size_t j = 0; j < 5; ++j) {
    for (std::size_t c = 0; c < kRow; ++c) {
      EXPECT_EQ(rows[j * kRow + c], table[static_cast<std::size_t>(batch.indices[j]) * kRow + c]);
    }
  }
  std::vector<double> wrong(5 * kRow);
  EXPECT_THROW(sampler.gather(batch, std::span<float>(table), kRow, std::span<double>(wrong)),
               cohort::InvalidArgument);
  std::vector<float> short_rows(4 * kRow);
  EXPECT_THROW(sampler.gather(batch, std::span<float>(table), kRow, std::span<float>(short_rows)),
               cohort::InvalidArgument);
}

TEST(DistributedSampler, RejectsBadOptionsClearly) {
  EXPECT_THROW(DistributedSampler(options_of(0, 1, 0, 1), host_stream()), cohort::InvalidArgument);
  EXPECT_THROW(DistributedSampler(options_of(10, 0, 0, 1), host_stream()), cohort::InvalidArgument);
  EXPECT_THROW(DistributedSampler(options_of(10, 1, 2, 2), host_stream()), cohort::InvalidArgument);
  try {
    DistributedSampler(options_of(10, 3, 0, 4), host_stream());
    FAIL() << "a data set smaller than a global batch must be rejected under drop";
  } catch (const cohort::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("LastBatch::pad"), std::string::npos) << error.what();
  }
}

}  // namespace
