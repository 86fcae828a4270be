// opencl_backend_impl.hpp — the OpenCL backend's class, shared by its two files:
//   opencl_backend.cpp    buffers, fences and events, copies, queue control
//   opencl_attention.cpp  the attention program: building it and launching a batch
// Internal to the backend (namespace detail); everything else reaches it through
// the Backend interface and opencl_backend.hpp. The invariants are the backend's
// (opencl_backend.hpp): every fence slot holds the event behind it, and no
// command's event is released before it resolves.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "activekv/size.hpp"
#include "backends/opencl/cl_device.hpp"
#include "backends/opencl/cl_error.hpp"
#include "backends/opencl/cl_handle.hpp"
#include "backends/opencl/opencl_backend.hpp"

namespace activekv::opencl::detail {


// Parameter slots: page tables of attention calls that may be in flight at once.
constexpr std::uint32_t kParamSlots = 8;
// Wait-list capacity beyond the caller's fences: the previous attention call
// and the commands of one call.
constexpr std::uint32_t kExtraWaits = 8;
constexpr std::size_t kQueues = 3;  // compute (d2d too), h2d, d2h

inline std::size_t queue_index(QueueKind kind) noexcept {
  switch (kind) {
    case QueueKind::compute: return 0;
    case QueueKind::d2d: return 0;
    case QueueKind::h2d: return 1;
    case QueueKind::d2h: return 2;
  }
  return 0;
}

inline FenceOutcome outcome_of(cl_int execution_status) noexcept {
  if (execution_status < 0) return FenceOutcome::failed;
  if (execution_status == CL_COMPLETE) return FenceOutcome::signalled;
  return FenceOutcome::pending;
}

inline std::uint64_t round_up(std::uint64_t value, std::uint64_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

class OpenClBackend final : public Backend {
 public:
  OpenClBackend(const BackendOptions& options, const OpenClTuning& tuning, DeviceInfo device)
      : Backend(options.fences_max), device_(std::move(device)), tuning_(tuning), slot_events_(options.fences_max, nullptr),
        slot_generations_(options.fences_max, 0) {
    capabilities_.can_pin = true;
    capabilities_.batched_copies = false;  // a loop of enqueues under one fence
    capabilities_.d2d = true;
    capabilities_.d2d_own_queue = false;
    capabilities_.out_of_order = device_.out_of_order_queues;
    capabilities_.host_visible_arena = false;
    capabilities_.can_hold_queue = true;
    capabilities_.deterministic = false;
    capabilities_.page_mass = true;
    capabilities_.page_heads = true;
    capabilities_.compute_threads = std::max(1u, device_.compute_units);
  }

  ~OpenClBackend() override {
    // A held queue would never drain: cancel what it gates.
    for (EventHandle& held : held_) {
      if (held) clSetUserEventStatus(held.get(), -1);
      held.reset();
    }
    for (QueueHandle& queue : queues_) {
      if (queue) clFinish(queue.get());
    }
    if (pool_ && pool_ptr_ != nullptr && queues_[1]) {
      cl_event unmapped = nullptr;
      if (clEnqueueUnmapMemObject(queues_[1].get(), pool_.get(), pool_ptr_, 0, nullptr, &unmapped) == CL_SUCCESS) {
        clWaitForEvents(1, &unmapped);
        clReleaseEvent(unmapped);
      }
    }
    if (params_host_ && params_host_ptr_ != nullptr && queues_[0]) {
      if (clEnqueueUnmapMemObject(queues_[0].get(), params_host_.get(), params_host_ptr_, 0, nullptr, nullptr) == CL_SUCCESS) {
        clFinish(queues_[0].get());
      }
    }
    for (cl_event& event : slot_events_) release_event(event);
    for (cl_event& event : param_uploads_) release_event(event);
    for (cl_event& event : retired_) release_event(event);
    release_event(last_attention_);
  }

  Status open() {
    cl_int status = CL_SUCCESS;
    const cl_context_properties properties[] = {CL_CONTEXT_PLATFORM,
                                                reinterpret_cast<cl_context_properties>(device_.platform), 0};
    context_ = ContextHandle(clCreateContext(properties, 1, &device_.device, nullptr, nullptr, &status));
    if (status != CL_SUCCESS) return cl_error("clCreateContext", status);
    const cl_command_queue_properties queue_properties =
        device_.out_of_order_queues ? CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE : 0;
    for (QueueHandle& queue : queues_) {
      queue = QueueHandle(clCreateCommandQueue(context_.get(), device_.device, queue_properties, &status));
      if (status != CL_SUCCESS) return cl_error("clCreateCommandQueue", status);
    }
    return Status::success();
  }

  std::string_view name() const noexcept override { return "opencl"; }
  const Capabilities& capabilities() const noexcept override { return capabilities_; }
  std::string describe() const override {
    return fmt::format("OpenCL {} / {} ({}), {} compute units, {} global memory, {} queues", device_.platform_name,
                       device_.device_name, device_.device_version, device_.compute_units,
                       format_bytes(device_.global_memory_bytes), device_.out_of_order_queues ? "out-of-order" : "in-order");
  }
  std::span<std::byte> host_pool() noexcept override {
    return {static_cast<std::byte*>(pool_ptr_), pool_ptr_ == nullptr ? 0 : host_pool_bytes()};
  }

  Status fail_held(QueueKind kind) {
    EventHandle& held = held_[queue_index(kind)];
    if (!held) return make_error(ErrorCode::invalid_argument, "", fmt::format("queue {} is not held", queue_kind_name(kind)));
    const cl_int status = clSetUserEventStatus(held.get(), -1);
    held.reset();
    if (status != CL_SUCCESS) return cl_error("clSetUserEventStatus", status);
    return Status::success();
  }

 protected:
  Status do_allocate(const MemoryRequest& request) override;
  Result<Fence> do_copy(CopyDirection direction, std::span<const CopyRegion> regions, std::span<const Fence> waits) override;
  Result<Fence> do_upload(std::uint64_t arena_offset, std::span<const std::byte> bytes, std::span<const Fence> waits) override;
  Result<Fence> do_download(std::uint64_t arena_offset, std::span<std::byte> bytes, std::span<const Fence> waits) override;
  Result<Fence> do_attention(const AttentionBatch& batch, std::span<const Fence> waits) override;
  Result<Fence> do_record(QueueKind queue) override;
  Status do_enqueue_wait(QueueKind queue, std::span<const Fence> fences) override;
  FenceOutcome do_query(Fence fence) override;
  Result<FenceOutcome> do_wait_host(Fence fence, std::chrono::nanoseconds timeout) override;
  Status do_synchronize(QueueKind queue) override;
  Status do_hold_queue(QueueKind queue, bool hold) override;
  void on_fence_recycled(std::uint32_t slot) override { release_event(slot_events_[slot]); }

 private:
  static void release_event(cl_event& event) noexcept {
    if (event != nullptr) clReleaseEvent(event);
    event = nullptr;
  }

  cl_command_queue queue(QueueKind kind) const noexcept { return queues_[queue_index(kind)].get(); }

  // A table slot for the work about to be enqueued; reaps finished fences when
  // the table is full. An Error (fences_max) when nothing can be reaped.
  Result<Fence> open_fence(QueueKind kind);
  // Binds the enqueued work's event to the fence (takes ownership of `event`).
  Fence bind(Fence fence, cl_event event, QueueKind kind);
  // The enqueue failed before anything of this call ran: the fence fails and
  // the caller's hold is dropped, so the slot returns to the table.
  Error abandon(Fence fence, Error error);
  // A failure after part of the call was enqueued: not attributable to one fence.
  Error lose(Fence fence, Error error);
  // Resolves every slot whose event finished; returns how many.
  std::uint32_t reap();
  // Keeps `event` until it resolves (takes ownership).
  void retire(cl_event event);
  // Releases retired events that resolved; true when `room` more fit.
  bool make_room(std::size_t room);
  // The cl_events of `waits`, appended to wait_list_ (cleared first).
  void collect_waits(std::span<const Fence> waits);

  Status create_buffer(MemHandle& buffer, cl_mem_flags flags, std::uint64_t bytes, const char* what);
  Status build_program(const MemoryRequest& request);

  DeviceInfo device_;
  OpenClTuning tuning_;
  Capabilities capabilities_{};
  ContextHandle context_;
  std::array<QueueHandle, kQueues> queues_;
  std::array<EventHandle, kQueues> held_;  // user events gating held queues

  MemHandle arena_;
  MemHandle pool_;
  void* pool_ptr_ = nullptr;

  ProgramHandle program_;
  KernelHandle attention_kernel_;
  KernelHandle mass_kernel_;
  KernelHandle partials_kernel_;  // page-parallel schedule
  KernelHandle merge_kernel_;
  MemHandle partials_;            // tuning_.split_scratch_bytes; empty when 0
  MemHandle params_device_;
  std::vector<MemHandle> param_slots_;    // sub-buffers of params_device_, one per slot
  MemHandle params_host_;
  std::byte* params_host_ptr_ = nullptr;
  std::uint64_t param_slot_bytes_ = 0;
  std::array<cl_event, kParamSlots> param_uploads_{};  // the last upload from each host slot
  std::uint32_t param_next_ = 0;
  MemHandle q_, out_, state_, pair_ms_, final_ms_, mass_;
  std::uint64_t pair_ms_capacity_ = 0;  // (m_p, s_p) pairs pair_ms_ holds
  cl_event last_attention_ = nullptr;   // attention calls share scratch: each waits for the last

  std::vector<cl_event> slot_events_;          // [fences_max] the event behind each fence slot
  std::vector<std::uint32_t> slot_generations_;  // [fences_max] the generation bound to it
  // Events of intermediate commands (regions, uploads, kernels, barriers),
  // kept until they resolve: PoCL 3.1 aborts when a command whose event the
  // application already released later fails. Reserved at allocate().
  std::vector<cl_event> retired_;
  std::vector<cl_event> wait_list_;            // reserved at allocate()
  std::vector<cl_event> region_events_;        // reserved at allocate(): copy_regions_max
};

}  // namespace activekv::opencl::detail
