#pragma once

// The typed suite every memory resource passes. A test file defines "cases" (how to make a
// resource and a stream for it, and what the resource should report) and instantiates the suite:
//
//   using HostCases = ::testing::Types<HostCase, HostPoolCase>;
//   INSTANTIATE_TYPED_TEST_SUITE_P(Host, ResourceTest, HostCases);
//
// test_memory_resources.cpp instantiates it for the host resources, test_memory_gpu.cpp for the
// CUDA ones (which skip without a GPU).

#include <cohort/core/device.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/limit_adaptor.hpp>
#include <cohort/memory/memory_report.hpp>
#include <cohort/memory/memory_resource.hpp>
#include <cohort/memory/statistics_adaptor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cohort_test {

/// A case describes one resource under test:
///   static constexpr bool kNeedsGpu;                // skip without a GPU
///   static constexpr bool kHostAccessible, kDeviceAccessible;
///   static constexpr int kOpsPerThread;             // for the 8-thread test
///   static std::shared_ptr<cohort::MemoryResource> make();
///   static cohort::Device device();                 // what the resource reports
///   static cohort::Stream make_stream();            // a stream its memory can be ordered on

/// Runs `body` and returns the message of the exception of type `E` it throws ("" if none).
template <typename E, typename F>
std::string thrown_message(F&& body) {
  try {
    std::forward<F>(body)();
  } catch (const E& error) {
    return error.what();
  }
  return {};
}

template <typename Case>
class ResourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Case::kNeedsGpu && cohort::cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU: " << cohort::cuda_unavailable_reason();
    }
    resource_ = Case::make();
    stream_.emplace(Case::make_stream());
  }

  void TearDown() override {
    if (stream_) {
      stream_->synchronize();
    }
    if (resource_) {
      EXPECT_EQ(resource_->bytes_in_use(), 0u) << "a test leaked memory";
    }
  }

  std::shared_ptr<cohort::MemoryResource> resource_;
  std::optional<cohort::Stream> stream_;
};

TYPED_TEST_SUITE_P(ResourceTest);

TYPED_TEST_P(ResourceTest, DescribesItself) {
  EXPECT_EQ(this->resource_->device(), TypeParam::device());
  EXPECT_EQ(this->resource_->host_accessible(), TypeParam::kHostAccessible);
  EXPECT_EQ(this->resource_->device_accessible(), TypeParam::kDeviceAccessible);
  EXPECT_FALSE(this->resource_->name().empty());
  EXPECT_EQ(this->resource_->bytes_in_use(), 0u);
  EXPECT_EQ(this->resource_->allocations_in_use(), 0u);
}

TYPED_TEST_P(ResourceTest, EmptyAllocationIsNullAndFreeingItIsHarmless) {
  cohort::MemoryResource& resource = *this->resource_;
  EXPECT_EQ(resource.allocate(0), nullptr);
  EXPECT_EQ(resource.allocate(0, *this->stream_), nullptr);
  resource.deallocate(nullptr, 0);
  resource.deallocate(nullptr, 0, *this->stream_);
  EXPECT_EQ(resource.allocations_in_use(), 0u);

  cohort::Buffer empty(this->resource_, 0);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
  if (TypeParam::kHostAccessible) {
    EXPECT_TRUE(empty.view<float>().empty());
  }
  if (TypeParam::kDeviceAccessible) {
    EXPECT_EQ(empty.device_view<float>().size(), 0u);
  }
}

