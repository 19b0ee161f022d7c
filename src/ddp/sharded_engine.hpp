#pragma once

// What `DataParallel` holds and does in its sharded modes (Notes [Shard layout], [ZeRO-2] and
// [ZeRO-3]): DataParallel checks the registry and options across ranks and picks the memory,
// then hands every call to this engine. ZeRO-2's buckets are here (sharded_engine.cpp), ZeRO-3's
// units in sharded_units.cpp.

#include "slot_ring.hpp"
#include "step_timer.hpp"
#include "unit_use.hpp"

#include <cohort/comm/world.hpp>
#include <cohort/ddp/data_parallel.hpp>
#include <cohort/ddp/shard_layout.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/memory_estimate.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace cohort::detail {

class ShardedEngine {
 public:
  struct Setup {
    World& world;
    Communicator& comm;
    const ParamRegistry& registry;
    const DataParallelOptions& options;
    Stream compute;
    Stream comm_stream;
    std::shared_ptr<MemoryResource> memory;
    BucketSizing sizing;
    MemoryAvailability room;  ///< measured before the ranks met
  };

  /// Lays out the shards and allocates them (refusing what cannot fit for all the host's ranks).
  explicit ShardedEngine(const Setup& setup);
  ~ShardedEngine();
  ShardedEngine(const ShardedEngine&) = delete;
  ShardedEngine& operator=(const ShardedEngine&) = delete;

  /// Runs the options' `init` and, with `broadcast_parameters`, gives every rank rank 0's values.
  void initialise(DataParallel& dp);

  TensorView param(ParamHandle handle);
  TensorView grad(ParamHandle handle);
  void grad_ready(ParamHandle handle, bool in_no_sync);
  /// Outside `no_sync`: the end of a step (the unused-parameter rule, every remaining
  /// reduce-scatter, the compute stream waits). Inside: the end of a micro-batch.
  void sync_grads(bool in_no_sync);
  void zero_grads();
  void broadcast_parameters();
  void gather(UnitHandle unit, Pass pass);
  void release(UnitHandle unit);
  void params_updated();
  void settle_for_overwrite();

  TensorView param_arena();
  TensorView param_shard() const;
  TensorView grad_shard() const;
  const ShardLayout& layout() const noexcept { return layout_; }
  const BucketPlan& plan() const noexcept { return plan_; }
  StepStats last_step_stats() const { return timer_.last(); }
  std::size_t buckets_issued() const noexcept { return issued_in_step_; }

 private:
  /// A bucket (ZeRO-2) or a unit (ZeRO-3).
  struct Segment {
    int slot = -1;                  ///< its gradient buffer while open (ZeRO-3: while in backward)
    std::size_t pending = 0;        ///< parameters not marked since it opened
    bool accumulate = false;        ///< the shard already holds a reduce-scatter of this window
    bool gather_pending = false;    ///< ZeRO-2: its all-gather after the step not yet waited for
    int param_slot = -1;            ///< ZeRO-3: its gathered parameters (in flight or ready)
    bool reduced = false;           ///< ZeRO-3: reduce-scattered in this backward
    Work tags;                      ///< ZeRO-3 on the host: the all-gather of every rank's tag
    Pass tag_pass = Pass::forward;  ///< the pass that tag was for
  };

  bool zero3() const noexcept { return layout_.sharding == Sharding::zero3; }
  std::size_t element_bytes() const noexcept { return size_of(layout_.dtype); }
  TensorView arena_view() const;
  TensorView slot_view(const SlotRing& ring, int slot, std::size_t count) const;
  /// This rank's piece of segment `s` in a shard buffer.
  TensorView piece_of(const Buffer& shard, std::size_t s) const;
  const ParamInfo& checked(ParamHandle handle) const { return registry_.info(handle); }
  std::uint32_t segment_of_unit(std::uint32_t unit) const { return unit_segment_[unit]; }
  void comm_after_compute();
  /// Reduce-scatters segment `s` from `input` into the shard (adding to it when it accumulates)
  /// and gives the gradient buffer back to `ring`.
  void reduce_scatter(std::size_t s, SlotRing& ring);
  /// The unused-parameter rule at the end of a step; returns the unmarked parameters.
  std::vector<std::uint32_t> check_unused() const;

  // ZeRO-2 (sharded_engine.cpp)
  void open(std::size_t segment);
  void issue_ready();
  void wait_gathers();

  // ZeRO-3 (sharded_units.cpp)
  void allocate_units();
  TensorView unit_param(ParamHandle handle);
  TensorView unit_grad(ParamHandle handle);
  void unit_grad_ready(ParamHandle handle, bool in_no_sync);
  void unit_sync_grads(bool in_no_sync);
  void gather_unit(UnitHandle unit, Pass pass);
  void release_unit(UnitHandle unit);
  /// Issues segment `s`'s all-gather (after its tag's, on the host) unless it is in flight or
  /// done.
  void start_gather(std::size_t s, Pass pass, bool prefetch);
  /// Prefetches unit `unit` for `pass` when a slot is free.
  void prefetch(std::int64_t unit, Pass pass);
  /// Throws, after aborting the communicator, when the ranks gathered different units.
  void check_tags(std::size_t s);
  /// What differs between the ranks' tags of `unit` for `pass` (Note [Unit tags]); empty when
  /// they agree. Reads only the tags and the registry: it also runs on the communication stream.
  std::string tag_mismatch(std::uint32_t unit, Pass pass) const;
  /// Inside `init`: rank 0's values of the unit to every rank, each keeping its piece.
  void commit(std::size_t s);

  World& world_;
  Communicator& comm_;
  const ParamRegistry& registry_;
  const DataParallelOptions& options_;
  Device device_;
  Stream compute_;
  Stream comm_stream_;
  std::shared_ptr<MemoryResource> memory_;
  int rank_ = 0;
  int ranks_ = 1;
  ShardLayout layout_;
  BucketPlan plan_;
  std::vector<ShardPiece> pieces_;  ///< this rank's
  StepTimer timer_;
  Event compute_ready_;
  Event comm_done_;

  Buffer params_;      ///< ZeRO-2: the whole arena; ZeRO-3: this rank's shard
  Buffer grad_shard_;  ///< this rank's averaged gradients
  Buffer scratch_;     ///< a piece, for reduce-scatters added to the shard (allocated at first use)
  std::optional<SlotRing> buckets_;  ///< gradient buffers in flight (ZeRO-2 buckets, ZeRO-3 units)
  std::optional<SlotRing> gathered_units_;   ///< ZeRO-3: gathered parameters
  std::vector<Event> gathered_;              ///< per segment, its last all-gather
  std::vector<std::uint32_t> unit_segment_;  ///< ZeRO-3: per unit
  Buffer tags_;  ///< ZeRO-3 on the host: per unit and pass, this rank's tag and every rank's
  bool check_tags_ = false;
  bool check_tags_on_stream_ = false;  // Gloo: a mismatched all-gather must not start (the Note)
  bool initialising_ = false;
  std::vector<Segment> segments_;
  std::vector<bool> marked_;         ///< per parameter, since its segment opened
  std::vector<bool> marked_window_;  ///< per parameter, since the last synchronized step
  std::vector<bool> marked_step_;    ///< per parameter, outside no_sync in this step
  std::size_t next_segment_ = 0;     ///< the next to reduce-scatter, in order
  std::size_t issued_in_step_ = 0;
  bool gathers_pending_ = false;
  UnitUse units_;
};

}  // namespace cohort::detail
