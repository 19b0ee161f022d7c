// cohort._torch: the torch.distributed backend "cohort", a c10d::Backend over the groups of
// cohort._core (Note [Two extension modules] in bridge.hpp). It links libtorch, never cohort.
//
// Note [Torch tensors as cohort buffers]
// --------------------------------------
// Each torch call becomes one or more cohort collectives on the tensors' own memory: no copy
// where the tensors are one contiguous block (all_reduce, broadcast, the *_into_tensor and
// *_tensor variants FSDP and ZeRO use). Lists of tensors (all_gather into a list, reduce_scatter
// from one) go through one flat buffer, as torch's gloo does. Where cohort has no such
// reduction or collective, the call is built from those it has: PRODUCT is an all_gather and a
// product in rank order (the same bits on every rank), reduce an all_reduce (into a copy on the
// other ranks), gather an all_gather and scatter a broadcast. dtypes: float32/64, float16,
// bfloat16, int32/64 and uint8 directly; complex as pairs of reals for sum and avg; any dtype
// as bytes for the collectives that only move data (broadcast, all_gather, gather, scatter).
//
// Ordering. CPU: torch's tensors are ready when the call is made; cohort runs the collective on
// the group's host transport, and the work is done when its result is in the output (copied
// out of a flat buffer first, where there is one). CUDA: the collective is enqueued on torch's
// current stream of the tensors' device, so it runs after the work already there, and later
// work on that stream runs after it; Work::wait() makes the then-current stream wait for it, and
// the future completes at once (as ProcessGroupNCCL's), its value ready on those streams.

#include "bridge.hpp"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace py = pybind11;

namespace cohort::python {
namespace {

constexpr const char* kName = "cohort";

// cohort::DType's values.
enum CohortDType : std::int32_t { f32 = 0, f64, f16, bf16, i32, i64, u8 };

[[noreturn]] void fail(const Outcome& outcome) {
  if (outcome.status == Status::invalid_argument) {
    C10_THROW_ERROR(ValueError, outcome.message);
  }
  C10_THROW_ERROR(DistBackendError, outcome.message);
}

std::exception_ptr error_of(const Outcome& outcome) {
  try {
    fail(outcome);
  } catch (...) {
    return std::current_exception();
  }
}

/// What a torch reduction becomes: a cohort one, or PRODUCT (built from all_gather).
struct Reduction {
  Reduce reduce = Reduce::sum;
  bool product = false;
};

Reduction reduction_of(const c10d::ReduceOp& op, const char* call) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return {Reduce::sum, false};
    case c10d::ReduceOp::AVG:
      return {Reduce::avg, false};
    case c10d::ReduceOp::MIN:
      return {Reduce::min, false};
    case c10d::ReduceOp::MAX:
      return {Reduce::max, false};
    case c10d::ReduceOp::PRODUCT:
      return {Reduce::sum, true};
    default:
      break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "cohort: ", call, " with ReduceOp ",
                              c10d::ReduceOp::RedOpType(op.op_) == c10d::ReduceOp::PREMUL_SUM
                                  ? "PREMUL_SUM"
                                  : "BAND/BOR/BXOR",
                              " is not supported; the backend reduces with SUM, AVG, MIN, MAX and "
                              "PRODUCT");
}

/// How a tensor's elements travel: a cohort dtype and the count in that dtype.
struct Carriage {
  std::int32_t dtype = u8;
  std::uint64_t count = 0;
};

/// `reducing`: the elements are reduced (so only numeric dtypes cohort reduces, and complex as
/// pairs for sum and avg); otherwise they are only moved, as bytes if need be.
Carriage carriage_of(const at::Tensor& t, const char* call, bool reducing, Reduction reduction) {
  const auto n = static_cast<std::uint64_t>(t.numel());
  switch (t.scalar_type()) {
    case at::kFloat:
      return {f32, n};
    case at::kDouble:
      return {f64, n};
    case at::kHalf:
      return {f16, n};
    case at::kBFloat16:
      return {bf16, n};
    case at::kInt:
      return {i32, n};
    case at::kLong:
      return {i64, n};
    case at::kByte:
      return {u8, n};
    case at::kComplexFloat:
      if (!reducing || reduction.reduce == Reduce::sum || reduction.reduce == Reduce::avg) {
        if (!reduction.product) return {f32, 2 * n};
      }
      break;
    case at::kComplexDouble:
      if (!reducing || reduction.reduce == Reduce::sum || reduction.reduce == Reduce::avg) {
        if (!reduction.product) return {f64, 2 * n};
      }
      break;
    case at::kBool:
      if (reducing && !reduction.product &&
          (reduction.reduce == Reduce::min || reduction.reduce == Reduce::max)) {
        return {u8, n};
      }
      break;
    default:
      break;
  }
  if (!reducing) {
    return {u8, static_cast<std::uint64_t>(t.nbytes())};
  }
  TORCH_CHECK_VALUE(false, "cohort: ", call, " cannot reduce a tensor of dtype ", t.scalar_type(),
                    "; reductions take float32, float64, float16, bfloat16, int32, int64 and "
                    "uint8 (complex for SUM and AVG, bool for MIN and MAX)");
}

