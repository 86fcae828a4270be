// opencl_backend.cpp — the OpenCL backend's buffers, fences and events, copies and
// queue control (opencl_backend.hpp says what it owns and why; the class is in
// opencl_backend_impl.hpp, the attention launch in opencl_attention.cpp).
#include "backends/opencl/opencl_backend.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "activekv/size.hpp"
#include "backends/fence_table.hpp"
#include "backends/opencl/attention_pack.hpp"
#include "backends/opencl/opencl_backend_impl.hpp"

namespace activekv::opencl {
namespace detail {

Status OpenClBackend::create_buffer(MemHandle& buffer, cl_mem_flags flags, std::uint64_t bytes, const char* what) {
  cl_int status = CL_SUCCESS;
  buffer = MemHandle(clCreateBuffer(context_.get(), flags, std::max<std::uint64_t>(bytes, 4), nullptr, &status));
  if (status != CL_SUCCESS) {
    return cl_error("clCreateBuffer", status, fmt::format("allocating the {} ({})", what, format_bytes(bytes)));
  }
  ++stats_.device_allocations;
  return Status::success();
}

Status OpenClBackend::do_allocate(const MemoryRequest& request) {
  if (request.arena_bytes > device_.max_allocation_bytes) {
    return make_error(ErrorCode::refused, "--device-pool",
                      fmt::format("the arena ({}) exceeds the largest single allocation {} allows ({}); lower the device pool",
                                  format_bytes(request.arena_bytes), device_.device_name,
                                  format_bytes(device_.max_allocation_bytes)));
  }
  if (request.host_pool_bytes > device_.max_allocation_bytes) {
    return make_error(ErrorCode::refused, "--host-pool",
                      fmt::format("the host pool ({}) exceeds the largest single OpenCL buffer on {} ({}); lower the host pool",
                                  format_bytes(request.host_pool_bytes), device_.device_name,
                                  format_bytes(device_.max_allocation_bytes)));
  }
  if (Status s = create_buffer(arena_, CL_MEM_READ_WRITE, request.arena_bytes, "arena"); !s.ok()) return s;
  // Touch the arena now so a lazy allocator fails here, at warm-up, not mid-step.
  const cl_uchar zero = 0;
  cl_int status = clEnqueueFillBuffer(queues_[0].get(), arena_.get(), &zero, 1, 0, request.arena_bytes, 0, nullptr, nullptr);
  if (status != CL_SUCCESS) return cl_error("clEnqueueFillBuffer(arena)", status, "lower --device-pool");

  if (Status s = create_buffer(pool_, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, request.host_pool_bytes, "host pool");
      !s.ok()) {
    return s;
  }
  pool_ptr_ = clEnqueueMapBuffer(queues_[1].get(), pool_.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                 request.host_pool_bytes, 0, nullptr, nullptr, &status);
  if (status != CL_SUCCESS) return cl_error("clEnqueueMapBuffer(host pool)", status, "lower --host-pool");

  // Attention scratch, sized from the warm-up limits.
  const std::uint64_t head_floats = std::uint64_t{request.batch_queries_max} * request.q_heads_max;
  pair_ms_capacity_ = std::uint64_t{request.batch_pages_max} * request.q_heads_max;
  if (Status s = create_buffer(q_, CL_MEM_READ_ONLY, head_floats * request.head_dim_max * 4, "attention queries"); !s.ok()) return s;
  if (Status s = create_buffer(out_, CL_MEM_WRITE_ONLY, head_floats * request.head_dim_max * 4, "attention outputs"); !s.ok()) return s;
  if (Status s = create_buffer(state_, CL_MEM_READ_WRITE, head_floats * (2ull + request.head_dim_max) * 4, "attention state"); !s.ok()) return s;
  if (Status s = create_buffer(pair_ms_, CL_MEM_READ_WRITE, pair_ms_capacity_ * 8, "page-mass partials"); !s.ok()) return s;
  if (Status s = create_buffer(final_ms_, CL_MEM_READ_WRITE, head_floats * 8, "page-mass totals"); !s.ok()) return s;
  if (Status s = create_buffer(mass_, CL_MEM_WRITE_ONLY, std::uint64_t{request.batch_pages_max} * 4, "page mass"); !s.ok()) return s;
  if (tuning_.split_scratch_bytes > 0) {
    if (Status s = create_buffer(partials_, CL_MEM_READ_WRITE, tuning_.split_scratch_bytes, "page-parallel partials"); !s.ok()) return s;
  }

  cl_uint align_bits = 0;
  clGetDeviceInfo(device_.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(align_bits), &align_bits, nullptr);
  const std::uint64_t align_bytes = std::max<std::uint64_t>(align_bits / 8, 64);
  param_slot_bytes_ = round_up(
      gpu::packed_slot_bytes(request.batch_pages_max, request.batch_queries_max, request.batch_tasks_max), align_bytes);
  const std::uint64_t params_bytes = param_slot_bytes_ * kParamSlots;
  if (Status s = create_buffer(params_device_, CL_MEM_READ_ONLY, params_bytes, "attention page tables"); !s.ok()) return s;
  for (std::uint32_t i = 0; i < kParamSlots; ++i) {
    const cl_buffer_region region{i * param_slot_bytes_, param_slot_bytes_};
    param_slots_.emplace_back(clCreateSubBuffer(params_device_.get(), CL_MEM_READ_ONLY, CL_BUFFER_CREATE_TYPE_REGION, &region, &status));
    if (status != CL_SUCCESS) return cl_error("clCreateSubBuffer(page table slot)", status);
  }
  if (Status s = create_buffer(params_host_, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, params_bytes, "page table staging");
      !s.ok()) {
    return s;
  }
  params_host_ptr_ = static_cast<std::byte*>(clEnqueueMapBuffer(queues_[0].get(), params_host_.get(), CL_TRUE,
                                                                 CL_MAP_READ | CL_MAP_WRITE, 0, params_bytes, 0,
                                                                 nullptr, nullptr, &status));
  if (status != CL_SUCCESS) return cl_error("clEnqueueMapBuffer(page table staging)", status);

  if (Status s = build_program(request); !s.ok()) return s;

  wait_list_.reserve(std::size_t{fences().capacity()} + kExtraWaits);
  retired_.reserve(std::max<std::size_t>(4096, 2 * std::size_t{request.copy_regions_max}));
  region_events_.reserve(request.copy_regions_max);
  // Warm-up may wait: the fill and maps must have happened before the first step.
  status = clFinish(queues_[0].get());
  if (status != CL_SUCCESS) return cl_error("clFinish (warm-up)", status, "lower --device-pool");
  return Status::success();
}

Result<Fence> OpenClBackend::open_fence(QueueKind kind) {
  Fence fence = fences().open(kind);
  if (!fence.recorded() && reap() > 0) fence = fences().open(kind);
  if (!fence.recorded()) {
    return make_error(ErrorCode::exhausted, "fences_max",
                      fmt::format("all {} fence slots are held; release fences the caller no longer needs or raise fences_max",
                                  fences().capacity()));
  }
  return fence;
}

Fence OpenClBackend::bind(Fence fence, cl_event event, QueueKind kind) {
  AK_ASSERT(slot_events_[fence.slot] == nullptr, "a fence slot still holds an event");
  slot_events_[fence.slot] = event;
  slot_generations_[fence.slot] = fence.generation;
  clFlush(queue(kind));  // OpenCL may hold commands until a flush: a polled fence must make progress
  return fence;
}

Error OpenClBackend::abandon(Fence fence, Error error) {
  fences().resolve(fence, FenceOutcome::failed);
  fences().release(fence);
  return error;
}

Error OpenClBackend::lose(Fence fence, Error error) {
  fences().release(fence);
  mark_lost();
  return error;
}

std::uint32_t OpenClBackend::reap() {
  std::uint32_t resolved = 0;
  for (std::uint32_t slot = 0; slot < slot_events_.size(); ++slot) {
    cl_event event = slot_events_[slot];
    if (event == nullptr) continue;
    const Fence fence{slot, slot_generations_[slot]};
    if (fences().outcome(fence) != FenceOutcome::pending) continue;
    cl_int execution = CL_QUEUED;
    if (clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution), &execution, nullptr) != CL_SUCCESS) {
      continue;
    }
    const FenceOutcome outcome = outcome_of(execution);
    if (is_resolved(outcome) && fences().resolve(fence, outcome)) ++resolved;
  }
  return resolved;
}

