// The checksum, the manifest and the ranks' reports alone: pure functions, no ranks.

#include "support/test_helpers.hpp"

#include "checkpoint/rank_report.hpp"  // src/: private to the checkpoint layer

#include <cohort/checkpoint/checksum.hpp>
#include <cohort/checkpoint/manifest.hpp>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

namespace {

using cohort::CheckpointError;
using cohort::Checksum;
using cohort::Manifest;
using cohort_test::contains;
using cohort_test::message_of;

std::vector<unsigned char> random_bytes(std::size_t count, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<unsigned char> bytes(count);
  for (auto& byte : bytes) byte = static_cast<unsigned char>(random());
  return bytes;
}

TEST(Checksum, AnySplitGivesTheSameDigest) {
  const std::vector<unsigned char> bytes = random_bytes(1000, 1);
  const std::uint64_t whole = Checksum::of(bytes.data(), bytes.size());
  for (const std::size_t first : {0u, 1u, 7u, 31u, 32u, 33u, 500u, 999u, 1000u}) {
    Checksum split;
    split.update(bytes.data(), first);
    split.update(bytes.data() + first, 3 < bytes.size() - first ? 3 : bytes.size() - first);
    const std::size_t done = first + (3 < bytes.size() - first ? 3 : bytes.size() - first);
    split.update(bytes.data() + done, bytes.size() - done);
    EXPECT_EQ(split.digest(), whole) << "split at " << first;
  }
}

TEST(Checksum, EveryFlippedBitAndEveryLengthChangesIt) {
  std::vector<unsigned char> bytes = random_bytes(97, 2);
  const std::uint64_t original = Checksum::of(bytes.data(), bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] = static_cast<unsigned char>(bytes[i] ^ (1u << bit));
      EXPECT_NE(Checksum::of(bytes.data(), bytes.size()), original)
          << "byte " << i << " bit " << bit;
      bytes[i] = static_cast<unsigned char>(bytes[i] ^ (1u << bit));
    }
  }
  const std::vector<unsigned char> zeros(64, 0);
  EXPECT_NE(Checksum::of(zeros.data(), 63), Checksum::of(zeros.data(), 64));
  EXPECT_NE(Checksum::of(zeros.data(), 0), Checksum::of(zeros.data(), 1));
}

// The digest is part of the file format: checkpoints written by earlier versions must still
// pass their checks. These are the digests the first implementation gave (bytes i*131+7).
TEST(Checksum, DigestsAreThoseOfTheFormat) {
  const std::vector<std::pair<std::size_t, std::string>> known = {
      {0, "6097e4bc54386e8c"},    {1, "c3c44205432993fc"},  {31, "9d49f0a25f4cac9c"},
      {32, "5c38a8e7009a3bae"},   {33, "a056a4985b4a7bd4"}, {1000, "2fe38a72530a15f1"},
      {65537, "e3da80a021bf45d8"}};
  for (const auto& [size, digest] : known) {
    std::vector<unsigned char> bytes(size);
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
    EXPECT_EQ(cohort::checksum_to_hex(Checksum::of(bytes.data(), size)), digest)
        << size << " bytes";
  }
}

TEST(Checksum, HexRoundTripsAndRejectsJunk) {
  std::uint64_t value = 0;
  EXPECT_EQ(cohort::checksum_to_hex(0x0123456789abcdefULL), "0123456789abcdef");
  EXPECT_TRUE(cohort::checksum_from_hex("0123456789abcdef", value));
  EXPECT_EQ(value, 0x0123456789abcdefULL);
  EXPECT_FALSE(cohort::checksum_from_hex("0123456789abcde", value));
  EXPECT_FALSE(cohort::checksum_from_hex("0123456789abcdeg", value));
  EXPECT_FALSE(cohort::checksum_from_hex("0123456789ABCDEF", value));
}

Manifest sample_manifest() {
  Manifest manifest;
  manifest.cohort_version = "0.1.0";
  manifest.world_size = 2;
  manifest.registry_fingerprint = "00112233445566ff";
  manifest.params = {{"w", {2, 3}, cohort::DType::f32, 0}, {"b", {3}, cohort::DType::f32, 64}};
  manifest.used_count = 67;
  manifest.optimizer_rule = "adamw";
  manifest.optimizer_sharded = true;
  manifest.optimizer_steps = 12;
  manifest.learning_rate = 1e-3f;
  manifest.loss_scaler = cohort::ManifestLossScaler{1024.0f, 3, 2, true};
  manifest.step = 12;
  manifest.epoch = 1;
  manifest.data_position = 4096;
  manifest.files = {{"rank-0.bin", 2 * 136 + 5, 7}, {"rank-1.bin", 2 * 132, 9}};
  manifest.arrays = {
      {"params", cohort::DType::f32, 67, {{0, 0, 34, 0, 1}, {1, 34, 33, 0, 2}}},
      {"optimizer/exp_avg", cohort::DType::f32, 67, {{0, 0, 34, 136, 3}, {1, 34, 33, 132, 4}}},
      {"user_blob", cohort::DType::u8, 5, {{0, 0, 5, 272, 5}}}};
  return manifest;
}

TEST(Manifest, RoundTripsThroughJson) {
  const Manifest manifest = sample_manifest();
  const Manifest back = cohort::parse_manifest(cohort::to_json(manifest));
  EXPECT_EQ(cohort::to_json(back), cohort::to_json(manifest));
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.params[1].offset, 64u);
  ASSERT_TRUE(back.loss_scaler.has_value());
  EXPECT_EQ(back.loss_scaler->scale, 1024.0f);
  EXPECT_EQ(back.learning_rate, 1e-3f);
  ASSERT_NE(back.find_array("user_blob"), nullptr);
  EXPECT_EQ(back.find_array("user_blob")->pieces[0].byte_offset, 272u);
}

