#pragma once

// Small resources for tests of the adaptors and the pool: ones that fail on purpose, or that
// claim to be device-only while handing out host memory.

#include <cohort/core/error.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <atomic>
#include <memory>

namespace cohort_test {

/// Throws OutOfMemory from every allocation, and counts the attempts.
class FailingResource final : public cohort::MemoryResource {
 public:
  FailingResource() : MemoryResource(cohort::Device::host(), true, false, "failing") {}
  int attempts() const noexcept { return attempts_.load(); }

 private:
  void* do_allocate(std::size_t /*bytes*/, const cohort::Stream* /*stream*/) override {
    ++attempts_;
    COHORT_FAIL(cohort::OutOfMemory, "FailingResource never has memory");
  }
  void do_deallocate(void* /*pointer*/, std::size_t /*bytes*/,
                     const cohort::Stream* /*stream*/) noexcept override {}
  std::atomic<int> attempts_{0};
};

/// Claims to be device-only memory on cuda:0 (it is host memory underneath), to test the checks
/// that depend on the kind of memory without a GPU.
class FakeDeviceResource final : public cohort::MemoryResource {
 public:
  FakeDeviceResource()
      : MemoryResource(cohort::Device::cuda(0), false, true, "fake_device(cuda:0)") {}

 private:
  void* do_allocate(std::size_t bytes, const cohort::Stream* /*stream*/) override {
    return host_->allocate(bytes);
  }
  void do_deallocate(void* pointer, std::size_t bytes,
                     const cohort::Stream* /*stream*/) noexcept override {
    host_->deallocate(pointer, bytes);
  }
  std::shared_ptr<cohort::HostResource> host_ = std::make_shared<cohort::HostResource>();
};

}  // namespace cohort_test