void OpenClBackend::retire(cl_event event) {
  if (event == nullptr) return;
  AK_ASSERT(retired_.size() < retired_.capacity(), "retired events exceed the room checked at the call's start");
  retired_.push_back(event);
}

bool OpenClBackend::make_room(std::size_t room) {
  if (retired_.capacity() - retired_.size() >= room) return true;
  std::size_t kept = 0;
  for (cl_event event : retired_) {
    cl_int execution = CL_QUEUED;
    clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution), &execution, nullptr);
    if (execution <= CL_COMPLETE) {
      clReleaseEvent(event);
    } else {
      retired_[kept++] = event;
    }
  }
  retired_.resize(kept);
  return retired_.capacity() - retired_.size() >= room;
}

void OpenClBackend::collect_waits(std::span<const Fence> waits) {
  wait_list_.clear();
  for (const Fence fence : waits) {
    cl_event event = slot_events_[fence.slot];
    AK_ASSERT(event != nullptr, "a current fence without an event");
    wait_list_.push_back(event);
  }
}

Result<Fence> OpenClBackend::do_copy(CopyDirection direction, std::span<const CopyRegion> regions,
                                     std::span<const Fence> waits) {
  const QueueKind kind = queue_of(direction);
  if (direction == CopyDirection::d2d) {
    for (const CopyRegion& region : regions) {
      const bool apart = region.src_offset + region.bytes <= region.dst_offset || region.dst_offset + region.bytes <= region.src_offset;
      if (!apart) return make_error(ErrorCode::invalid_argument, "", "a d2d copy region overlaps itself (source and destination)");
    }
  }
  if (!make_room(regions.size())) {
    return make_error(ErrorCode::exhausted, "opencl", "too many unresolved OpenCL commands in flight; wait on earlier fences");
  }
  Result<Fence> opened = open_fence(kind);
  if (!opened) return opened.error();
  const Fence fence = opened.value();
  collect_waits(waits);
  const auto wait_count = static_cast<cl_uint>(wait_list_.size());
  const cl_event* wait_events = wait_list_.empty() ? nullptr : wait_list_.data();
  auto* pool = static_cast<std::byte*>(pool_ptr_);
  region_events_.clear();
  for (const CopyRegion& region : regions) {
    cl_event event = nullptr;
    cl_int status = CL_SUCCESS;
    switch (direction) {
      case CopyDirection::h2d:
        status = clEnqueueWriteBuffer(queue(kind), arena_.get(), CL_FALSE, region.dst_offset, region.bytes,
                                      pool + region.src_offset, wait_count, wait_events, &event);
        break;
      case CopyDirection::d2h:
        status = clEnqueueReadBuffer(queue(kind), arena_.get(), CL_FALSE, region.src_offset, region.bytes,
                                     pool + region.dst_offset, wait_count, wait_events, &event);
        break;
      case CopyDirection::d2d:
        status = clEnqueueCopyBuffer(queue(kind), arena_.get(), arena_.get(), region.src_offset, region.dst_offset,
                                     region.bytes, wait_count, wait_events, &event);
        break;
    }
    if (status != CL_SUCCESS) {
      for (cl_event e : region_events_) retire(e);
      Error error = cl_error("copy enqueue", status);
      return region_events_.empty() ? abandon(fence, std::move(error)) : lose(fence, std::move(error));
    }
    region_events_.push_back(event);
  }
  if (region_events_.size() == 1) return bind(fence, region_events_.front(), kind);
  cl_event marker = nullptr;
  const cl_int status = clEnqueueMarkerWithWaitList(queue(kind), static_cast<cl_uint>(region_events_.size()),
                                                    region_events_.data(), &marker);
  for (cl_event e : region_events_) retire(e);
  if (status != CL_SUCCESS) return lose(fence, cl_error("clEnqueueMarkerWithWaitList", status));
  return bind(fence, marker, kind);
}

