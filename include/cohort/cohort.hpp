#pragma once

/// @file
/// Everything in cohort's public API. Include what you use instead where compile time matters.

#include <cohort/core/device.hpp>
#include <cohort/core/dtype.hpp>
#include <cohort/core/error.hpp>
#include <cohort/core/float16.hpp>
#include <cohort/core/logging.hpp>
#include <cohort/core/stream.hpp>
#include <cohort/launch/file_store.hpp>
#include <cohort/launch/launch_info.hpp>
#include <cohort/launch/memory_store.hpp>
#include <cohort/launch/rendezvous.hpp>
#include <cohort/launch/store.hpp>
#include <cohort/launch/tcp_store.hpp>
#include <cohort/version.hpp>
#include <cohort/comm/communicator.hpp>
#include <cohort/comm/types.hpp>
#include <cohort/comm/work.hpp>
#include <cohort/comm/world.hpp>
#include <cohort/memory/buffer.hpp>
#include <cohort/memory/device_pool.hpp>
#include <cohort/memory/device_span.hpp>
#include <cohort/memory/host_pool.hpp>
#include <cohort/memory/host_resource.hpp>
#include <cohort/memory/limit_adaptor.hpp>
#include <cohort/memory/managed.hpp>
#include <cohort/memory/memory_report.hpp>
#include <cohort/memory/memory_resource.hpp>
#include <cohort/memory/pinned_host.hpp>
#include <cohort/memory/statistics_adaptor.hpp>
