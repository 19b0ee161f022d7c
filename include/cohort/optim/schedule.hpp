#pragma once

/// @file
/// `LrSchedule`, the learning-rate schedule the optimizers take. It is defined with the step
/// kernels that evaluate it on the device, which sit below the optimizers.

#include <cohort/kernels/lr_schedule.hpp>