void check_tensor(const at::Tensor& t, const char* call) {
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "cohort: ", call,
                    " takes dense tensors; this one is ", t.layout(),
                    " (sparse tensors are not supported: use .to_dense())");
  TORCH_CHECK_VALUE(t.is_contiguous(), "cohort: ", call, " needs contiguous tensors; pass ",
                    "t.contiguous() and copy the result back");
  TORCH_CHECK_VALUE(t.is_cpu() || t.is_cuda(), "cohort: ", call,
                    " takes CPU and CUDA tensors; this one is on ", t.device());
}

Buffer buffer_of(const at::Tensor& t, const char* call, bool reducing, Reduction reduction) {
  check_tensor(t, call);
  const Carriage carriage = carriage_of(t, call, reducing, reduction);
  Buffer buffer;
  buffer.data = t.data_ptr();
  buffer.count = carriage.count;
  buffer.dtype = carriage.dtype;
  buffer.cuda = t.is_cuda();
  buffer.device = t.is_cuda() ? t.device().index() : 0;
  return buffer;
}

void* current_stream(const at::Tensor& t) {
  if (!t.is_cuda()) {
    return nullptr;
  }
  const c10::impl::DeviceGuardImplInterface* impl =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return impl->getStream(t.device()).native_handle();
}

/// What one torch call became: the cohort collectives, and what runs after them on the CPU
/// (copies out of a flat buffer, a product): once, after every part succeeded.
struct Plan {
  std::vector<std::shared_ptr<PendingWork>> parts;
  std::function<void()> finish;
};

class CohortWork final : public c10d::Work {
 public:
  CohortWork(int rank, c10d::OpType type, Plan plan, std::vector<at::Tensor> outputs,
             std::vector<c10::Device> cuda_devices)
      : c10d::Work(rank, type),
        parts_(std::move(plan.parts)),
        finish_(std::move(plan.finish)),
        outputs_(std::move(outputs)),
        cuda_devices_(std::move(cuda_devices)) {}

