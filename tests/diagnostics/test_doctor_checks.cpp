// cohort-doctor's checks on made-up facts: versions, GPUs, /dev/shm and resource limits.

#include "checks.hpp"
#include "doctor_test_support.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using cohort::doctor::Finding;
using cohort::doctor::GpuInfo;
using cohort::doctor::PeerLink;
using cohort::doctor::ResourceLimit;
using cohort::doctor::Severity;
using cohort::doctor::Version;
using namespace cohort::doctor::testing;

// ---- Versions ----------------------------------------------------------------------------------

TEST(DoctorVersions, DecodesCudaCodes) {
  EXPECT_EQ(cohort::doctor::cuda_version_from_code(13000), (Version{13, 0, 0}));
  EXPECT_EQ(cohort::doctor::cuda_version_from_code(12040), (Version{12, 4, 0}));
  EXPECT_EQ(cohort::doctor::cuda_version_from_code(11080), (Version{11, 8, 0}));
  EXPECT_EQ(cohort::doctor::cuda_version_from_code(12040).to_string(false), "12.4");
}

TEST(DoctorVersions, DecodesNcclCodesOfBothSchemes) {
  EXPECT_EQ(cohort::doctor::nccl_version_from_code(22809), (Version{2, 28, 9}));
  EXPECT_EQ(cohort::doctor::nccl_version_from_code(23007), (Version{2, 30, 7}));
  EXPECT_EQ(cohort::doctor::nccl_version_from_code(2708), (Version{2, 7, 8}));
  EXPECT_EQ(cohort::doctor::nccl_version_from_code(22809).to_string(), "2.28.9");
}

TEST(DoctorVersions, DecodesCudnnCodesOfBothSchemes) {
  EXPECT_EQ(cohort::doctor::cudnn_version_from_code(91900), (Version{9, 19, 0}));
  EXPECT_EQ(cohort::doctor::cudnn_version_from_code(90100), (Version{9, 1, 0}));
  EXPECT_EQ(cohort::doctor::cudnn_version_from_code(8907), (Version{8, 9, 7}));
}

TEST(DoctorVersions, OrdersVersions) {
  EXPECT_LT((Version{2, 28, 9}), (Version{2, 30, 0}));
  EXPECT_LT((Version{12, 9, 0}), (Version{13, 0, 0}));
  EXPECT_GT((Version{13, 0, 1}), (Version{13, 0, 0}));
}

TEST(DoctorDriver, NoDriverIsInformationOnly) {
  const Finding finding = cohort::doctor::check_cuda_driver(0, 13000);
  EXPECT_EQ(finding.severity, Severity::info);
  EXPECT_TRUE(contains(finding.message, "no NVIDIA driver")) << finding.message;
  EXPECT_TRUE(contains(finding.advice, "13.0")) << finding.advice;
}

TEST(DoctorDriver, OlderMajorThanRuntimeIsAnError) {
  const Finding finding = cohort::doctor::check_cuda_driver(12040, 13000);
  EXPECT_EQ(finding.severity, Severity::error);
  EXPECT_TRUE(contains(finding.message, "12.4")) << finding.message;
  EXPECT_TRUE(contains(finding.message, "13.0")) << finding.message;
  EXPECT_TRUE(contains(finding.advice, "upgrade the NVIDIA driver")) << finding.advice;
  const std::vector<Finding> findings = {finding};
  EXPECT_EQ(cohort::doctor::exit_status(findings), 1);
}

TEST(DoctorDriver, OlderMinorOfSameMajorIsAWarning) {
  const Finding finding = cohort::doctor::check_cuda_driver(13000, 13010);
  EXPECT_EQ(finding.severity, Severity::warn);
  EXPECT_TRUE(contains(finding.message, "minor-version compatibility")) << finding.message;
}

TEST(DoctorDriver, EqualOrNewerDriverIsFine) {
  EXPECT_EQ(cohort::doctor::check_cuda_driver(13000, 13000).severity, Severity::ok);
  EXPECT_EQ(cohort::doctor::check_cuda_driver(13020, 13000).severity, Severity::ok);
  EXPECT_EQ(cohort::doctor::check_cuda_driver(13000, 12080).severity, Severity::ok);
}

