#pragma once

// scaling_bench's real GEMM work in a chosen precision: compute sized to a layer's FLOPs. On a
// GPU, cuBLAS GEMMs on the compute stream in FP32, TF32 (FP32 data on tensor cores), BF16 or
// FP16 (tensor cores, FP32 accumulation); on the host, OpenBLAS in FP32, the only precision it
// has (scaling_bench refuses the others there).

#include "scaling/scaling_types.hpp"

#include <layers/math.hpp>

#include <memory>

namespace scaling {

class GemmWork {
 public:
  GemmWork(layers::Math& math, Precision precision);
  ~GemmWork();
  GemmWork(const GemmWork&) = delete;
  GemmWork& operator=(const GemmWork&) = delete;

  /// About `flops` floating-point operations of GEMMs, queued on the math's stream.
  void run(double flops);

  /// "cuBLAS TF32 (FP32 data, tensor cores)", "OpenBLAS FP32"...
  static const char* describe(Precision precision, bool gpu);

 private:
  struct Cuda;
  layers::Math& math_;
  Precision precision_;
  std::unique_ptr<Cuda> cuda_;
};

}  // namespace scaling
