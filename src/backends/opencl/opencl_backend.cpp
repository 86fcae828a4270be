// opencl_backend.cpp — see opencl_backend.hpp for what this owns and why.
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
#include "backends/opencl/attention_source.hpp"
#include "backends/opencl/cl_device.hpp"
#include "backends/opencl/cl_error.hpp"
#include "backends/opencl/cl_handle.hpp"

namespace activekv::opencl {
namespace {

// Parameter slots: page tables of attention calls that may be in flight at once.
constexpr std::uint32_t kParamSlots = 8;
// Wait-list capacity beyond the caller's fences: the previous attention call
// and the commands of one call.
constexpr std::uint32_t kExtraWaits = 8;
constexpr std::size_t kQueues = 3;  // compute (d2d too), h2d, d2h

std::size_t queue_index(QueueKind kind) noexcept {
  switch (kind) {
    case QueueKind::compute: return 0;
    case QueueKind::d2d: return 0;
    case QueueKind::h2d: return 1;
    case QueueKind::d2h: return 2;
  }
  return 0;
}

FenceOutcome outcome_of(cl_int execution_status) noexcept {
  if (execution_status < 0) return FenceOutcome::failed;
  if (execution_status == CL_COMPLETE) return FenceOutcome::signalled;
  return FenceOutcome::pending;
}

std::uint64_t round_up(std::uint64_t value, std::uint64_t multiple) noexcept {
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

Status OpenClBackend::create_buffer(MemHandle& buffer, cl_mem_flags flags, std::uint64_t bytes, const char* what) {
  cl_int status = CL_SUCCESS;
  buffer = MemHandle(clCreateBuffer(context_.get(), flags, std::max<std::uint64_t>(bytes, 4), nullptr, &status));
  if (status != CL_SUCCESS) {
    return cl_error("clCreateBuffer", status, fmt::format("allocating the {} ({})", what, format_bytes(bytes)));
  }
  ++stats_.device_allocations;
  return Status::success();
}

Status OpenClBackend::build_program(const MemoryRequest& request) {
  const char* source = attention_cl_source;
  cl_int status = CL_SUCCESS;
  program_ = ProgramHandle(clCreateProgramWithSource(context_.get(), 1, &source, nullptr, &status));
  if (status != CL_SUCCESS) return cl_error("clCreateProgramWithSource", status);
  // No -cl-fast-relaxed-math, no -cl-mad-enable: the math must be the contract's.
  const std::string options = fmt::format("-cl-std=CL1.2 -DAK_HEAD_DIM_MAX={}", request.head_dim_max);
  status = clBuildProgram(program_.get(), 1, &device_.device, options.c_str(), nullptr, nullptr);
  if (status != CL_SUCCESS) {
    std::size_t log_bytes = 0;
    clGetProgramBuildInfo(program_.get(), device_.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_bytes);
    std::string log(log_bytes, '\0');
    clGetProgramBuildInfo(program_.get(), device_.device, CL_PROGRAM_BUILD_LOG, log_bytes, log.data(), nullptr);
    return cl_error("clBuildProgram", status, log);
  }
  attention_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_attention", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_attention)", status);
  mass_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_page_mass", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_page_mass)", status);
  partials_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_page_partials", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_page_partials)", status);
  merge_kernel_ = KernelHandle(clCreateKernel(program_.get(), "ak_merge_partials", &status));
  if (status != CL_SUCCESS) return cl_error("clCreateKernel(ak_merge_partials)", status);
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

Result<Fence> OpenClBackend::do_attention(const AttentionBatch& batch, std::span<const Fence> waits) {
  const std::uint32_t element_bytes = dtype_bytes(batch.shape.dtype);
  for (const AttentionPage& page : batch.pages) {
    if (page.arena_offset % element_bytes != 0) {
      return make_error(ErrorCode::invalid_argument, "",
                        fmt::format("attention page at arena offset {} is not aligned to its {}-byte elements",
                                    page.arena_offset, element_bytes));
    }
  }
  const bool wants_mass = !batch.page_mass.empty();
  const std::uint64_t triples = gpu::pair_page_count(batch);
  const bool split = partials_ && triples * (2ull + batch.shape.head_dim) * 4 <= tuning_.split_scratch_bytes;
  if (wants_mass && !split && triples > pair_ms_capacity_) {
    return make_error(ErrorCode::exhausted, "page_mass",
                      fmt::format("page mass for {} (query, head, page) triples exceeds the scratch sized at warm-up "
                                  "({} = batch_pages_max x q_heads_max); ask for page mass on decode batches or split the batch",
                                  gpu::pair_page_count(batch), pair_ms_capacity_));
  }
  // The host staging slot must no longer be read by its previous upload.
  const std::uint32_t slot = param_next_;
  if (cl_event previous = param_uploads_[slot]; previous != nullptr) {
    cl_int execution = CL_QUEUED;
    clGetEventInfo(previous, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution), &execution, nullptr);
    if (execution > CL_COMPLETE) {
      return make_error(ErrorCode::exhausted, "attention",
                        fmt::format("{} attention calls are already in flight; wait on an earlier attention fence first",
                                    kParamSlots));
    }
    release_event(param_uploads_[slot]);
  }
  if (!make_room(12)) {
    return make_error(ErrorCode::exhausted, "opencl", "too many unresolved OpenCL commands in flight; wait on earlier fences");
  }
  Result<Fence> opened = open_fence(QueueKind::compute);
  if (!opened) return opened.error();
  const Fence fence = opened.value();
  param_next_ = (param_next_ + 1) % kParamSlots;