TEST(DoctorLibraries, ComparesLoadedWithCompiled) {
  using cohort::doctor::check_library_version;
  EXPECT_EQ(check_library_version("cuDNN", Version{8, 9, 7}, Version{9, 19, 0}).severity,
            Severity::error);
  EXPECT_EQ(check_library_version("NCCL", Version{2, 27, 3}, Version{2, 28, 9}).severity,
            Severity::warn);
  EXPECT_EQ(check_library_version("NCCL", Version{2, 28, 9}, Version{2, 28, 9}).severity,
            Severity::ok);
  EXPECT_EQ(check_library_version("NCCL", Version{2, 30, 7}, Version{2, 28, 9}).severity,
            Severity::ok);
  EXPECT_EQ(check_library_version("cuDNN", std::nullopt, std::nullopt).severity, Severity::info);
  const Finding older = check_library_version("NCCL", Version{2, 27, 3}, Version{2, 28, 9});
  EXPECT_TRUE(contains(older.message, "2.27.3")) << older.message;
  EXPECT_TRUE(contains(older.advice, "LD_LIBRARY_PATH")) << older.advice;
}

TEST(DoctorFindings, ExitStatusIsOneOnlyForErrors) {
  std::vector<Finding> findings = {
      {Severity::ok, "a", "", ""}, {Severity::info, "b", "", ""}, {Severity::warn, "c", "", ""}};
  EXPECT_EQ(cohort::doctor::exit_status(findings), 0);
  findings.push_back({Severity::error, "d", "", ""});
  EXPECT_EQ(cohort::doctor::exit_status(findings), 1);  // 2 is a usage error
  EXPECT_EQ(cohort::doctor::exit_status({}), 0);
  EXPECT_EQ(cohort::doctor::to_string(Severity::warn), "warn");
}

TEST(DoctorFormat, FormatsBytesInBinaryUnits) {
  using cohort::doctor::format_bytes;
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(64 * kMiB), "64 MiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.5 GiB");
  EXPECT_EQ(format_bytes(24 * kGiB), "24 GiB");
}

// ---- GPUs --------------------------------------------------------------------------------------

TEST(DoctorGpus, NoGpuSaysWhyAndIsNotAnError) {
  const Finding finding =
      cohort::doctor::check_gpu_count(0, "no usable GPU: insufficient driver", true);
  EXPECT_EQ(finding.severity, Severity::info);
  EXPECT_TRUE(contains(finding.message, "No GPU")) << finding.message;
  EXPECT_TRUE(contains(finding.message, "insufficient driver")) << finding.message;
  EXPECT_TRUE(contains(finding.message, "Gloo")) << finding.message;
  EXPECT_EQ(cohort::doctor::check_gpu_count(2, "", true).message, "2 GPUs usable");
  EXPECT_FALSE(cohort::doctor::check_gpu_count(0, "built without", false).advice.empty());
}

TEST(DoctorGpus, ArchitectureMatchesBinaryOrPtx) {
  using cohort::doctor::check_gpu_architecture;
  EXPECT_EQ(check_gpu_architecture(gpu(9, 0), "80;90").severity, Severity::ok);
  EXPECT_EQ(check_gpu_architecture(gpu(9, 0), "80,90").severity, Severity::ok);
  EXPECT_EQ(check_gpu_architecture(gpu(9, 0), "90a-real").severity, Severity::ok);
  // An sm_80 binary runs on 8.6; PTX runs on anything newer.
  const Finding ampere = check_gpu_architecture(gpu(8, 6), "80;90");
  EXPECT_EQ(ampere.severity, Severity::ok);
  EXPECT_TRUE(contains(ampere.message, "sm_80 binary")) << ampere.message;
  EXPECT_EQ(check_gpu_architecture(gpu(9, 0), "80").severity, Severity::info);
  EXPECT_EQ(check_gpu_architecture(gpu(10, 0), "90").severity, Severity::info);
  EXPECT_EQ(check_gpu_architecture(gpu(10, 0), "100f-real").severity, Severity::ok);
}

