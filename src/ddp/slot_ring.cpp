#include "slot_ring.hpp"

#include <cohort/core/error.hpp>
#include <cohort/core/format.hpp>
#include <cohort/core/logging.hpp>

#include <algorithm>
#include <utility>

namespace cohort::detail {

SlotRing::SlotRing(std::shared_ptr<MemoryResource> resource, std::size_t bytes, int count,
                   MemoryCategory category, std::string what)
    : resource_(std::move(resource)), bytes_(bytes), category_(category), what_(std::move(what)) {
  slots_.reserve(static_cast<std::size_t>(count) + 2);
  for (int i = 0; i < count; ++i) grow();
}

void SlotRing::grow() {
  Slot slot{Buffer(resource_, bytes_, category_), nullptr, Event::create(resource_->device())};
  slot.data = slot.buffer.data();
  slots_.push_back(std::move(slot));
  free_.push_back(static_cast<int>(slots_.size() - 1));
}

int SlotRing::acquire(const Stream& stream) {
  if (free_.empty()) {
    if (!grew_) {
      COHORT_LOG(info) << what_ << ": the program holds more at once than the " << slots_.size()
                       << " planned buffers of " << format_bytes(bytes_)
                       << "; adding one (each further one is added too, and kept)";
      grew_ = true;
    }
    grow();
  }
  const int slot = free_.front();
  free_.pop_front();
  stream.wait(slots_[static_cast<std::size_t>(slot)].released);
  return slot;
}

void SlotRing::release(int slot, const Stream& stream) {
  COHORT_CHECK(slot >= 0 && static_cast<std::size_t>(slot) < slots_.size() &&
                   std::find(free_.begin(), free_.end(), slot) == free_.end(),
               Error, "SlotRing: slot " + std::to_string(slot) + " given back twice");
  slots_[static_cast<std::size_t>(slot)].released.record(stream);
  free_.push_back(slot);
}

}  // namespace cohort::detail
