#pragma once

// What the examples in cohort's public headers assume a program has: its world, DataParallel,
// optimizer and streams (the parameters of every example function), and its own functions and
// values (declared here, never defined: the examples are compiled, not run).

#include <cohort/cohort.hpp>

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <memory>
#include <span>

namespace example_context {

struct Batch {};
inline int steps = 10;
inline int every = 5;
inline std::uint64_t seed = 1;
inline std::size_t n = 1000;
inline std::size_t bytes = 1 << 20;
inline std::size_t row_elements = 3 * 32 * 32;

void train_one_step(const cohort::SampledBatch& batch);
void step();
void initialise(cohort::TensorView weight, cohort::TensorView bias);
void forward(cohort::TensorView weight, cohort::TensorView bias, Batch batch);
void backward_fc1(cohort::TensorView weight_grad, cohort::TensorView bias_grad);
void sgd(cohort::TensorView params, cohort::TensorView grads);
void train_on(cohort::TensorView batch);

}  // namespace example_context

using namespace example_context;

#define EXAMPLE_CONTEXT                                                                            \
  [[maybe_unused]] cohort::World &world, [[maybe_unused]] cohort::DataParallel &dp,                \
      [[maybe_unused]] cohort::Optimizer &optimizer,                                               \
      [[maybe_unused]] const cohort::Stream &stream, [[maybe_unused]] cohort::Device device,       \
      [[maybe_unused]] cohort::TensorView grads, [[maybe_unused]] cohort::ParamHandle w1,          \
      [[maybe_unused]] Batch batch, [[maybe_unused]] std::shared_ptr<cohort::MemoryResource> pool, \
      [[maybe_unused]] std::shared_ptr<cohort::MemoryResource> device_pool,                        \
      [[maybe_unused]] cohort::TensorView all_images,                                              \
      [[maybe_unused]] cohort::TensorView batch_images,                                            \
      [[maybe_unused]] cohort::Checkpointer &checkpoints,                                          \
      [[maybe_unused]] cohort::TrainingState &state,                                               \
      [[maybe_unused]] cohort::DistributedSampler &sampler, [[maybe_unused]] bool log,             \
      [[maybe_unused]] std::size_t index