Result<Fence> OpenClBackend::do_upload(std::uint64_t arena_offset, std::span<const std::byte> bytes,
                                       std::span<const Fence> waits) {
  Result<Fence> opened = open_fence(QueueKind::h2d);
  if (!opened) return opened.error();
  collect_waits(waits);
  cl_event event = nullptr;
  const cl_int status = clEnqueueWriteBuffer(queue(QueueKind::h2d), arena_.get(), CL_FALSE, arena_offset, bytes.size(),
                                             bytes.data(), static_cast<cl_uint>(wait_list_.size()),
                                             wait_list_.empty() ? nullptr : wait_list_.data(), &event);
  if (status != CL_SUCCESS) return abandon(opened.value(), cl_error("clEnqueueWriteBuffer(upload)", status));
  return bind(opened.value(), event, QueueKind::h2d);
}

Result<Fence> OpenClBackend::do_download(std::uint64_t arena_offset, std::span<std::byte> bytes,
                                         std::span<const Fence> waits) {
  Result<Fence> opened = open_fence(QueueKind::d2h);
  if (!opened) return opened.error();
  collect_waits(waits);
  cl_event event = nullptr;
  const cl_int status = clEnqueueReadBuffer(queue(QueueKind::d2h), arena_.get(), CL_FALSE, arena_offset, bytes.size(),
                                            bytes.data(), static_cast<cl_uint>(wait_list_.size()),
                                            wait_list_.empty() ? nullptr : wait_list_.data(), &event);
  if (status != CL_SUCCESS) return abandon(opened.value(), cl_error("clEnqueueReadBuffer(download)", status));
  return bind(opened.value(), event, QueueKind::d2h);
}