  bool isCompleted() override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (finished_) return true;
    }
    for (const auto& part : parts_) {
      if (!part->done()) return false;
    }
    conclude(outcome_of_parts(-1));
    return true;
  }

  bool isSuccess() const override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return finished_ && !error_;
  }

  std::exception_ptr exception() const override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  std::vector<at::Tensor> result() override { return outputs_; }

  bool wait(std::chrono::milliseconds timeout) override {
    const std::int64_t limit = timeout == kNoTimeout ? -1 : timeout.count();
    const Outcome outcome = outcome_of_parts(limit);
    if (outcome.status == Status::timeout && limit >= 0 && !all_parts_done()) {
      // Only this wait's own limit passed; the collective goes on (its deadline still holds).
      C10_THROW_ERROR(DistBackendError, "cohort: work still running after the " +
                                            std::to_string(timeout.count()) +
                                            " ms given to wait(): " + outcome.message);
    }
    conclude(outcome);
    std::exception_ptr error;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      error = error_;
    }
    if (error) std::rethrow_exception(error);
    if (!cuda_devices_.empty()) block_current_streams();
    return true;
  }

  void synchronize() override {
    if (!cuda_devices_.empty()) block_current_streams();
  }

  void blockCurrentStream() override { synchronize(); }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), cuda_devices_);
    if (finished_ || !cuda_devices_.empty() || parts_.empty()) {
      lock.unlock();
      if (!cuda_devices_.empty()) {
        // Enqueued is complete, for CUDA work: the future records events on the current
        // streams, after the collectives.
        conclude(Outcome{});
      } else {
        complete_future();
      }
      return future_;
    }
    lock.unlock();
    // Parts complete in the order they were issued, so the last one's completion is the call's.
    c10::intrusive_ptr<CohortWork> self = c10::intrusive_ptr<CohortWork>::reclaim_copy(this);
    parts_.back()->when_done([self](const Outcome& last) {
      self->conclude(last.ok() ? self->outcome_of_parts(-1) : last);
    });
    return future_;
  }

 private:
  bool all_parts_done() const {
    for (const auto& part : parts_) {
      if (!part->done()) return false;
    }
    return true;
  }

  Outcome outcome_of_parts(std::int64_t limit) {
    for (const auto& part : parts_) {
      Outcome outcome = part->wait(limit);
      if (!outcome.ok()) return outcome;
    }
    return {};
  }

  /// Records how the call ended, runs `finish` once after success, and completes the future;
  /// the first caller does it, later ones wait for it (the mutex).
  void conclude(const Outcome& outcome) {
    {
      std::lock_guard<std::mutex> lock(finish_mutex_);
      bool already = false;
      {
        const std::lock_guard<std::mutex> state(mutex_);
        already = finished_;
      }
      if (!already) {
        std::exception_ptr error;
        if (!outcome.ok()) {
          error = error_of(outcome);
        } else if (finish_ && cuda_devices_.empty()) {
          try {
            finish_();
          } catch (...) {
            error = std::current_exception();
          }
        }
        const std::lock_guard<std::mutex> state(mutex_);
        error_ = error;
        finished_ = true;
      }
    }
    complete_future();
  }

  void complete_future() {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    std::exception_ptr error;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!future_ || !finished_ || future_done_) return;
      future_done_ = true;
      future = future_;
      error = error_;
    }
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
  }

  void block_current_streams() {
    for (const auto& part : parts_) {
      for (const c10::Device& device : cuda_devices_) {
        const Outcome outcome =
            part->block_stream(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
                                   ->getStream(device)
                                   .native_handle());
        if (!outcome.ok()) fail(outcome);
      }
    }
  }

  std::vector<std::shared_ptr<PendingWork>> parts_;
  std::function<void()> finish_;
  std::vector<at::Tensor> outputs_;
  std::vector<c10::Device> cuda_devices_;
  mutable std::mutex mutex_;
  std::mutex finish_mutex_;
  bool finished_ = false;
  bool future_done_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class CohortBackend final : public c10d::Backend {
 public:
  CohortBackend(std::shared_ptr<Group> group, std::chrono::milliseconds timeout)
      : c10d::Backend(group->rank(), group->size()), group_(std::move(group)), timeout_(timeout) {}

  const std::string getBackendName() const override { return kName; }
  bool supportsCoalescing() const override { return true; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }
  void setTimeout(std::chrono::milliseconds) override {
    TORCH_CHECK_NOT_IMPLEMENTED(false,
                                "cohort: a group's timeout is fixed when it is made "
                                "(init_process_group / new_group timeout=)");
  }
  std::string describe() const { return group_->describe(); }

  // ---- Collectives ----

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    async_op_ = opts.asyncOp;
    const at::Tensor& t = single(tensors, "all_reduce");
    TORCH_CHECK_NOT_IMPLEMENTED(!opts.sparseIndices.has_value(),
                                "cohort: all_reduce of sparse tensors is not supported");
    Plan plan;
    reduce_into(plan, t, t, reduction_of(opts.reduceOp, "all_reduce"), "all_reduce");
    return finish(c10d::OpType::ALLREDUCE, std::move(plan), tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    async_op_ = opts.asyncOp;
    Plan plan;
    const Reduction reduction = reduction_of(opts.reduceOp, "all_reduce_coalesced");
    for (const at::Tensor& t : tensors) {
      reduce_into(plan, t, t, reduction, "all_reduce_coalesced");
    }
    return finish(c10d::OpType::ALLREDUCE_COALESCED, std::move(plan), tensors);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    async_op_ = opts.asyncOp;
    const at::Tensor& t = single(tensors, "broadcast");
    check_root(opts.rootRank, "broadcast");
    Plan plan;
    plan.parts.push_back(issue(Op::broadcast, t, t, Reduce::sum, static_cast<int>(opts.rootRank),
                               "broadcast", false));
    return finish(c10d::OpType::BROADCAST, std::move(plan), tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    async_op_ = opts.asyncOp;
    const at::Tensor& t = single(tensors, "reduce");
    check_root(opts.rootRank, "reduce");
    Plan plan;
    // Only the root's tensor receives the result; the others keep their input.
    const at::Tensor target = rank_ == opts.rootRank ? t : t.clone();
    reduce_into(plan, target, target, reduction_of(opts.reduceOp, "reduce"), "reduce");
    return finish(c10d::OpType::REDUCE, std::move(plan), tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    async_op_ = opts.asyncOp;
    const at::Tensor& input = single(inputs, "all_gather");
    TORCH_CHECK_VALUE(outputs.size() == 1, "cohort: all_gather takes one output list");
    std::vector<at::Tensor>& list = outputs[0];
    check_list(list, input, "all_gather");
    Plan plan;
    gather_into_list(plan, input, list, "all_gather");
    return finish(c10d::OpType::ALLGATHER, std::move(plan), list);
  }

  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override {
    async_op_ = opts.asyncOp;
    check_sizes(output, input, size_, "all_gather_into_tensor");
    Plan plan;
    plan.parts.push_back(
        issue(Op::all_gather, input, output, Reduce::sum, -1, "all_gather_into_tensor", false));
    std::vector<at::Tensor> result{output};
    return finish(c10d::OpType::_ALLGATHER_BASE, std::move(plan), result);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    async_op_ = opts.asyncOp;
    return all_gather_single(output, input, opts);
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    async_op_ = opts.asyncOp;
    // outputs[r][i] receives rank r's inputs[i].
    TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size_,
                      "cohort: all_gather_coalesced needs one output list per rank (", size_,
                      "), got ", outputs.size());
    Plan plan;
    std::vector<at::Tensor> all;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      std::vector<at::Tensor> list;
      for (const auto& rank_outputs : outputs) {
        TORCH_CHECK_VALUE(rank_outputs.size() == inputs.size(),
                          "cohort: all_gather_coalesced needs, for each rank, one output per "
                          "input (",
                          inputs.size(), "), got ", rank_outputs.size());
        list.push_back(rank_outputs[i]);
      }
      check_list(list, inputs[i], "all_gather_coalesced");
      gather_into_list(plan, inputs[i], list, "all_gather_coalesced");
    }
    for (const auto& rank_outputs : outputs) {
      all.insert(all.end(), rank_outputs.begin(), rank_outputs.end());
    }
    return finish(c10d::OpType::ALLGATHER_COALESCED, std::move(plan), all);
  }

  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    async_op_ = opts.asyncOp;
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(),
                      "cohort: all_gather_into_tensor_coalesced needs one output per input");
    Plan plan;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      check_sizes(outputs[i], inputs[i], size_, "all_gather_into_tensor_coalesced");
      plan.parts.push_back(issue(Op::all_gather, inputs[i], outputs[i], Reduce::sum, -1,
                                 "all_gather_into_tensor_coalesced", false));
    }
    return finish(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, std::move(plan), outputs);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    async_op_ = opts.asyncOp;
    return all_gather_single_coalesced(outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    async_op_ = opts.asyncOp;
    const at::Tensor& input = single(inputs, "gather");
    check_root(opts.rootRank, "gather");
    std::vector<at::Tensor> list;
    if (rank_ == opts.rootRank) {
      TORCH_CHECK_VALUE(outputs.size() == 1, "cohort: gather takes one output list on the root");
      list = outputs[0];
      check_list(list, input, "gather");
    } else {
      TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(),
                        "cohort: gather takes an output list only on the root");
      for (int r = 0; r < size_; ++r) list.push_back(at::empty_like(input));
    }
    Plan plan;
    gather_into_list(plan, input, list, "gather");
    return finish(c10d::OpType::GATHER, std::move(plan), list);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    async_op_ = opts.asyncOp;
    const at::Tensor& output = single(outputs, "scatter");
    check_root(opts.rootRank, "scatter");
    check_tensor(output, "scatter");
    // The root's list travels to every rank as one flat broadcast; each keeps its own piece.
    at::Tensor flat = at::empty({size_ * output.numel()}, output.options());
    if (rank_ == opts.rootRank) {
      TORCH_CHECK_VALUE(inputs.size() == 1, "cohort: scatter takes one input list on the root");
      check_list(inputs[0], output, "scatter");
      for (int r = 0; r < size_; ++r) {
        flat.narrow(0, r * output.numel(), output.numel()).copy_(inputs[0][r].reshape({-1}));
      }
    }
    Plan plan;
    plan.parts.push_back(issue(Op::broadcast, flat, flat, Reduce::sum,
                               static_cast<int>(opts.rootRank), "scatter", false));
    auto copy_out = [flat, output, rank = rank_]() mutable {
      output.reshape({-1}).copy_(flat.narrow(0, rank * output.numel(), output.numel()));
    };
    add_finish(plan, output, std::move(copy_out));
    return finish(c10d::OpType::SCATTER, std::move(plan), outputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    async_op_ = opts.asyncOp;
    const at::Tensor& output = single(outputs, "reduce_scatter");
    TORCH_CHECK_VALUE(inputs.size() == 1, "cohort: reduce_scatter takes one input list");
    check_list(inputs[0], output, "reduce_scatter");
    at::Tensor flat = at::empty({size_ * output.numel()}, output.options());
    for (int r = 0; r < size_; ++r) {
      flat.narrow(0, r * output.numel(), output.numel()).copy_(inputs[0][r].reshape({-1}));
    }
    Plan plan;
    scatter_reduce(plan, flat, output, reduction_of(opts.reduceOp, "reduce_scatter"),
                   "reduce_scatter");
    return finish(c10d::OpType::REDUCE_SCATTER, std::move(plan), outputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    async_op_ = opts.asyncOp;
    check_sizes(input, output, size_, "reduce_scatter_tensor");
    Plan plan;
    scatter_reduce(plan, input, output, reduction_of(opts.reduceOp, "reduce_scatter_tensor"),
                   "reduce_scatter_tensor");
    std::vector<at::Tensor> result{output};
    return finish(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(plan), result);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    async_op_ = opts.asyncOp;
    return reduce_scatter_single(output, input, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    async_op_ = opts.asyncOp;
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(),
                      "cohort: reduce_scatter_tensor_coalesced needs one output per input");
    const Reduction reduction = reduction_of(opts.reduceOp, "reduce_scatter_tensor_coalesced");
    Plan plan;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      check_sizes(inputs[i], outputs[i], size_, "reduce_scatter_tensor_coalesced");
      scatter_reduce(plan, inputs[i], outputs[i], reduction, "reduce_scatter_tensor_coalesced");
    }
    return finish(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, std::move(plan), outputs);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    async_op_ = opts.asyncOp;
    return reduce_scatter_single_coalesced(outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    async_op_ = false;
    Plan plan;
    std::shared_ptr<PendingWork> work;
    const Outcome outcome =
        group_->issue(Op::barrier, Buffer{}, Buffer{}, Reduce::sum, -1, nullptr, false, &work);
    if (!outcome.ok()) fail(outcome);
    plan.parts.push_back(std::move(work));
    std::vector<at::Tensor> none;
    return finish(c10d::OpType::BARRIER, std::move(plan), none);
  }

  // ---- Coalescing: each call is issued at once; endCoalescing returns one work for them ----

  void startCoalescing() override {
    TORCH_CHECK_VALUE(!coalescing_, "cohort: startCoalescing called twice without endCoalescing");
    coalescing_ = true;
    coalesced_.clear();
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    TORCH_CHECK_VALUE(coalescing_, "cohort: endCoalescing without startCoalescing");
    coalescing_ = false;
    std::vector<c10::intrusive_ptr<CohortWork>> works = std::move(coalesced_);
    coalesced_.clear();
    std::vector<at::Tensor> outputs;
    for (auto& work : works) {
      auto result = work->result();
      outputs.insert(outputs.end(), result.begin(), result.end());
    }
    // One work that waits for each of them (each finishes its own copies).
    return c10::make_intrusive<CoalescedWork>(rank_, std::move(works), std::move(outputs));
  }

  // ---- Not supported: a clear error naming the call ----

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor&, at::Tensor&, std::vector<int64_t>&,
                                               std::vector<int64_t>&,
                                               const c10d::AllToAllOptions&) override {
    unsupported("all_to_all_single");
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>&, std::vector<at::Tensor>&,
                                          const c10d::AllToAllOptions&) override {
    unsupported("all_to_all");
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>&, int, int) override {
    unsupported("send");
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>&, int, int) override {
    unsupported("recv");
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    unsupported("recv from any source");
  }

  void abort() override { group_->abort("torch.distributed aborted the process group"); }
  void shutdown() override {}

 private:
  /// A work over the works of one coalescing block.
  class CoalescedWork final : public c10d::Work {
   public:
    CoalescedWork(int rank, std::vector<c10::intrusive_ptr<CohortWork>> works,
                  std::vector<at::Tensor> outputs)
        : c10d::Work(rank, c10d::OpType::COALESCED),
          works_(std::move(works)),
          outputs_(std::move(outputs)) {}
    bool isCompleted() override {
      for (auto& w : works_) {
        if (!w->isCompleted()) return false;
      }
      return true;
    }
    bool wait(std::chrono::milliseconds timeout) override {
      for (auto& w : works_) w->wait(timeout);
      return true;
    }
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
      if (works_.empty()) {
        auto future =
            c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
        future->markCompleted(c10::IValue(outputs_));
        return future;
      }
      c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures;
      std::vector<c10::intrusive_ptr<c10::ivalue::Future>> each;
      for (auto& w : works_) {
        each.push_back(w->getFuture());
        futures.push_back(each.back());
      }
      auto outputs = outputs_;
      return c10::collectAll(futures)->then(
          [each, outputs](c10::ivalue::Future&) -> c10::IValue {
            for (const auto& f : each) {
              if (f->hasError()) f->value();  // rethrows its error
            }
            return c10::IValue(outputs);
          },
          c10::ListType::create(c10::TensorType::get()));
    }

   private:
    std::vector<c10::intrusive_ptr<CohortWork>> works_;
    std::vector<at::Tensor> outputs_;
  };

  [[noreturn]] void unsupported(const char* call) {
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, "cohort: torch.distributed.", call,
        " is not supported by the cohort backend (it runs all_reduce, broadcast, all_gather, "
        "reduce_scatter, barrier and the calls built from them: reduce, gather, scatter). For ",
        call, ", make a second group with another backend: dist.new_group(backend=\"gloo\")");
  }

  const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* call) {
    TORCH_CHECK_VALUE(tensors.size() == 1, "cohort: ", call, " takes one tensor per process (got ",
                      tensors.size(), ")");
    return tensors[0];
  }

  void check_root(int64_t root, const char* call) {
    TORCH_CHECK_VALUE(root >= 0 && root < size_, "cohort: ", call, " root ", root,
                      " is not a rank of this group of ", size_);
  }

  void check_list(const std::vector<at::Tensor>& list, const at::Tensor& one, const char* call) {
    TORCH_CHECK_VALUE(static_cast<int>(list.size()) == size_, "cohort: ", call, " needs a list of ",
                      size_, " tensors, one per rank (got ", list.size(), ")");
    for (const at::Tensor& t : list) {
      TORCH_CHECK_VALUE(t.numel() == one.numel() && t.scalar_type() == one.scalar_type() &&
                            t.device() == one.device(),
                        "cohort: ", call,
                        ": every tensor of the list must have the size, dtype "
                        "and device of the single tensor (",
                        one.sizes(), " ", one.scalar_type(), " on ", one.device(), "); one is ",
                        t.sizes(), " ", t.scalar_type(), " on ", t.device());
    }
  }

  void check_sizes(const at::Tensor& big, const at::Tensor& small, int factor, const char* call) {
    TORCH_CHECK_VALUE(big.numel() == factor * small.numel(), "cohort: ", call, ": the ",
                      "larger tensor must hold ", factor, " x the other's ", small.numel(),
                      " elements; it holds ", big.numel());
    TORCH_CHECK_VALUE(big.scalar_type() == small.scalar_type(), "cohort: ", call,
                      ": input and output dtypes differ (", big.scalar_type(), " and ",
                      small.scalar_type(), ")");
    TORCH_CHECK_VALUE(big.device() == small.device(), "cohort: ", call,
                      ": input and output are on different devices");
  }

  std::shared_ptr<PendingWork> issue(Op op, const at::Tensor& input, const at::Tensor& output,
                                     Reduce reduce, int root, const char* call, bool reducing,
                                     Reduction reduction = {}) {
    const Buffer in = buffer_of(input, call, reducing, reduction);
    const Buffer out = buffer_of(output, call, reducing, reduction);
    std::shared_ptr<PendingWork> work;
    const Outcome outcome =
        group_->issue(op, in, out, reduce, root, current_stream(output), async_op_, &work);
    if (!outcome.ok()) fail(outcome);
    ++sequence_;
    return work;
  }

  /// Runs `step` after the plan's collectives: on the CPU once they succeeded (in `finish`), on
  /// CUDA now, stream-ordered after them.
  void add_finish(Plan& plan, const at::Tensor& like, std::function<void()> step) {
    if (like.is_cuda()) {
      step();
      return;
    }
    if (!plan.finish) {
      plan.finish = std::move(step);
      return;
    }
    plan.finish = [first = std::move(plan.finish), second = std::move(step)] {
      first();
      second();
    };
  }

  void reduce_into(Plan& plan, const at::Tensor& input, const at::Tensor& output,
                   Reduction reduction, const char* call) {
    if (!reduction.product) {
      plan.parts.push_back(
          issue(Op::all_reduce, input, output, reduction.reduce, -1, call, true, reduction));
      return;
    }
    // PRODUCT: every rank's tensor, multiplied in rank order (Note [Torch tensors as cohort
    // buffers]).
    carriage_of(input, call, true, Reduction{Reduce::sum, false});  // the dtype check
    at::Tensor gathered = at::empty({size_, input.numel()}, input.options());
    plan.parts.push_back(issue(Op::all_gather, input, gathered, Reduce::sum, -1, call, false));
    add_finish(plan, output, [gathered, output]() mutable {
      at::Tensor product = gathered[0].clone();
      for (int64_t r = 1; r < gathered.size(0); ++r) product.mul_(gathered[r]);
      output.reshape({-1}).copy_(product);
    });
  }

  void scatter_reduce(Plan& plan, const at::Tensor& input, const at::Tensor& output,
                      Reduction reduction, const char* call) {
    if (!reduction.product) {
      plan.parts.push_back(
          issue(Op::reduce_scatter, input, output, reduction.reduce, -1, call, true, reduction));
      return;
    }
    at::Tensor whole = input.clone();
    reduce_into(plan, whole, whole, reduction, call);
    add_finish(plan, output, [whole, output, rank = rank_]() mutable {
      output.reshape({-1}).copy_(
          whole.reshape({-1}).narrow(0, rank * output.numel(), output.numel()));
    });
  }

  void gather_into_list(Plan& plan, const at::Tensor& input, std::vector<at::Tensor>& list,
                        const char* call) {
    at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
    plan.parts.push_back(issue(Op::all_gather, input, flat, Reduce::sum, -1, call, false));
    add_finish(plan, input, [flat, list, n = input.numel()]() mutable {
      for (std::size_t r = 0; r < list.size(); ++r) {
        list[r].reshape({-1}).copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n));
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> finish(c10d::OpType type, Plan plan,
                                        const std::vector<at::Tensor>& outputs) {
    std::vector<c10::Device> devices;
    for (const at::Tensor& t : outputs) {
      if (t.is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
        devices.push_back(t.device());
      }
    }
    auto work = c10::make_intrusive<CohortWork>(rank_, type, std::move(plan), outputs, devices);
    if (coalescing_) coalesced_.push_back(work);
    return work;
  }

  std::shared_ptr<Group> group_;
  std::chrono::milliseconds timeout_;
  std::uint64_t sequence_ = 0;
  bool async_op_ = true;  // the current call's asyncOp: false lets a host collective block
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<CohortWork>> coalesced_;
};

std::shared_ptr<Group> group_from(const py::capsule& capsule) {
  auto* handle = static_cast<GroupHandle*>(PyCapsule_GetPointer(capsule.ptr(), "cohort.group"));
  if (handle == nullptr) throw py::error_already_set();
  TORCH_CHECK(handle->version == kBridgeVersion,
              "cohort: cohort._core and cohort._torch come from different builds (bridge ",
              handle->version, " against ", kBridgeVersion, "); reinstall the package");
  return handle->group;
}

}  // namespace
}  // namespace cohort::python

PYBIND11_MODULE(_torch, m) {
  using namespace cohort::python;
  m.doc() = "cohort's torch.distributed backend (a c10d::Backend over cohort._core's groups)";
  m.attr("BRIDGE_VERSION") = kBridgeVersion;
  m.attr("TORCH_VERSION") = TORCH_BUILD_VERSION;
  py::class_<CohortBackend, c10d::Backend, c10::intrusive_ptr<CohortBackend>>(m, "CohortBackend")
      .def(py::init([](const py::capsule& group, std::chrono::milliseconds timeout) {
             return c10::make_intrusive<CohortBackend>(group_from(group), timeout);
           }),
           py::arg("group"), py::arg("timeout"))
      .def("describe", &CohortBackend::describe);
}
