// cl_device.hpp — finding an OpenCL device and what it can do, as data.
//
// A backend opens exactly one device. Which one is a setting (the selector:
// empty for "the first GPU, else the first device of any kind", a decimal index
// into list_devices(), or a case-insensitive substring of the device or
// platform name), never a guess made later. What the device can do is read
// once here into DeviceInfo, so the backend's capability table is plain data
// a test or `explain` can print: out-of-order queues, unified host memory,
// the largest single allocation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/result.hpp"
#include "backends/opencl/cl_include.hpp"

namespace activekv::opencl {

struct DeviceInfo {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  std::string platform_name;
  std::string device_name;
  std::string device_version;       // "OpenCL 3.0 PoCL ..."
  bool is_gpu = false;
  bool out_of_order_queues = false;   // CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE on the host side
  bool host_unified_memory = false;   // device memory is host memory (CPU devices, integrated GPUs)
  std::uint64_t global_memory_bytes = 0;
  std::uint64_t max_allocation_bytes = 0;  // CL_DEVICE_MAX_MEM_ALLOC_SIZE
  std::uint32_t compute_units = 0;
};

// Every device of every platform, in platform then device order. An empty list
// is not an error; an ICD loader that fails is.
Result<std::vector<DeviceInfo>> list_devices();

// The device the selector names (see above); an Error names the setting and
// lists what was found, so the operator can pick one.
Result<DeviceInfo> choose_device(std::string_view selector, std::string_view setting);

}  // namespace activekv::opencl
