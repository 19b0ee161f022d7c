#pragma once

/// @file
/// The vocabulary of collectives: reduce operations, backends and the record of one collective.
/// Their code is in `src/comm/types.cpp`. The typed views of the memory collectives work on,
/// `TensorView`, are a core type (`cohort/core/tensor_view.hpp`), included here.

#include <cohort/core/dtype.hpp>
#include <cohort/core/tensor_view.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cohort {

enum class ReduceOp : std::uint8_t { sum, avg, min, max };

/// "sum", "avg", "min", "max".
std::string_view to_string(ReduceOp op) noexcept;

/// The collective engine behind a communicator.
enum class Backend : std::uint8_t {
  gloo,          ///< host memory, TCP between processes (Gloo)
  nccl,          ///< CUDA memory, NVLink/PCIe/network (NCCL)
  shm,           ///< host memory shared by the ranks of one host (/dev/shm)
  hierarchical,  ///< host memory across hosts: shared memory within each, Gloo between them
};

/// How host communicators move data. `automatic`: shared memory among ranks on one host,
/// Gloo between hosts, and the two combined (hierarchical all-reduce) for a communicator that
/// spans hosts with several ranks on one.
enum class HostTransport : std::uint8_t { automatic, shm, gloo };

std::string_view to_string(HostTransport transport) noexcept;

std::string_view to_string(Backend backend) noexcept;

enum class CollectiveOp : std::uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  barrier
};

std::string_view to_string(CollectiveOp op) noexcept;

/// One entry of a communicator's flight recorder: what a recent collective was and how it ended.
struct CollectiveRecord {
  enum class State : std::uint8_t { issued, completed, failed };
  std::uint64_t sequence = 0;
  CollectiveOp op = CollectiveOp::barrier;
  DType dtype = DType::u8;
  ReduceOp reduce = ReduceOp::sum;
  std::size_t count = 0;  ///< elements each rank contributes
  std::size_t bytes = 0;  ///< bytes each rank contributes
  int root = -1;
  State state = State::issued;
  double issued_seconds_ago = 0.0;
  double duration_ms = -1.0;  ///< -1 while not finished

  /// One line: "#12 all_reduce 1048576 x f32 (4.00 MiB) sum: completed in 3.100 ms" (or "in
  /// flight for 1513 ms", or "failed after 1513 ms").
  std::string describe() const;
};

}  // namespace cohort