Result<Fence> OpenClBackend::do_record(QueueKind kind) {
  Result<Fence> opened = open_fence(kind);
  if (!opened) return opened.error();
  cl_event marker = nullptr;
  const cl_int status = clEnqueueMarkerWithWaitList(queue(kind), 0, nullptr, &marker);
  if (status != CL_SUCCESS) return abandon(opened.value(), cl_error("clEnqueueMarkerWithWaitList(record)", status));
  return bind(opened.value(), marker, kind);
}

Status OpenClBackend::do_enqueue_wait(QueueKind kind, std::span<const Fence> waits) {
  collect_waits(waits);
  // The barrier's event is asked for and kept until it resolves: PoCL 3.1 aborts
  // when a command without a live event depends on a failed one (docs/BACKENDS-GPU.md).
  if (!make_room(1)) return make_error(ErrorCode::exhausted, "opencl", "too many unresolved OpenCL commands in flight");
  cl_event barrier = nullptr;
  const cl_int status = clEnqueueBarrierWithWaitList(queue(kind), static_cast<cl_uint>(wait_list_.size()),
                                                     wait_list_.data(), &barrier);
  retire(barrier);
  if (status != CL_SUCCESS) return cl_error("clEnqueueBarrierWithWaitList(enqueue_wait)", status);
  clFlush(queue(kind));
  return Status::success();
}

FenceOutcome OpenClBackend::do_query(Fence fence) {
  cl_event event = slot_events_[fence.slot];
  AK_ASSERT(event != nullptr, "a pending fence without an event");
  cl_int execution = CL_QUEUED;
  const cl_int status = clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution), &execution, nullptr);
  if (status != CL_SUCCESS) {
    mark_lost();  // the runtime cannot say: nothing pending can be trusted
    return FenceOutcome::unknown;
  }
  const FenceOutcome outcome = outcome_of(execution);
  if (is_resolved(outcome)) fences().resolve(fence, outcome);
  return outcome;
}