TEST(DoctorGpus, ArchitectureWithoutKernelsIsAnError) {
  using cohort::doctor::check_gpu_architecture;
  const Finding finding = check_gpu_architecture(gpu(8, 6), "90");
  EXPECT_EQ(finding.severity, Severity::error);
  EXPECT_TRUE(contains(finding.advice, "-DCMAKE_CUDA_ARCHITECTURES=86")) << finding.advice;
  EXPECT_EQ(check_gpu_architecture(gpu(9, 0), "80-real").severity, Severity::error);
  EXPECT_EQ(check_gpu_architecture(gpu(10, 0), "90a").severity, Severity::error);
  EXPECT_EQ(check_gpu_architecture(gpu(7, 5), "80;90").severity, Severity::error);
}

TEST(DoctorGpus, SpecialArchitectureListsAreNotErrors) {
  using cohort::doctor::check_gpu_architecture;
  EXPECT_EQ(check_gpu_architecture(gpu(12, 0), "all").severity, Severity::ok);
  EXPECT_EQ(check_gpu_architecture(gpu(12, 0), "native").severity, Severity::info);
  EXPECT_EQ(check_gpu_architecture(gpu(12, 0), "").severity, Severity::info);
}

TEST(DoctorGpus, ProhibitedComputeModeIsAnError) {
  GpuInfo info = gpu(9, 0);
  info.compute_mode = cohort::doctor::ComputeMode::prohibited;
  EXPECT_EQ(cohort::doctor::check_compute_mode(info).severity, Severity::error);
  info.compute_mode = cohort::doctor::ComputeMode::exclusive_process;
  EXPECT_EQ(cohort::doctor::check_compute_mode(info).severity, Severity::info);
  info.compute_mode = cohort::doctor::ComputeMode::default_mode;
  EXPECT_EQ(cohort::doctor::check_compute_mode(info).severity, Severity::ok);
}

TEST(DoctorGpus, ManagedMemoryWithoutConcurrentAccessWarns) {
  GpuInfo info = gpu(9, 0);
  info.concurrent_managed_access = true;
  info.pageable_memory_access = false;
  const Finding good = cohort::doctor::check_managed_memory(info);
  EXPECT_EQ(good.severity, Severity::ok);
  EXPECT_TRUE(contains(good.message, "cannot read pageable")) << good.message;
  info.concurrent_managed_access = false;
  const Finding bad = cohort::doctor::check_managed_memory(info);
  EXPECT_EQ(bad.severity, Severity::warn);
  EXPECT_FALSE(bad.advice.empty());
}

TEST(DoctorGpus, PeerAccessReportsMissingPairs) {
  EXPECT_TRUE(cohort::doctor::check_peer_access(1, {}).empty());
  const auto all = cohort::doctor::check_peer_access(4, full_mesh(4));
  ASSERT_EQ(all.size(), 1U);
  EXPECT_EQ(all[0].severity, Severity::ok);

  auto links = full_mesh(4);
  for (PeerLink& link : links) {
    if (link.from == 3 && link.to == 0) {
      link.access = false;  // one direction is enough to lose the pair
    }
  }
  const auto missing = cohort::doctor::check_peer_access(4, links);
  ASSERT_EQ(missing.size(), 1U);
  EXPECT_EQ(missing[0].severity, Severity::warn);
  EXPECT_TRUE(contains(missing[0].message, "1 pair of GPUs")) << missing[0].message;
  EXPECT_TRUE(contains(missing[0].message, "GPU0-GPU3")) << missing[0].message;
  EXPECT_TRUE(contains(missing[0].advice, "ACS")) << missing[0].advice;

  // A pair nobody probed counts as missing too.
  const auto unprobed = cohort::doctor::check_peer_access(3, full_mesh(2));
  ASSERT_EQ(unprobed.size(), 1U);
  EXPECT_TRUE(contains(unprobed[0].message, "2 pairs")) << unprobed[0].message;
}

TEST(DoctorGpus, MoreRanksThanGpusIsAnErrorUnlessAllowed) {
  using cohort::doctor::check_ranks_per_gpu;
  EXPECT_EQ(check_ranks_per_gpu(4, 8, {}).severity, Severity::ok);
  const Finding shared = check_ranks_per_gpu(2, 1, {});
  EXPECT_EQ(shared.severity, Severity::error);
  EXPECT_TRUE(contains(shared.advice, "--nproc-per-node 1")) << shared.advice;
  EXPECT_EQ(check_ranks_per_gpu(2, 1, {{"COHORT_ALLOW_SHARED_GPU", "1"}}).severity, Severity::info);
  EXPECT_EQ(check_ranks_per_gpu(2, 1, {{"NCCL_MULTI_RANK_GPU_ENABLE", "1"}}).severity,
            Severity::info);
  EXPECT_EQ(check_ranks_per_gpu(2, 1, {{"NCCL_MULTI_RANK_GPU_ENABLE", "0"}}).severity,
            Severity::error);
  EXPECT_EQ(check_ranks_per_gpu(4, 0, {}).severity, Severity::info);
}

