// cl_device.cpp — see cl_device.hpp.
#include "backends/opencl/cl_device.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "backends/opencl/cl_error.hpp"

namespace activekv::opencl {
namespace {

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  std::size_t bytes = 0;
  if (clGetPlatformInfo(platform, what, 0, nullptr, &bytes) != CL_SUCCESS || bytes == 0) return {};
  std::string text(bytes, '\0');
  if (clGetPlatformInfo(platform, what, bytes, text.data(), nullptr) != CL_SUCCESS) return {};
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

std::string device_string(cl_device_id device, cl_device_info what) {
  std::size_t bytes = 0;
  if (clGetDeviceInfo(device, what, 0, nullptr, &bytes) != CL_SUCCESS || bytes == 0) return {};
  std::string text(bytes, '\0');
  if (clGetDeviceInfo(device, what, bytes, text.data(), nullptr) != CL_SUCCESS) return {};
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

template <typename T>
T device_value(cl_device_id device, cl_device_info what) {
  T value{};
  if (clGetDeviceInfo(device, what, sizeof(T), &value, nullptr) != CL_SUCCESS) return T{};
  return value;
}

DeviceInfo describe_device(cl_platform_id platform, cl_device_id device) {
  DeviceInfo info;
  info.platform = platform;
  info.device = device;
  info.platform_name = platform_string(platform, CL_PLATFORM_NAME);
  info.device_name = device_string(device, CL_DEVICE_NAME);
  info.device_version = device_string(device, CL_DEVICE_VERSION);
  info.is_gpu = (device_value<cl_device_type>(device, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_GPU) != 0;
  // CL_DEVICE_QUEUE_PROPERTIES is CL_DEVICE_QUEUE_ON_HOST_PROPERTIES in 2.0+; same value.
  const auto queue_properties = device_value<cl_command_queue_properties>(device, CL_DEVICE_QUEUE_PROPERTIES);
  info.out_of_order_queues = (queue_properties & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) != 0;
  info.host_unified_memory = device_value<cl_bool>(device, CL_DEVICE_HOST_UNIFIED_MEMORY) == CL_TRUE;
  info.global_memory_bytes = device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE);
  info.max_allocation_bytes = device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  info.compute_units = device_value<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS);
  return info;
}

bool contains_folded(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  });
  return it != haystack.end();
}

std::string list_for_message(const std::vector<DeviceInfo>& devices) {
  if (devices.empty()) return "no OpenCL device was found (is an ICD such as pocl-opencl-icd installed?)";
  std::string text = "devices found:";
  for (std::size_t i = 0; i < devices.size(); ++i) {
    text += fmt::format(" [{}] {} / {}", i, devices[i].platform_name, devices[i].device_name);
  }
  return text;
}

}  // namespace

Result<std::vector<DeviceInfo>> list_devices() {
  cl_uint platform_count = 0;
  cl_int status = clGetPlatformIDs(0, nullptr, &platform_count);
  if (status == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || platform_count == 0) return std::vector<DeviceInfo>{};
  if (status != CL_SUCCESS) return cl_error("clGetPlatformIDs", status);
  std::vector<cl_platform_id> platforms(platform_count);
  status = clGetPlatformIDs(platform_count, platforms.data(), nullptr);
  if (status != CL_SUCCESS) return cl_error("clGetPlatformIDs", status);

  std::vector<DeviceInfo> devices;
  for (cl_platform_id platform : platforms) {
    cl_uint device_count = 0;
    status = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count);
    if (status == CL_DEVICE_NOT_FOUND || device_count == 0) continue;
    if (status != CL_SUCCESS) return cl_error("clGetDeviceIDs", status);
    std::vector<cl_device_id> ids(device_count);
    status = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, device_count, ids.data(), nullptr);
    if (status != CL_SUCCESS) return cl_error("clGetDeviceIDs", status);
    for (cl_device_id id : ids) devices.push_back(describe_device(platform, id));
  }
  return devices;
}

Result<DeviceInfo> choose_device(std::string_view selector, std::string_view setting) {
  auto listed = list_devices();
  if (!listed) return listed.error();
  const std::vector<DeviceInfo>& devices = listed.value();
  if (devices.empty()) {
    return make_error(ErrorCode::unsupported, std::string(setting), list_for_message(devices));
  }
  if (selector.empty()) {
    for (const DeviceInfo& info : devices) {
      if (info.is_gpu) return info;
    }
    return devices.front();
  }
  std::size_t index = 0;
  const auto [end, ec] = std::from_chars(selector.data(), selector.data() + selector.size(), index);
  if (ec == std::errc{} && end == selector.data() + selector.size()) {
    if (index < devices.size()) return devices[index];
    return make_error(ErrorCode::not_found, std::string(setting),
                      fmt::format("device index {} is out of range; {}", index, list_for_message(devices)));
  }
  for (const DeviceInfo& info : devices) {
    if (contains_folded(info.device_name, selector) || contains_folded(info.platform_name, selector)) return info;
  }
  return make_error(ErrorCode::not_found, std::string(setting),
                    fmt::format("no device matches \"{}\"; {}", selector, list_for_message(devices)));
}

}  // namespace activekv::opencl
