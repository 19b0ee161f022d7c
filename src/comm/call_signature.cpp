#include "comm/call_signature.hpp"

#include <sstream>

namespace cohort::detail {
namespace {

// The word's fields, high to low: op (3 bits), reduce op (3), dtype (3), root (11), count (44).
constexpr int kOpShift = 61;
constexpr int kReduceShift = 58;
constexpr int kDTypeShift = 55;
constexpr int kRootShift = 44;
constexpr std::uint64_t kRootMask = 0x7ff;
constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kRootShift) - 1;

}  // namespace

std::uint64_t call_signature(CollectiveOp op, ReduceOp reduce, DType dtype, int root,
                             std::size_t count) noexcept {
  const bool reduces = op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter;
  const std::uint64_t root_bits =
      op == CollectiveOp::broadcast ? static_cast<std::uint64_t>(root) : 0;
  const std::uint64_t dtype_bits =
      op == CollectiveOp::barrier ? 0 : static_cast<std::uint64_t>(dtype);
  const std::uint64_t reduce_bits = reduces ? static_cast<std::uint64_t>(reduce) : 0;
  const std::uint64_t count_bits =
      op == CollectiveOp::barrier ? 0 : static_cast<std::uint64_t>(count);
  return (static_cast<std::uint64_t>(op) << kOpShift) | (reduce_bits << kReduceShift) |
         (dtype_bits << kDTypeShift) | ((root_bits & kRootMask) << kRootShift) |
         (count_bits & kCountMask);
}

std::uint64_t call_signature(const Communicator::Call& call) noexcept {
  // The elements each rank contributes, as the flight recorder counts them, so that a mismatch
  // found in a round and one found by the diagnosis name the same count.
  return call_signature(call.op, call.reduce, call.input.dtype(), call.root, call.input.count());
}

std::uint64_t call_signature(const CollectiveRecord& record) noexcept {
  return call_signature(record.op, record.reduce, record.dtype, record.root, record.count);
}

std::string describe_signature(std::uint64_t signature) {
  const auto op = static_cast<CollectiveOp>(signature >> kOpShift);
  const auto reduce = static_cast<ReduceOp>((signature >> kReduceShift) & 7);
  const auto dtype = static_cast<DType>((signature >> kDTypeShift) & 7);
  const std::uint64_t root = (signature >> kRootShift) & kRootMask;
  const std::uint64_t count = signature & kCountMask;
  std::ostringstream text;
  text << to_string(op);
  if (op != CollectiveOp::barrier) {
    text << " of " << count << " x " << to_string(dtype);
    if (op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter) {
      text << " " << to_string(reduce);
    }
    if (op == CollectiveOp::broadcast) {
      text << " from root " << root;
    }
  }
  return text.str();
}

std::uint32_t signature_tag(std::uint64_t signature) noexcept {
  // A 64-bit finalizer (splitmix64's), so that calls differing in any field differ in the low
  // half too, then the halves folded.
  std::uint64_t x = signature;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<std::uint32_t>(x ^ (x >> 32));
}

}  // namespace cohort::detail
