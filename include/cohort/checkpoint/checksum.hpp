#pragma once

/// @file
/// `Checksum` is a core type (`cohort/core/checksum.hpp`): the ranks' agreement on bytes uses it
/// as well as the checkpoints. This header keeps `#include <cohort/checkpoint/checksum.hpp>`
/// compiling.

#include <cohort/core/checksum.hpp>