  const std::span<std::byte> host_slot(params_host_ptr_ + slot * param_slot_bytes_, param_slot_bytes_);
  const gpu::PackedParams params = gpu::pack_attention(batch, host_slot);
  const auto queries = static_cast<std::uint64_t>(batch.query_positions.size());
  const std::uint64_t head_elements = std::uint64_t{batch.shape.q_heads} * batch.shape.head_dim;
  const std::uint64_t state_floats = queries * batch.shape.q_heads * (2ull + batch.shape.head_dim);
  const std::uint64_t table_bytes = gpu::packed_slot_bytes(params.pages, params.queries, params.tasks);
  cl_command_queue compute = queue(QueueKind::compute);

  collect_waits(waits);
  if (last_attention_ != nullptr) {
    // Chain on the previous call only while it runs: a finished one needs no wait,
    // and a failed one must not fail every later call through the wait list.
    cl_int execution = CL_QUEUED;
    clGetEventInfo(last_attention_, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(execution), &execution, nullptr);
    if (execution <= CL_COMPLETE) {
      release_event(last_attention_);
    } else {
      wait_list_.push_back(last_attention_);
    }
  }
  const auto wait_count = static_cast<cl_uint>(wait_list_.size());
  const cl_event* wait_events = wait_list_.empty() ? nullptr : wait_list_.data();

  std::array<cl_event, 3> uploads{};
  std::uint32_t upload_count = 0;
  std::array<cl_event, 3> reads{};
  std::uint32_t read_count = 0;
  cl_event attention_done = nullptr;
  cl_event mass_done = nullptr;
  cl_event final_event = nullptr;
  auto release_all = [&] {
    for (cl_event e : uploads) retire(e);
    for (cl_event e : reads) retire(e);
    retire(attention_done);
    retire(mass_done);
  };
  auto fail = [&](const char* call, cl_int status) {
    release_all();
    return lose(fence, cl_error(call, status));
  };