Result<FenceOutcome> OpenClBackend::do_wait_host(Fence fence, std::chrono::nanoseconds timeout) {
  // OpenCL has no timed wait: poll the one event, backing off to 50 µs.
  const auto deadline = std::chrono::steady_clock::now() + std::min(timeout, std::chrono::nanoseconds(std::chrono::hours(24)));
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    const FenceOutcome outcome = do_query(fence);
    if (is_resolved(outcome) || std::chrono::steady_clock::now() >= deadline) return outcome;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(50));
  }
}

Status OpenClBackend::do_synchronize(QueueKind kind) {
  const cl_int status = clFinish(queue(kind));
  if (status != CL_SUCCESS) return cl_error("clFinish", status);
  reap();
  return Status::success();
}

Status OpenClBackend::do_hold_queue(QueueKind kind, bool hold) {
  EventHandle& held = held_[queue_index(kind)];
  if (!hold) {
    if (!held) return make_error(ErrorCode::invalid_argument, "", fmt::format("queue {} is not held", queue_kind_name(kind)));
    const cl_int status = clSetUserEventStatus(held.get(), CL_COMPLETE);
    held.reset();
    clFlush(queue(kind));
    if (status != CL_SUCCESS) return cl_error("clSetUserEventStatus", status);
    return Status::success();
  }
  if (held) return make_error(ErrorCode::invalid_argument, "", fmt::format("queue {} is already held", queue_kind_name(kind)));
  cl_int status = CL_SUCCESS;
  held = EventHandle(clCreateUserEvent(context_.get(), &status));
  if (status != CL_SUCCESS) return cl_error("clCreateUserEvent", status);
  cl_event gate = held.get();
  if (!make_room(1)) return make_error(ErrorCode::exhausted, "opencl", "too many unresolved OpenCL commands in flight");
  cl_event barrier = nullptr;  // kept until it resolves: see do_enqueue_wait
  status = clEnqueueBarrierWithWaitList(queue(kind), 1, &gate, &barrier);
  retire(barrier);
  if (status != CL_SUCCESS) {
    clSetUserEventStatus(gate, CL_COMPLETE);
    held.reset();
    return cl_error("clEnqueueBarrierWithWaitList(hold)", status);
  }
  return Status::success();
}

}  // namespace detail

using detail::OpenClBackend;

Status fail_held_queue(Backend& backend, QueueKind queue) {
  auto* opencl = dynamic_cast<OpenClBackend*>(&backend);
  if (opencl == nullptr) return make_error(ErrorCode::unsupported, "", "fail_held_queue needs the opencl backend");
  return opencl->fail_held(queue);
}

std::string describe_devices() {
  auto devices = list_devices();
  if (!devices) return devices.error().describe();
  if (devices->empty()) return "no OpenCL device found";
  std::string text;
  for (std::size_t i = 0; i < devices->size(); ++i) {
    const DeviceInfo& d = (*devices)[i];
    text += fmt::format("[{}] {} / {} ({}){}\n", i, d.platform_name, d.device_name, d.device_version,
                        d.is_gpu ? ", GPU" : "");
  }
  return text;
}

}  // namespace activekv::opencl

namespace activekv {

Result<std::unique_ptr<Backend>> make_opencl_backend(const BackendOptions& options) {
  return opencl::make_opencl_backend_tuned(options, opencl::OpenClTuning{});
}

Result<std::unique_ptr<Backend>> opencl::make_opencl_backend_tuned(const BackendOptions& options, const OpenClTuning& tuning) {
  if (options.device_index < 0) {
    return make_error(ErrorCode::invalid_argument, "--device", "the OpenCL device index must be 0 or more");
  }
  auto device = opencl::choose_device(std::to_string(options.device_index), "--device");
  if (!device) return device.error();
  auto backend = std::make_unique<opencl::OpenClBackend>(options, tuning, std::move(device).value());
  if (Status s = backend->open(); !s.ok()) return s.error();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace activekv