// ---- Host limits -------------------------------------------------------------------------------

TEST(DoctorShm, DockerDefaultWarnsWithTheFix) {
  const Finding finding =
      cohort::doctor::check_shm(cohort::doctor::FileSystemSize{64 * kMiB, 64 * kMiB});
  EXPECT_EQ(finding.severity, Severity::warn);
  EXPECT_TRUE(contains(finding.message, "64 MiB")) << finding.message;
  EXPECT_TRUE(contains(finding.message, "Docker's default")) << finding.message;
  EXPECT_TRUE(contains(finding.advice, "--shm-size=1g")) << finding.advice;
  EXPECT_TRUE(contains(finding.advice, "--ipc=host")) << finding.advice;
}

TEST(DoctorShm, ThresholdIsOneGibibyte) {
  using cohort::doctor::check_shm;
  using cohort::doctor::FileSystemSize;
  const Finding small = check_shm(FileSystemSize{kGiB - 4096, kGiB - 4096});
  EXPECT_EQ(small.severity, Severity::warn);
  EXPECT_FALSE(contains(small.message, "Docker's default")) << small.message;
  EXPECT_EQ(check_shm(FileSystemSize{kGiB, kGiB}).severity, Severity::ok);
  EXPECT_EQ(check_shm(FileSystemSize{24 * kGiB, 20 * kGiB}).severity, Severity::ok);
  const Finding full = check_shm(FileSystemSize{8 * kGiB, 100 * kMiB});
  EXPECT_EQ(full.severity, Severity::warn);
  EXPECT_TRUE(contains(full.message, "almost full")) << full.message;
  const Finding missing = check_shm(std::nullopt);
  EXPECT_EQ(missing.severity, Severity::warn);
  EXPECT_TRUE(contains(missing.advice, "NCCL_SHM_DISABLE=1")) << missing.advice;
}

TEST(DoctorLimits, MemlockUnlimitedIsFine) {
  EXPECT_EQ(cohort::doctor::check_memlock(ResourceLimit{}).severity, Severity::ok);
}

TEST(DoctorLimits, SmallMemlockWarnsWithTheFix) {
  const Finding capped = cohort::doctor::check_memlock(ResourceLimit{64 * 1024, 64 * 1024});
  EXPECT_EQ(capped.severity, Severity::warn);
  EXPECT_TRUE(contains(capped.message, "64 KiB")) << capped.message;
  EXPECT_TRUE(contains(capped.advice, "--ulimit memlock=-1")) << capped.advice;

  const Finding raisable = cohort::doctor::check_memlock(ResourceLimit{8 * kMiB, std::nullopt});
  EXPECT_EQ(raisable.severity, Severity::warn);
  EXPECT_TRUE(contains(raisable.advice, "ulimit -l unlimited")) << raisable.advice;

  EXPECT_EQ(cohort::doctor::check_memlock(ResourceLimit{32 * kGiB, 32 * kGiB}).severity,
            Severity::info);
}

TEST(DoctorLimits, UnlimitedStackWarnsForOldNccl) {
  using cohort::doctor::check_stack;
  EXPECT_EQ(check_stack(ResourceLimit{8 * kMiB, std::nullopt}, Version{2, 27, 3}).severity,
            Severity::ok);
  const Finding old = check_stack(ResourceLimit{}, Version{2, 27, 3});
  EXPECT_EQ(old.severity, Severity::warn);
  EXPECT_TRUE(contains(old.advice, "ulimit -s 8192")) << old.advice;
  EXPECT_EQ(check_stack(ResourceLimit{}, std::nullopt).severity, Severity::warn);
  EXPECT_EQ(check_stack(ResourceLimit{}, Version{2, 28, 9}).severity, Severity::info);
}

}  // namespace