TYPED_TEST_P(ResourceTest, SizesOneOddAndLargeAreAlignedDistinctAndUsable) {
  cohort::MemoryResource& resource = *this->resource_;
  const std::vector<std::size_t> sizes = {1, 7, 255, 256, 257, 4097, 65537, 1'000'003, 64u << 20};
  // Freed first, so that a pool hands out cached blocks below: 1, 255 and 256 bytes share a size
  // class, and a cached block given to two of them must be caught.
  for (const std::size_t bytes : sizes) {
    resource.deallocate(resource.allocate(bytes), bytes);
  }
  std::vector<void*> pointers;
  std::size_t total = 0;
  for (const std::size_t bytes : sizes) {
    void* pointer = resource.allocate(bytes);
    ASSERT_NE(pointer, nullptr) << bytes << " bytes";
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pointer) % cohort::kAllocationAlignment, 0u)
        << bytes << " bytes at " << pointer;
    if (TypeParam::kHostAccessible) {  // each block its own byte, checked after all are made
      std::memset(pointer, static_cast<int>(0x11 * (pointers.size() + 1)), bytes);
    }
    pointers.push_back(pointer);
    total += bytes;
  }
  // No two blocks overlap: by their address ranges, and (where the host can look) by content,
  // so a block handed out twice or cut short is caught.
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return std::less<>()(pointers[a], pointers[b]); });
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    const auto end = reinterpret_cast<std::uintptr_t>(pointers[order[k]]) + sizes[order[k]];
    EXPECT_LE(end, reinterpret_cast<std::uintptr_t>(pointers[order[k + 1]]))
        << sizes[order[k]] << " bytes at " << pointers[order[k]] << " overlap "
        << sizes[order[k + 1]] << " bytes at " << pointers[order[k + 1]];
  }
  if (TypeParam::kHostAccessible) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const auto* block = static_cast<const unsigned char*>(pointers[i]);
      const auto pattern = static_cast<unsigned char>(0x11 * (i + 1));
      const auto wrong = std::find_if(block, block + sizes[i],
                                      [&](unsigned char byte) { return byte != pattern; });
      EXPECT_EQ(wrong, block + sizes[i]) << "block " << i << " (" << sizes[i]
                                         << " bytes) was overwritten at byte " << (wrong - block);
    }
  }
  EXPECT_EQ(resource.bytes_in_use(), total);
  EXPECT_EQ(resource.allocations_in_use(), sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    resource.deallocate(pointers[i], sizes[i]);
  }
  EXPECT_EQ(resource.bytes_in_use(), 0u);
  EXPECT_EQ(resource.allocations_in_use(), 0u);
}

TYPED_TEST_P(ResourceTest, StreamOrderedAllocationIsUsableAfterTheStream) {
  cohort::MemoryResource& resource = *this->resource_;
  const cohort::Stream& stream = *this->stream_;
  void* pointer = resource.allocate(1000, stream);
  ASSERT_NE(pointer, nullptr);
  EXPECT_EQ(resource.bytes_in_use(), 1000u);
  stream.synchronize();
  if (TypeParam::kHostAccessible) {
    std::memset(pointer, 7, 1000);
    EXPECT_EQ(static_cast<unsigned char*>(pointer)[999], 7);
  }
  resource.deallocate(pointer, 1000, stream);
  EXPECT_EQ(resource.bytes_in_use(), 0u);
}

TYPED_TEST_P(ResourceTest, StatisticsCountExactly) {
  auto counted = std::make_shared<cohort::StatisticsAdaptor>(this->resource_);
  EXPECT_EQ(counted->device(), TypeParam::device());
  EXPECT_EQ(counted->host_accessible(), TypeParam::kHostAccessible);
  void* a = counted->allocate(100);
  void* b = counted->allocate(200, *this->stream_);
  EXPECT_EQ(counted->allocate(0), nullptr);  // not counted
  void* c = counted->allocate(300);
  cohort::MemoryStatistics stats = counted->statistics();
  EXPECT_EQ(stats.bytes.current, 600u);
  EXPECT_EQ(stats.bytes.peak, 600u);
  EXPECT_EQ(stats.bytes.total, 600u);
  EXPECT_EQ(stats.allocations.current, 3u);

  counted->deallocate(b, 200, *this->stream_);
  void* d = counted->allocate(50);
  stats = counted->statistics();
  EXPECT_EQ(stats.bytes.current, 450u);
  EXPECT_EQ(stats.bytes.peak, 600u);
  EXPECT_EQ(stats.bytes.total, 650u);
  EXPECT_EQ(stats.allocations.current, 3u);
  EXPECT_EQ(stats.allocations.peak, 3u);
  EXPECT_EQ(stats.allocations.total, 4u);

  counted->reset_peaks();
  EXPECT_EQ(counted->statistics().bytes.peak, 450u);
  counted->deallocate(a, 100);
  counted->deallocate(c, 300);
  counted->deallocate(d, 50);
  stats = counted->statistics();
  EXPECT_EQ(stats.bytes.current, 0u);
  EXPECT_EQ(stats.bytes.peak, 450u);
  EXPECT_EQ(stats.allocations.current, 0u);
  EXPECT_EQ(this->resource_->bytes_in_use(), 0u);
}