std::string edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json json = nlohmann::json::parse(cohort::to_json(sample_manifest()));
  edit(json);
  return json.dump();
}

TEST(Manifest, RejectsDamageByName) {
  EXPECT_TRUE(contains(message_of<CheckpointError>([] { cohort::parse_manifest("{\"format_"); }),
                       "not JSON"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] { cohort::parse_manifest("[1, 2]"); }),
                       "manifest is not an object"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(edited([](auto& j) { j.erase("world_size"); }));
                       }),
                       "has no \"world_size\""));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(edited([](auto& j) { j["format_version"] = 99; }));
                       }),
                       "format version 99"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(edited([](auto& j) { j["arena_dtype"] = "f128"; }));
                       }),
                       "not a dtype"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(
                             edited([](auto& j) { j["arrays"][0]["pieces"][1]["count"] = 30; }));
                       }),
                       "covers 64 of its 67 elements"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(
                             edited([](auto& j) { j["files"][1]["bytes"] = 100; }));
                       }),
                       "lies outside rank-1.bin"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(
                             edited([](auto& j) { j["files"][0]["name"] = "../etc/passwd"; }));
                       }),
                       "not a plain file name"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(
                             edited([](auto& j) { j["arrays"][0]["pieces"][0]["file"] = 7; }));
                       }),
                       "which is not listed"));
  EXPECT_TRUE(contains(message_of<CheckpointError>([] {
                         cohort::parse_manifest(
                             edited([](auto& j) { j["files"][0]["checksum"] = "xyz"; }));
                       }),
                       "not 16 hex digits"));
}

TEST(Manifest, HugeCountsDoNotOverflowTheBoundsCheck) {
  const std::string text = edited([](auto& j) {
    j["arrays"][0]["count"] = std::uint64_t{1} << 62;
    j["arrays"][0]["pieces"][0]["count"] = (std::uint64_t{1} << 62) - 33;
  });
  EXPECT_TRUE(contains(message_of<CheckpointError>([&] { cohort::parse_manifest(text); }),
                       "lies outside rank-0.bin"));
}

// Every error says where it was raised, as every cohort error does (Note in core/error.hpp).
TEST(Manifest, ErrorsEndWithTheFileAndLineThatRaisedThem) {
  const std::string error = message_of<CheckpointError>([] { cohort::parse_manifest("[1, 2]"); });
  EXPECT_TRUE(std::regex_search(
      error,
      std::regex(
          R"(^cohort: malformed checkpoint manifest: .* \((.*/)?src/checkpoint/manifest\.cpp:[0-9]+\)$)")))
      << error;
}

using cohort::detail::RankReport;

TEST(CheckpointReport, RoundTripsEveryField) {
  RankReport written;
  written.file_bytes = 0x0123456789abcdefULL;
  written.piece_checksums = {0, 1, UINT64_MAX, 0x8000000000000001ULL};
  EXPECT_EQ(cohort::detail::decode_report(cohort::detail::encode_report(written), "rank 1"),
            written);
  const RankReport failed = RankReport::failure(std::string("cohort: disk full\0with a NUL", 28));
  EXPECT_EQ(cohort::detail::decode_report(cohort::detail::encode_report(failed), "rank 1"), failed);
  EXPECT_EQ(cohort::detail::decode_report(cohort::detail::encode_report(RankReport{}), "rank 1"),
            RankReport{});
}

TEST(CheckpointReport, MalformedReportsAreNamedErrors) {
  RankReport report;
  report.file_bytes = 4096;
  report.piece_checksums = {7, 8};
  const std::string good = cohort::detail::encode_report(report);
  auto error_of = [](const std::string& bytes) {
    return message_of<CheckpointError>([&] { cohort::detail::decode_report(bytes, "rank 3"); });
  };
  // Every truncation is refused, naming the sender.
  for (std::size_t size = 0; size < good.size(); ++size) {
    EXPECT_TRUE(
        contains(error_of(good.substr(0, size)), "rank 3 sent a malformed checkpoint report"))
        << size;
  }
  EXPECT_TRUE(
      contains(error_of(good.substr(0, 5)), "the error's length needs 4 bytes, 3 are left"));
  EXPECT_TRUE(contains(error_of(good + "x"), "1 trailing bytes"));
  std::string other_format = good;
  other_format[0] = 2;
  EXPECT_TRUE(contains(error_of(other_format), "format 2, this cohort reads 1"));
  std::string unknown_status = good;
  unknown_status[1] = 9;
  EXPECT_TRUE(contains(error_of(unknown_status), "status 9"));
  std::string failed_without_text = good;
  failed_without_text[1] = 1;
  EXPECT_TRUE(contains(error_of(failed_without_text), "a failure without an error text"));
  // A count of pieces larger than the bytes left is refused before anything is reserved.
  std::string huge = good.substr(0, good.size() - 20);
  huge += std::string("\xff\xff\xff\x0f", 4);
  EXPECT_TRUE(contains(error_of(huge), "piece checksums in 0 bytes"));
  // The old free text is not a report.
  EXPECT_TRUE(contains(error_of("ok 4096 0000000000000007"), "malformed checkpoint report"));
}

}  // namespace
