#include "resource_suite.hpp"
#include "test_resources.hpp"

#include <cohort/core/device_span.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/memory_report.hpp>

#include <algorithm>

namespace cohort_test {
namespace {

/// The registry row of `category` on `device`, or zeros.
cohort::MemoryUsage usage_of(cohort::MemoryCategory category, cohort::Device device) {
  for (const cohort::MemoryUsage& usage : cohort::memory_usage()) {
    if (usage.category == category && usage.device == device) {
      return usage;
    }
  }
  return cohort::MemoryUsage{category, device, 0, 0};
}

TEST(Buffer, DefaultIsEmptyOnTheHost) {
  cohort::Buffer buffer;
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size_bytes(), 0u);
  EXPECT_EQ(buffer.device(), cohort::Device::host());
  EXPECT_EQ(buffer.resource(), nullptr);
  EXPECT_TRUE(buffer.view<float>().empty());
  EXPECT_THROW((void)buffer.device_view<float>(), cohort::InvalidArgument);
  buffer.reset();  // harmless
}

TEST(Buffer, NeedsAResource) {
  EXPECT_THROW(cohort::Buffer(nullptr, 16), cohort::InvalidArgument);
}

TEST(Buffer, MovesOwnershipAndFreesExactlyOnce) {
  auto resource = std::make_shared<cohort::HostResource>();
  cohort::Buffer a(resource, 100);
  void* data = a.data();
  cohort::Buffer b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size_bytes(), 100u);
  EXPECT_EQ(b.resource(), resource);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.resource(), nullptr);
  EXPECT_EQ(resource->allocations_in_use(), 1u);

  cohort::Buffer c(resource, 50);
  c = std::move(b);  // frees c's 50 bytes, takes b's 100
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(resource->bytes_in_use(), 100u);
  EXPECT_EQ(resource->allocations_in_use(), 1u);
  c.reset();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(resource->bytes_in_use(), 0u);
}

TEST(Buffer, KeepsItsResourceAlive) {
  std::weak_ptr<cohort::HostResource> watch;
  cohort::Buffer buffer;
  {
    auto resource = std::make_shared<cohort::HostResource>();
    watch = resource;
    buffer = cohort::Buffer(resource, 64);
  }
  EXPECT_FALSE(watch.expired());
  buffer.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(Buffer, ChangesTheStreamItFreesOn) {
  auto resource = std::make_shared<cohort::HostResource>();
  const cohort::Stream stream = cohort::Stream::create(cohort::Device::host());
  cohort::Buffer buffer(resource, 64);
  EXPECT_FALSE(buffer.stream().has_value());
  buffer.set_stream(stream);
  ASSERT_TRUE(buffer.stream().has_value());
  EXPECT_EQ(buffer.stream()->device(), cohort::Device::host());
  std::atomic<bool> ran{false};
  stream.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ran = true;
  });
  buffer.reset();  // host memory: waits for the stream's work
  EXPECT_TRUE(ran.load());
}

TEST(DeviceSpan, ConvertsToConstAndSlices) {
  float values[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const cohort::DeviceSpan<float> span(values, 8);
  const cohort::DeviceSpan<const float> read_only = span;
  EXPECT_EQ(read_only.data(), values);
  EXPECT_EQ(read_only.size(), 8u);
  EXPECT_EQ(read_only.size_bytes(), 32u);
  const cohort::DeviceSpan<const float> middle = read_only.subspan(2, 3);
  EXPECT_EQ(middle.size(), 3u);
  EXPECT_EQ(middle[0], 2.0f);
  EXPECT_EQ(middle[2], 4.0f);
  EXPECT_TRUE(cohort::DeviceSpan<int>().empty());
  static_assert(!std::is_convertible_v<cohort::DeviceSpan<const float>, cohort::DeviceSpan<float>>);
}

TEST(MemoryReport, AccountsBuffersByCategoryAndDevice) {
  auto resource = std::make_shared<cohort::HostResource>();
  const cohort::Device host = cohort::Device::host();
  const cohort::MemoryUsage parameters_before = usage_of(cohort::MemoryCategory::parameters, host);
  const cohort::MemoryUsage gradients_before = usage_of(cohort::MemoryCategory::gradients, host);
  const cohort::MemoryUsage total_before = cohort::memory_total(host);
  {
    cohort::Buffer weights(resource, 1u << 20, cohort::MemoryCategory::parameters);
    cohort::Buffer grads(resource, 512u << 10, cohort::MemoryCategory::gradients);
    EXPECT_EQ(usage_of(cohort::MemoryCategory::parameters, host).current_bytes,
              parameters_before.current_bytes + (1u << 20));
    EXPECT_EQ(usage_of(cohort::MemoryCategory::gradients, host).current_bytes,
              gradients_before.current_bytes + (512u << 10));
    EXPECT_EQ(cohort::memory_total(host).current_bytes,
              total_before.current_bytes + (1u << 20) + (512u << 10));

    cohort::reset_memory_peaks();
    grads.reset();
    const cohort::MemoryUsage gradients = usage_of(cohort::MemoryCategory::gradients, host);
    EXPECT_EQ(gradients.current_bytes, gradients_before.current_bytes);
    EXPECT_EQ(gradients.peak_bytes, gradients_before.current_bytes + (512u << 10));

    const std::string report = cohort::memory_report();
    EXPECT_NE(report.find("category"), std::string::npos) << report;
    EXPECT_NE(report.find("parameters"), std::string::npos) << report;
    EXPECT_NE(report.find("gradients"), std::string::npos) << report;
    EXPECT_NE(report.find("total"), std::string::npos) << report;
    if (parameters_before.current_bytes == 0) {
      EXPECT_NE(report.find("1.00 MiB"), std::string::npos) << report;
    }
  }
  EXPECT_EQ(cohort::memory_total(host).current_bytes, total_before.current_bytes);
  cohort::reset_memory_peaks();
  EXPECT_EQ(usage_of(cohort::MemoryCategory::parameters, host).peak_bytes,
            parameters_before.current_bytes);
}

TEST(MemoryReport, NamesCategoriesAndFormatsBytes) {
  EXPECT_EQ(cohort::to_string(cohort::MemoryCategory::parameters), "parameters");
  EXPECT_EQ(cohort::to_string(cohort::MemoryCategory::gradients), "gradients");
  EXPECT_EQ(cohort::to_string(cohort::MemoryCategory::optimizer_state), "optimizer_state");
  EXPECT_EQ(cohort::to_string(cohort::MemoryCategory::buckets), "buckets");
  EXPECT_EQ(cohort::to_string(cohort::MemoryCategory::activations), "activations");
  EXPECT_EQ(cohort::to_string(cohort::MemoryCategory::other), "other");
  EXPECT_EQ(cohort::format_bytes(0), "0 B");
  EXPECT_EQ(cohort::format_bytes(1023), "1023 B");
  EXPECT_EQ(cohort::format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(cohort::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(cohort::format_bytes(std::size_t{3} << 30), "3.00 GiB");
}

TEST(MemoryReport, RefusesDevicesItHasNoRowFor) {
  EXPECT_THROW((void)cohort::memory_total(cohort::Device::cuda(cohort::kMaxReportedCudaDevices)),
               cohort::InvalidArgument);
}

}  // namespace
}  // namespace cohort_test
