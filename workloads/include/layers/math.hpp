#pragma once

/// @file
/// `layers::Math`: the dense math of the example models on one device, in stream order. On a GPU
/// it is cuBLAS and a few CUDA kernels on the stream; on the host it is OpenBLAS (cblas) and plain
/// loops, each enqueued as a task on the host stream, so that the caller's thread only enqueues
/// work, as it does on a GPU, and communication overlaps it the same way.
///
/// Stream contract: every method that takes pointers enqueues its work on `stream()` after the
/// work already there and returns at once (except `download` and `upload`, which wait). Pointers
/// are device pointers on a GPU and host pointers on the host; the memory must stay alive until
/// the stream has run the work. Matrices are row-major and packed.

#include <cohort/core/stream.hpp>
#include <cohort/core/tensor_view.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/memory_resource.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace layers {

enum class Transpose : std::uint8_t { no, yes };

/// The arithmetic of f32 matrix products and convolutions on a GPU, one setting for every layer
/// of a `Math` (and the `CnnOps` on it): `fp32`, plain FP32 FMA (cuBLAS's default math, cuDNN's
/// CUDNN_FMA_MATH), so that GPU and host results agree closely; or `tf32`, FP32 data on tensor
/// cores (CUBLAS_TF32_TENSOR_OP_MATH and CUBLAS_COMPUTE_32F_FAST_TF32, cuDNN's default math),
/// what PyTorch's `allow_tf32` flags select. bf16 data always runs on tensor cores with FP32
/// accumulation. The host has FP32 only and ignores the setting.
enum class MathMode : std::uint8_t { fp32, tf32 };

/// "fp32" or "tf32".
const char* to_string(MathMode mode) noexcept;

/// The GEMMs `Math::gemm_work(flops)` runs: `repeats` products C[side, side] = A[side, depth] x
/// B[depth, side] (2 x side x side x depth FLOPs each); none (repeats 0) below a few MFLOP.
struct GemmWorkShape {
  int side = 0;
  int depth = 0;
  int repeats = 0;
};
GemmWorkShape gemm_work_shape(double flops) noexcept;

class Math {
 public:
  /// Math on `stream`'s device. On the host, OpenBLAS is told to use one thread per caller:
  /// ranks are threads or processes that already share the cores.
  explicit Math(cohort::Stream stream);
  ~Math();
  Math(const Math&) = delete;
  Math& operator=(const Math&) = delete;
  Math(Math&&) = delete;
  Math& operator=(Math&&) = delete;

  cohort::Device device() const noexcept { return stream_.device(); }
  const cohort::Stream& stream() const noexcept { return stream_; }

  /// The arithmetic of every f32 product and convolution from here on (`MathMode`; default fp32).
  void set_math_mode(MathMode mode);
  MathMode math_mode() const noexcept { return mode_; }

  /// `count` floats of workspace on the device (zeroed), freed with the buffer.
  cohort::Buffer allocate_floats(
      std::size_t count, cohort::MemoryCategory category = cohort::MemoryCategory::activations);
  /// `bytes` bytes of scratch space from the device's pool, not zeroed, allocated and freed in
  /// order on `stream()` (Note [Stream-ordered allocation] in memory_resource.hpp).
  cohort::Buffer allocate_scratch(std::size_t bytes);
  /// `bytes` bytes of workspace on the device (zeroed).
  cohort::Buffer allocate_bytes(
      std::size_t bytes, cohort::MemoryCategory category = cohort::MemoryCategory::activations);

  /// C[m, n] = alpha op(A) op(B) + beta C, with op(A) [m, k] and op(B) [k, n], in the math mode
  /// (fp32 by default: no TF32, so that GPU and host results agree closely).
  void gemm(Transpose transpose_a, Transpose transpose_b, int m, int n, int k, float alpha,
            const float* a, const float* b, float beta, float* c);

  /// y[r, c] = y[r, c] + bias[c], then max(0, .) when `relu`.
  void bias_activation(float* y, const float* bias, int rows, int cols, bool relu);
  /// grad[i] = 0 where activation[i] <= 0 (the activation is relu's output).
  void relu_backward(float* grad, const float* activation, std::size_t count);
  /// out[c] = sum over r of x[r, c].
  void column_sums(const float* x, int rows, int cols, float* out);
  /// Softmax cross-entropy over rows of `logits` [rows, classes] with integer labels. Adds the
  /// summed loss to stats[0] and the number of rows whose arg-max is the label to stats[1]. When
  /// `grad_logits` is not null, writes (softmax - one_hot) x grad_scale there.
  void softmax_cross_entropy(const float* logits, const std::int32_t* labels, int rows, int classes,
                             float grad_scale, float* grad_logits, double* stats);

  /// Element casts between f32 and bf16 arrays of `count` elements (`from` and `to` must be one
  /// f32 and one bf16 view, or both the same dtype for a copy).
  void cast(const cohort::TensorView& from, const cohort::TensorView& to);
  /// Sets `bytes` bytes at `data` to zero.
  void zero(void* data, std::size_t bytes);

  /// Copies host memory to the device and waits for it.
  void upload(void* device_destination, const void* host_source, std::size_t bytes);
  /// Copies device memory to the host after the work on the stream, and waits for it.
  void download(void* host_destination, const void* device_source, std::size_t bytes);

  /// Writes `values` to `destination` (f32, or bf16 rounded to nearest even) and waits.
  void upload_values(const cohort::TensorView& destination, std::span<const float> values);
  /// Writes values uniform in [-bound, bound] to `destination` (f32 or bf16), the same for the
  /// same seed on every device, and waits: real-valued data for work whose values do not matter
  /// (zeros can run faster than data, and draw less power).
  void fill_uniform(const cohort::TensorView& destination, float bound, std::uint64_t seed);
  /// Reads `source` (f32 or bf16) as f32 after the work on the stream, and waits.
  std::vector<float> download_values(const cohort::TensorView& source);

  /// About `flops` floating-point operations of real GEMM work (`gemm_work_shape`) on scratch
  /// buffers of values uniform in [-1, 1], in the math mode on a GPU (cblas on the host): compute
  /// sized to a layer, for benchmarks.
  void gemm_work(double flops);
  /// Occupies the stream for `duration` without computing: simulated compute. On a GPU, a kernel
  /// that spins on the clock; on the host, a sleep on the stream's thread.
  void simulate(std::chrono::nanoseconds duration);

 private:
  struct Cuda;
  cohort::Stream stream_;
  std::shared_ptr<cohort::MemoryResource> resource_;
  std::unique_ptr<Cuda> cuda_;
  MathMode mode_ = MathMode::fp32;
  cohort::Buffer work_a_, work_b_, work_c_;  // gemm_work scratch, allocated on first use
};

}  // namespace layers
