// The constructors of SGD, AdamW and their ZeRO-1 form: options checked and turned into the one
// configuration the shared machinery (optimizer.cpp) runs.

#include "optimizer_impl.hpp"

#include <cohort/core/error.hpp>
#include <cohort/optim/adamw.hpp>
#include <cohort/optim/sgd.hpp>
#include <cohort/optim/sharded_optimizer.hpp>

#include <memory>

namespace cohort {
namespace {

detail::OptimizerConfig config_of(const SgdOptions& options) {
  COHORT_EXPECTS(options.momentum >= 0.0f, "SGD momentum must not be negative");
  COHORT_EXPECTS(options.weight_decay >= 0.0f, "weight decay must not be negative");
  COHORT_EXPECTS(!options.nesterov || (options.momentum > 0.0f && options.dampening == 0.0f),
                 "Nesterov momentum needs momentum > 0 and dampening 0");
  detail::OptimizerConfig config;
  config.hyper.rule = kernels::UpdateRule::sgd;
  config.hyper.sgd = kernels::SgdHyper{options.momentum, options.dampening, options.weight_decay,
                                       options.nesterov};
  config.lr = options.lr;
  config.schedule = options.schedule;
  config.state_resource = options.state_resource;
  return config;
}

detail::OptimizerConfig config_of(const AdamWOptions& options) {
  COHORT_EXPECTS(options.beta1 >= 0.0f && options.beta1 < 1.0f, "AdamW beta1 must be in [0, 1)");
  COHORT_EXPECTS(options.beta2 >= 0.0f && options.beta2 < 1.0f, "AdamW beta2 must be in [0, 1)");
  COHORT_EXPECTS(options.eps >= 0.0f, "AdamW eps must not be negative");
  COHORT_EXPECTS(options.weight_decay >= 0.0f, "weight decay must not be negative");
  detail::OptimizerConfig config;
  config.hyper.rule = kernels::UpdateRule::adamw;
  config.hyper.adamw =
      kernels::AdamWHyper{options.beta1, options.beta2, options.eps, options.weight_decay};
  config.lr = options.lr;
  config.schedule = options.schedule;
  config.state_resource = options.state_resource;
  return config;
}

detail::OptimizerConfig sharded(detail::OptimizerConfig config, const ShardedOptions& sharding) {
  config.sharded = true;
  config.reduce_scatter_grads = sharding.reduce_scatter_grads;
  return config;
}

}  // namespace

Sgd::Sgd(const OptimizerTarget& target, const SgdOptions& options)
    : Optimizer(std::make_unique<detail::OptimizerImpl>(target, config_of(options))) {}

AdamW::AdamW(const OptimizerTarget& target, const AdamWOptions& options)
    : Optimizer(std::make_unique<detail::OptimizerImpl>(target, config_of(options))) {}

ShardedOptimizer::ShardedOptimizer(const OptimizerTarget& target, const AdamWOptions& options,
                                   const ShardedOptions& sharding)
    : Optimizer(
          std::make_unique<detail::OptimizerImpl>(target, sharded(config_of(options), sharding))) {}

ShardedOptimizer::ShardedOptimizer(const OptimizerTarget& target, const SgdOptions& options,
                                   const ShardedOptions& sharding)
    : Optimizer(
          std::make_unique<detail::OptimizerImpl>(target, sharded(config_of(options), sharding))) {}

}  // namespace cohort