TYPED_TEST_P(ResourceTest, LimitRejectsBeyondTheCapAndNamesTheNumbers) {
  auto capped = std::make_shared<cohort::LimitAdaptor>(this->resource_, 4096);
  void* a = capped->allocate(3000);
  EXPECT_EQ(capped->used_bytes(), 3000u);
  const std::string message =
      thrown_message<cohort::OutOfMemory>([&] { (void)capped->allocate(2000); });
  EXPECT_NE(message.find("2000 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("3000 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("4096 bytes"), std::string::npos) << message;
  EXPECT_EQ(capped->used_bytes(), 3000u);  // the failed request was rolled back

  void* b = capped->allocate(1096, *this->stream_);  // exactly up to the limit
  EXPECT_EQ(capped->used_bytes(), 4096u);
  EXPECT_THROW((void)capped->allocate(1), cohort::OutOfMemory);
  capped->deallocate(a, 3000);
  capped->deallocate(b, 1096, *this->stream_);
  EXPECT_EQ(capped->used_bytes(), 0u);
  EXPECT_EQ(this->resource_->bytes_in_use(), 0u);
}

TYPED_TEST_P(ResourceTest, ManyThreadsAllocateAndFreeAtOnce) {
  constexpr int kThreads = 8;
  constexpr std::size_t kMaxLive = 4;
  auto counted = std::make_shared<cohort::StatisticsAdaptor>(this->resource_);
  std::vector<std::size_t> allocations_made(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(1234 + t));
      std::uniform_int_distribution<std::size_t> size(1, 70'000);
      std::vector<std::pair<void*, std::size_t>> live;
      const auto tag = static_cast<unsigned char>(t + 1);
      try {
        for (int op = 0; op < TypeParam::kOpsPerThread; ++op) {
          if (live.size() < kMaxLive && (live.empty() || random() % 2 == 0)) {
            const std::size_t bytes = size(random);
            void* pointer = counted->allocate(bytes);
            if (TypeParam::kHostAccessible) {  // a block handed to two threads shows up here
              static_cast<unsigned char*>(pointer)[0] = tag;
              static_cast<unsigned char*>(pointer)[bytes - 1] = tag;
            }
            live.emplace_back(pointer, bytes);
            ++allocations_made[static_cast<std::size_t>(t)];
          } else {
            const std::size_t index = random() % live.size();
            const auto [pointer, bytes] = live[index];
            if (TypeParam::kHostAccessible &&
                (static_cast<unsigned char*>(pointer)[0] != tag ||
                 static_cast<unsigned char*>(pointer)[bytes - 1] != tag)) {
              errors[static_cast<std::size_t>(t)] = "a live block was overwritten";
            }
            counted->deallocate(pointer, bytes);
            live[index] = live.back();
            live.pop_back();
          }
        }
        for (const auto& [pointer, bytes] : live) {
          counted->deallocate(pointer, bytes);
        }
      } catch (const std::exception& error) {
        errors[static_cast<std::size_t>(t)] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  std::size_t expected_total = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
    expected_total += allocations_made[static_cast<std::size_t>(t)];
  }
  const cohort::MemoryStatistics stats = counted->statistics();
  EXPECT_EQ(stats.bytes.current, 0u);
  EXPECT_EQ(stats.allocations.current, 0u);
  EXPECT_EQ(stats.allocations.total, expected_total);
  EXPECT_LE(stats.allocations.peak, kThreads * kMaxLive);
  EXPECT_GE(stats.allocations.peak, 1u);
  EXPECT_EQ(this->resource_->bytes_in_use(), 0u);
  EXPECT_EQ(this->resource_->allocations_in_use(), 0u);
}

TYPED_TEST_P(ResourceTest, BufferGivesTypedViewsThatFitTheMemory) {
  const cohort::MemoryUsage before = cohort::memory_total(TypeParam::device());
  {
    cohort::Buffer buffer(this->resource_, 1000 * sizeof(std::int32_t), *this->stream_,
                          cohort::MemoryCategory::activations);
    EXPECT_EQ(buffer.size_bytes(), 4000u);
    EXPECT_EQ(buffer.device(), TypeParam::device());
    EXPECT_EQ(buffer.category(), cohort::MemoryCategory::activations);
    EXPECT_EQ(cohort::memory_total(TypeParam::device()).current_bytes, before.current_bytes + 4000);
    this->stream_->synchronize();
    if (TypeParam::kHostAccessible) {
      const std::span<std::int32_t> values = buffer.view<std::int32_t>();
      ASSERT_EQ(values.size(), 1000u);
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<std::int32_t>(3 * i + 1);
      }
      const cohort::Buffer& read_only = buffer;
      std::int64_t sum = 0;
      for (const std::int32_t value : read_only.view<std::int32_t>()) {
        sum += value;
      }
      EXPECT_EQ(sum, 3 * 999 * 1000 / 2 + 1000);
      EXPECT_EQ(buffer.view<double>().size(), 500u);
    } else {
      EXPECT_THROW((void)buffer.view<std::int32_t>(), cohort::InvalidArgument);
    }
    if (TypeParam::kDeviceAccessible) {
      const cohort::DeviceSpan<std::int32_t> device_values = buffer.device_view<std::int32_t>();
      EXPECT_EQ(device_values.size(), 1000u);
      EXPECT_EQ(device_values.data(), buffer.data());
    } else {
      EXPECT_THROW((void)buffer.device_view<std::int32_t>(), cohort::InvalidArgument);
    }
    cohort::Buffer odd(this->resource_, 10);
    const std::string message = thrown_message<cohort::InvalidArgument>([&] {
      if (TypeParam::kHostAccessible) {
        (void)odd.view<float>();
      } else {
        (void)odd.device_view<float>();
      }
    });
    EXPECT_NE(message.find("10 bytes"), std::string::npos) << message;
  }
  EXPECT_EQ(cohort::memory_total(TypeParam::device()).current_bytes, before.current_bytes);
}

TYPED_TEST_P(ResourceTest, BufferFreesOnItsStream) {
  {
    cohort::Buffer buffer(this->resource_, 4096, *this->stream_);
    ASSERT_TRUE(buffer.stream().has_value());
    EXPECT_EQ(this->resource_->bytes_in_use(), 4096u);
    cohort::Buffer moved = std::move(buffer);
    EXPECT_TRUE(buffer.empty());  // NOLINT(bugprone-use-after-move): moved-from state is specified
    EXPECT_FALSE(buffer.stream().has_value());
    EXPECT_EQ(moved.size_bytes(), 4096u);
    EXPECT_EQ(this->resource_->bytes_in_use(), 4096u);
  }
  EXPECT_EQ(this->resource_->bytes_in_use(), 0u);
}

REGISTER_TYPED_TEST_SUITE_P(ResourceTest, DescribesItself,
                            EmptyAllocationIsNullAndFreeingItIsHarmless,
                            SizesOneOddAndLargeAreAlignedDistinctAndUsable,
                            StreamOrderedAllocationIsUsableAfterTheStream, StatisticsCountExactly,
                            LimitRejectsBeyondTheCapAndNamesTheNumbers,
                            ManyThreadsAllocateAndFreeAtOnce, BufferGivesTypedViewsThatFitTheMemory,
                            BufferFreesOnItsStream);

}  // namespace cohort_test