  cl_int status = clEnqueueWriteBuffer(compute, param_slots_[slot].get(), CL_FALSE, 0, table_bytes, host_slot.data(),
                                       wait_count, wait_events, &uploads[upload_count]);
  if (status != CL_SUCCESS) {
    release_all();
    return abandon(fence, cl_error("clEnqueueWriteBuffer(page table)", status));
  }
  param_uploads_[slot] = uploads[upload_count];
  clRetainEvent(param_uploads_[slot]);
  ++upload_count;
  status = clEnqueueWriteBuffer(compute, q_.get(), CL_FALSE, 0, queries * head_elements * 4, batch.queries.data(),
                                wait_count, wait_events, &uploads[upload_count]);
  if (status != CL_SUCCESS) return fail("clEnqueueWriteBuffer(queries)", status);
  ++upload_count;
  if (batch.load_state) {
    status = clEnqueueWriteBuffer(compute, state_.get(), CL_FALSE, 0, state_floats * 4, batch.state.data(), wait_count,
                                  wait_events, &uploads[upload_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueWriteBuffer(state)", status);
    ++upload_count;
  }

  cl_mem arena = arena_.get(), table = param_slots_[slot].get(), q = q_.get(), out = out_.get(), state = state_.get(),
         pair_ms = pair_ms_.get(), final_ms = final_ms_.get(), mass = mass_.get(), partials = partials_.get();
  // CPU devices run one work-group per thread: single work-items spread the pairs over
  // every core. GPUs choose their own work-group shape.
  const std::size_t local_one[2] = {1, 1};
  const std::size_t* local_2d = device_.is_gpu ? nullptr : local_one;
  const std::size_t global_pairs[2] = {static_cast<std::size_t>(queries), batch.shape.q_heads};
  if (split) {
    std::uint32_t rows_max = 0;
    for (const AttentionTask& task : batch.tasks) rows_max = std::max(rows_max, task.query_count);
    cl_kernel pk = partials_kernel_.get();
    clSetKernelArg(pk, 0, sizeof(params), &params);
    clSetKernelArg(pk, 1, sizeof(cl_mem), &arena);
    clSetKernelArg(pk, 2, sizeof(cl_mem), &table);
    clSetKernelArg(pk, 3, sizeof(cl_mem), &q);
    clSetKernelArg(pk, 4, sizeof(cl_mem), &partials);
    const std::size_t global_triples[3] = {batch.pages.size(), batch.shape.q_heads, rows_max};
    cl_event partials_done = nullptr;
    status = clEnqueueNDRangeKernel(compute, pk, 3, nullptr, global_triples, nullptr, upload_count, uploads.data(), &partials_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_page_partials)", status);
    retire(partials_done);
    cl_kernel mk = merge_kernel_.get();
    clSetKernelArg(mk, 0, sizeof(params), &params);
    clSetKernelArg(mk, 1, sizeof(cl_mem), &table);
    clSetKernelArg(mk, 2, sizeof(cl_mem), &partials);
    clSetKernelArg(mk, 3, sizeof(cl_mem), &out);
    clSetKernelArg(mk, 4, sizeof(cl_mem), &state);
    clSetKernelArg(mk, 5, sizeof(cl_mem), &final_ms);
    status = clEnqueueNDRangeKernel(compute, mk, 2, nullptr, global_pairs, local_2d, 1, &partials_done, &attention_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_merge_partials)", status);
  } else {
    cl_kernel kernel = attention_kernel_.get();
    clSetKernelArg(kernel, 0, sizeof(params), &params);
    clSetKernelArg(kernel, 1, sizeof(cl_mem), &arena);
    clSetKernelArg(kernel, 2, sizeof(cl_mem), &table);
    clSetKernelArg(kernel, 3, sizeof(cl_mem), &q);
    clSetKernelArg(kernel, 4, sizeof(cl_mem), &out);
    clSetKernelArg(kernel, 5, sizeof(cl_mem), &state);
    clSetKernelArg(kernel, 6, sizeof(cl_mem), &pair_ms);
    clSetKernelArg(kernel, 7, sizeof(cl_mem), &final_ms);
    status = clEnqueueNDRangeKernel(compute, kernel, 2, nullptr, global_pairs, local_2d, upload_count, uploads.data(), &attention_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_attention)", status);
  }

  if (wants_mass) {
    // The page-parallel partials hold (m_p, s_p) at the same index, with a wider stride.
    cl_kernel mk = mass_kernel_.get();
    const cl_uint ms_stride = split ? 2u + batch.shape.head_dim : 2u;
    clSetKernelArg(mk, 0, sizeof(params), &params);
    clSetKernelArg(mk, 1, sizeof(cl_mem), &table);
    clSetKernelArg(mk, 2, sizeof(cl_mem), split ? &partials : &pair_ms);
    clSetKernelArg(mk, 3, sizeof(cl_uint), &ms_stride);
    clSetKernelArg(mk, 4, sizeof(cl_mem), &final_ms);
    clSetKernelArg(mk, 5, sizeof(cl_mem), &mass);
    const std::size_t pages = batch.pages.size();
    status = clEnqueueNDRangeKernel(compute, mk, 1, nullptr, &pages, nullptr, 1, &attention_done, &mass_done);
    if (status != CL_SUCCESS) return fail("clEnqueueNDRangeKernel(ak_page_mass)", status);
    status = clEnqueueReadBuffer(compute, mass, CL_FALSE, 0, batch.page_mass.size() * 4, batch.page_mass.data(), 1,
                                 &mass_done, &reads[read_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueReadBuffer(page mass)", status);
    ++read_count;
  }
  if (batch.write_output) {
    status = clEnqueueReadBuffer(compute, out, CL_FALSE, 0, queries * head_elements * 4, batch.output.data(), 1,
                                 &attention_done, &reads[read_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueReadBuffer(output)", status);
    ++read_count;
  }
  if (batch.store_state) {
    status = clEnqueueReadBuffer(compute, state, CL_FALSE, 0, state_floats * 4, batch.state.data(), 1, &attention_done,
                                 &reads[read_count]);
    if (status != CL_SUCCESS) return fail("clEnqueueReadBuffer(state)", status);
    ++read_count;
  }
  status = clEnqueueMarkerWithWaitList(compute, read_count, reads.data(), &final_event);
  if (status != CL_SUCCESS) return fail("clEnqueueMarkerWithWaitList(attention)", status);
  release_all();
  release_event(last_attention_);
  last_attention_ = final_event;
  clRetainEvent(last_attention_);
  return bind(fence, final_event, QueueKind::compute);
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

}  // namespace

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
