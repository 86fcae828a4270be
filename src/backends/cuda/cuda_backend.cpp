// cuda_backend.cpp — the Backend interface on the CUDA runtime.
//
// What it owns (created by make_cuda_backend and allocate(), none later):
//   three non-blocking streams (cudaStreamCreateWithFlags(cudaStreamNonBlocking),
//   so the legacy default stream never orders them): compute (which also runs
//   d2d copies), h2d and d2h; the arena (one cudaMalloc); the host pool (one
//   cudaHostAlloc: pinned, or allocate() fails — no pageable fallback); one
//   cudaEvent per fence slot (created at allocate, timing disabled); attention
//   scratch on the device, and pinned staging slots on the host.
//
// Fences: slot i is event i plus a `recorded` flag. cudaEventQuery answers
// cudaSuccess for an event that was never recorded, so the flag — set only
// after cudaEventRecord succeeded — is what makes "never recorded" mean "not
// complete". cudaErrorNotReady is pending; any other error is sticky in CUDA
// and cannot be pinned on one fence: the backend is marked lost and every
// pending fence becomes unknown.
//
// Ordering: waits are cudaStreamWaitEvent (on the device). The host never
// synchronises the compute stream. Attention inputs are staged by the calling
// thread into a pinned slot (a cudaMemcpyAsync from pageable memory would make
// the host wait for the stream), and outputs come back to the pinned slot and
// are copied to the caller's memory by a cudaLaunchHostFunc in stream order,
// before the fence's event is recorded. A stream that is being captured into a
// graph is refused (cudaStreamIsCapturing): capture would defer the work and
// make every fence meaningless.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "activekv/backend.hpp"
#include "activekv/size.hpp"
#include "backends/cuda/attention_launch.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/fence_table.hpp"
#include "backends/opencl/attention_pack.hpp"

namespace activekv::cuda {
namespace {

constexpr std::uint32_t kStagingSlots = 4;  // attention calls in flight at once
constexpr std::size_t kStreams = 3;          // compute (d2d too), h2d, d2h

std::size_t stream_index(QueueKind kind) noexcept {
  switch (kind) {
    case QueueKind::compute: return 0;
    case QueueKind::d2d: return 0;
    case QueueKind::h2d: return 1;
    case QueueKind::d2h: return 2;
  }
  return 0;
}

Error cuda_error(std::string_view call, cudaError_t status, std::string_view advice = {}) {
  std::string message = fmt::format("{}: {} ({})", call, cudaGetErrorName(status), cudaGetErrorString(status));
  if (!advice.empty()) message += fmt::format(": {}", advice);
  return make_error(ErrorCode::backend, "cuda", std::move(message));
}

std::uint64_t round_up(std::uint64_t value, std::uint64_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

// Where one attention call's results go back to the caller (host func payload).
struct Readback {
  const std::byte* staged_out = nullptr;
  float* out = nullptr;
  std::size_t out_bytes = 0;
  const std::byte* staged_state = nullptr;
  float* state = nullptr;
  std::size_t state_bytes = 0;
  const std::byte* staged_mass = nullptr;
  float* mass = nullptr;
  std::size_t mass_bytes = 0;
};

void CUDART_CB copy_back(void* payload) {
  const auto* r = static_cast<const Readback*>(payload);
  if (r->out_bytes != 0) std::memcpy(r->out, r->staged_out, r->out_bytes);
  if (r->state_bytes != 0) std::memcpy(r->state, r->staged_state, r->state_bytes);
  if (r->mass_bytes != 0) std::memcpy(r->mass, r->staged_mass, r->mass_bytes);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const BackendOptions& options, int device, cudaDeviceProp properties)
      : Backend(options.fences_max), device_(device), properties_(properties),
        events_(options.fences_max, nullptr), recorded_(options.fences_max, 0), generations_(options.fences_max, 0) {
    capabilities_.can_pin = true;
#if CUDART_VERSION >= 12080
    capabilities_.batched_copies = true;
#endif
    capabilities_.d2d = true;
    capabilities_.d2d_own_queue = false;
    capabilities_.out_of_order = false;  // each stream is in order; streams order by events
    capabilities_.host_visible_arena = false;
    capabilities_.can_hold_queue = false;
    capabilities_.deterministic = false;
    capabilities_.page_mass = true;
    capabilities_.page_heads = true;
    capabilities_.compute_threads = static_cast<std::uint32_t>(std::max(1, properties_.multiProcessorCount));
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    for (cudaStream_t stream : streams_) {
      if (stream != nullptr) {
        cudaStreamSynchronize(stream);  // teardown, not the step path
        cudaStreamDestroy(stream);
      }
    }
    for (cudaEvent_t event : events_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (cudaEvent_t event : staging_done_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    // q_ and state_ live inside table_device_'s allocation.
    const std::array<void*, 6> owned = {arena_, table_device_, out_, pair_ms_, final_ms_, mass_};
    for (void* p : owned) {
      if (p != nullptr) cudaFree(p);
    }
    if (pool_ != nullptr) cudaFreeHost(pool_);
    if (staging_ != nullptr) cudaFreeHost(staging_);
  }

  Status open() {
    if (cudaError_t s = cudaSetDevice(device_); s != cudaSuccess) return cuda_error("cudaSetDevice", s);
    for (cudaStream_t& stream : streams_) {
      if (cudaError_t s = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); s != cudaSuccess) {
        return cuda_error("cudaStreamCreateWithFlags", s);
      }
    }
    return Status::success();
  }

  std::string_view name() const noexcept override { return "cuda"; }
  const Capabilities& capabilities() const noexcept override { return capabilities_; }
  std::string describe() const override {
    return fmt::format("CUDA device {}: {} (sm_{}{}), {} SMs, {} memory, runtime {}", device_, properties_.name,
                       properties_.major, properties_.minor, properties_.multiProcessorCount,
                       format_bytes(properties_.totalGlobalMem), CUDART_VERSION);
  }
  std::span<std::byte> host_pool() noexcept override {
    return {static_cast<std::byte*>(pool_), pool_ == nullptr ? 0 : host_pool_bytes()};
  }

  cudaStream_t stream(QueueKind kind) const noexcept { return streams_[stream_index(kind)]; }

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
  void on_fence_recycled(std::uint32_t slot) override { recorded_[slot] = 0; }

 private:
  // Refuses a stream under graph capture, and waits on `waits` on the device.
  Status prepare(QueueKind kind, std::span<const Fence> waits);
  Result<Fence> open_fence(QueueKind kind);
  // Records the fence's event on the stream; a failure here is not attributable.
  Result<Fence> finish(Fence fence, QueueKind kind);
  Error lose(Fence fence, Error error);
  std::uint32_t reap();
  Status alloc_device(void** pointer, std::uint64_t bytes, const char* what, const char* setting);

  int device_;
  cudaDeviceProp properties_;
  Capabilities capabilities_{};
  std::array<cudaStream_t, kStreams> streams_{};
  void* arena_ = nullptr;
  void* pool_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<std::uint8_t> recorded_;        // [fences_max] 1 once the slot's event was recorded
  std::vector<std::uint32_t> generations_;    // [fences_max] the generation recorded in the slot

  // Attention: device scratch (shared; the compute stream is in order) and
  // pinned staging slots (one per call in flight).
  void* table_device_ = nullptr;
  float *q_ = nullptr, *out_ = nullptr, *state_ = nullptr, *pair_ms_ = nullptr, *final_ms_ = nullptr, *mass_ = nullptr;
  std::uint64_t pair_ms_capacity_ = 0;
  std::byte* staging_ = nullptr;
  std::uint64_t staging_slot_bytes_ = 0;
  std::uint64_t table_bytes_max_ = 0, q_bytes_max_ = 0, state_bytes_max_ = 0;
  std::array<cudaEvent_t, kStagingSlots> staging_done_{};
  std::array<bool, kStagingSlots> staging_used_{};
  std::array<Readback, kStagingSlots> readbacks_{};
  std::uint32_t staging_next_ = 0;

  // Batched copies: argument arrays reserved at allocate().
  std::vector<void*> batch_dsts_;
  std::vector<const void*> batch_srcs_;
  std::vector<std::size_t> batch_sizes_;
};

Status CudaBackend::alloc_device(void** pointer, std::uint64_t bytes, const char* what, const char* setting) {
  const cudaError_t s = cudaMalloc(pointer, std::max<std::uint64_t>(bytes, 4));
  if (s != cudaSuccess) {
    cudaGetLastError();  // allocation failures are not sticky: clear it
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return make_error(ErrorCode::refused, setting,
                      fmt::format("cudaMalloc of the {} ({}) failed: {}; the device has {} free of {}", what,
                                  format_bytes(bytes), cudaGetErrorString(s), format_bytes(free_bytes),
                                  format_bytes(total_bytes)));
  }
  ++stats_.device_allocations;
  return Status::success();
}

Status CudaBackend::do_allocate(const MemoryRequest& request) {
  if (request.head_dim_max > kAttentionHeadDimMax) {
    return make_error(ErrorCode::unsupported, "head_dim_max",
                      fmt::format("the CUDA attention kernel holds head_dim ≤ {} in registers; {} was asked",
                                  kAttentionHeadDimMax, request.head_dim_max));
  }
  if (!request.pin_host_pool) {
    return make_error(ErrorCode::unsupported, "--host-pool",
                      "the CUDA backend always pins the host pool (cudaHostAlloc); pageable DMA would block the host");
  }
  if (cudaError_t s = cudaSetDevice(device_); s != cudaSuccess) return cuda_error("cudaSetDevice", s);
  if (Status s = alloc_device(&arena_, request.arena_bytes, "arena", "--device-pool"); !s.ok()) return s;
  if (cudaError_t s = cudaMemset(arena_, 0, request.arena_bytes); s != cudaSuccess) return cuda_error("cudaMemset(arena)", s);
  if (cudaError_t s = cudaHostAlloc(&pool_, request.host_pool_bytes, cudaHostAllocPortable); s != cudaSuccess) {
    cudaGetLastError();
    return make_error(ErrorCode::refused, "--host-pool",
                      fmt::format("cudaHostAlloc of the host pool ({}) failed: {}; lower --host-pool or raise RLIMIT_MEMLOCK",
                                  format_bytes(request.host_pool_bytes), cudaGetErrorString(s)));
  }

  const std::uint64_t pairs = std::uint64_t{request.batch_queries_max} * request.q_heads_max;
  pair_ms_capacity_ = std::uint64_t{request.batch_pages_max} * request.q_heads_max;
  table_bytes_max_ = round_up(gpu::packed_slot_bytes(request.batch_pages_max, request.batch_queries_max, request.batch_tasks_max), 256);
  q_bytes_max_ = round_up(pairs * request.head_dim_max * 4, 256);
  state_bytes_max_ = round_up(pairs * (2ull + request.head_dim_max) * 4, 256);
  const std::uint64_t mass_bytes_max = round_up(std::uint64_t{request.batch_pages_max} * 4, 256);
  void* p = nullptr;
  if (Status s = alloc_device(&table_device_, table_bytes_max_ + q_bytes_max_ + state_bytes_max_, "attention inputs", "batch limits"); !s.ok()) return s;
  if (Status s = alloc_device(&p, q_bytes_max_, "attention outputs", "batch limits"); !s.ok()) return s;
  out_ = static_cast<float*>(p);
  if (Status s = alloc_device(&p, pair_ms_capacity_ * 8, "page-mass partials", "batch limits"); !s.ok()) return s;
  pair_ms_ = static_cast<float*>(p);
  if (Status s = alloc_device(&p, pairs * 8, "page-mass totals", "batch limits"); !s.ok()) return s;
  final_ms_ = static_cast<float*>(p);
  if (Status s = alloc_device(&p, mass_bytes_max, "page mass", "batch limits"); !s.ok()) return s;
  mass_ = static_cast<float*>(p);
  // Inputs are one contiguous block so one copy uploads them: [table][q][state].
  q_ = reinterpret_cast<float*>(static_cast<std::byte*>(table_device_) + table_bytes_max_);
  state_ = reinterpret_cast<float*>(static_cast<std::byte*>(table_device_) + table_bytes_max_ + q_bytes_max_);

  // A staging slot: [table][q][state in] then [out][state out][mass] read back.
  staging_slot_bytes_ = table_bytes_max_ + q_bytes_max_ + state_bytes_max_ + q_bytes_max_ + state_bytes_max_ + mass_bytes_max;
  if (cudaError_t s = cudaHostAlloc(reinterpret_cast<void**>(&staging_), staging_slot_bytes_ * kStagingSlots, cudaHostAllocPortable);
      s != cudaSuccess) {
    cudaGetLastError();
    return make_error(ErrorCode::refused, "batch limits",
                      fmt::format("pinning {} of attention staging failed: {}; lower batch_queries_max or q_heads_max",
                                  format_bytes(staging_slot_bytes_ * kStagingSlots), cudaGetErrorString(s)));
  }
  for (cudaEvent_t& event : events_) {
    if (cudaError_t s = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); s != cudaSuccess) return cuda_error("cudaEventCreate", s);
  }
  for (cudaEvent_t& event : staging_done_) {
    if (cudaError_t s = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); s != cudaSuccess) return cuda_error("cudaEventCreate", s);
  }
  batch_dsts_.resize(request.copy_regions_max);
  batch_srcs_.resize(request.copy_regions_max);
  batch_sizes_.resize(request.copy_regions_max);
  if (cudaError_t s = cudaDeviceSynchronize(); s != cudaSuccess) return cuda_error("cudaDeviceSynchronize (warm-up)", s);
  return Status::success();
}

Status CudaBackend::prepare(QueueKind kind, std::span<const Fence> waits) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t s = cudaStreamIsCapturing(stream(kind), &capture); s != cudaSuccess) return cuda_error("cudaStreamIsCapturing", s);
  if (capture != cudaStreamCaptureStatusNone) {
    return make_error(ErrorCode::refused, "",
                      fmt::format("the {} stream is being captured into a graph; ActiveKV refuses capture on its own streams "
                                  "(captured work would not run when its fence is recorded)",
                                  queue_kind_name(kind)));
  }
  for (const Fence fence : waits) {
    AK_ASSERT(recorded_[fence.slot] != 0, "a current fence whose event was never recorded");
    if (cudaError_t s = cudaStreamWaitEvent(stream(kind), events_[fence.slot], 0); s != cudaSuccess) {
      return cuda_error("cudaStreamWaitEvent", s);
    }
  }
  return Status::success();
}

Result<Fence> CudaBackend::open_fence(QueueKind kind) {
  Fence fence = fences().open(kind);
  if (!fence.recorded() && reap() > 0) fence = fences().open(kind);
  if (!fence.recorded()) {
    return make_error(ErrorCode::exhausted, "fences_max",
                      fmt::format("all {} fence slots are held; release fences no longer needed or raise fences_max",
                                  fences().capacity()));
  }
  return fence;
}

Result<Fence> CudaBackend::finish(Fence fence, QueueKind kind) {
  if (cudaError_t s = cudaEventRecord(events_[fence.slot], stream(kind)); s != cudaSuccess) {
    return lose(fence, cuda_error("cudaEventRecord", s));
  }
  recorded_[fence.slot] = 1;
  generations_[fence.slot] = fence.generation;
  return fence;
}

Error CudaBackend::lose(Fence fence, Error error) {
  fences().release(fence);
  mark_lost();
  return error;
}

std::uint32_t CudaBackend::reap() {
  std::uint32_t resolved = 0;
  for (std::uint32_t slot = 0; slot < events_.size(); ++slot) {
    if (recorded_[slot] == 0) continue;
    const Fence fence{slot, generations_[slot]};
    if (fences().outcome(fence) != FenceOutcome::pending) continue;
    const cudaError_t s = cudaEventQuery(events_[slot]);
    if (s == cudaErrorNotReady) continue;
    if (s != cudaSuccess) {
      mark_lost();
      return resolved;
    }
    if (fences().resolve(fence, FenceOutcome::signalled)) ++resolved;
  }
  return resolved;
}

Result<Fence> CudaBackend::do_copy(CopyDirection direction, std::span<const CopyRegion> regions,
                                   std::span<const Fence> waits) {
  const QueueKind kind = queue_of(direction);
  if (Status s = prepare(kind, waits); !s.ok()) return s.error();
  Result<Fence> opened = open_fence(kind);
  if (!opened) return opened.error();
  auto* pool = static_cast<std::byte*>(pool_);
  auto* arena = static_cast<std::byte*>(arena_);
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const CopyRegion& r = regions[i];
    switch (direction) {
      case CopyDirection::h2d: batch_dsts_[i] = arena + r.dst_offset; batch_srcs_[i] = pool + r.src_offset; break;
      case CopyDirection::d2h: batch_dsts_[i] = pool + r.dst_offset; batch_srcs_[i] = arena + r.src_offset; break;
      case CopyDirection::d2d: batch_dsts_[i] = arena + r.dst_offset; batch_srcs_[i] = arena + r.src_offset; break;
    }
    batch_sizes_[i] = r.bytes;
  }
  cudaError_t status = cudaSuccess;
#if CUDART_VERSION >= 12080
  if (regions.size() > 1) {
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    std::size_t attribute_index = 0;
#if CUDART_VERSION >= 13000
    status = cudaMemcpyBatchAsync(batch_dsts_.data(), const_cast<void**>(batch_srcs_.data()), batch_sizes_.data(),
                                  regions.size(), &attributes, &attribute_index, 1, stream(kind));
#else
    std::size_t fail_index = 0;
    status = cudaMemcpyBatchAsync(batch_dsts_.data(), const_cast<void**>(batch_srcs_.data()), batch_sizes_.data(),
                                  regions.size(), &attributes, &attribute_index, 1, &fail_index, stream(kind));
#endif
  } else
#endif
  {
    for (std::size_t i = 0; i < regions.size() && status == cudaSuccess; ++i) {
      status = cudaMemcpyAsync(batch_dsts_[i], batch_srcs_[i], batch_sizes_[i], cudaMemcpyDefault, stream(kind));
    }
  }
  if (status != cudaSuccess) return lose(opened.value(), cuda_error("cudaMemcpyAsync / cudaMemcpyBatchAsync", status));
  return finish(opened.value(), kind);
}

Result<Fence> CudaBackend::do_upload(std::uint64_t arena_offset, std::span<const std::byte> bytes,
                                     std::span<const Fence> waits) {
  if (Status s = prepare(QueueKind::h2d, waits); !s.ok()) return s.error();
  Result<Fence> opened = open_fence(QueueKind::h2d);
  if (!opened) return opened.error();
  const cudaError_t s = cudaMemcpyAsync(static_cast<std::byte*>(arena_) + arena_offset, bytes.data(), bytes.size(),
                                        cudaMemcpyHostToDevice, stream(QueueKind::h2d));
  if (s != cudaSuccess) return lose(opened.value(), cuda_error("cudaMemcpyAsync(upload)", s));
  return finish(opened.value(), QueueKind::h2d);
}

Result<Fence> CudaBackend::do_download(std::uint64_t arena_offset, std::span<std::byte> bytes,
                                       std::span<const Fence> waits) {
  if (Status s = prepare(QueueKind::d2h, waits); !s.ok()) return s.error();
  Result<Fence> opened = open_fence(QueueKind::d2h);
  if (!opened) return opened.error();
  const cudaError_t s = cudaMemcpyAsync(bytes.data(), static_cast<std::byte*>(arena_) + arena_offset, bytes.size(),
                                        cudaMemcpyDeviceToHost, stream(QueueKind::d2h));
  if (s != cudaSuccess) return lose(opened.value(), cuda_error("cudaMemcpyAsync(download)", s));
  return finish(opened.value(), QueueKind::d2h);
}

Result<Fence> CudaBackend::do_attention(const AttentionBatch& batch, std::span<const Fence> waits) {
  if (!batch.page_mass.empty() && gpu::pair_page_count(batch) > pair_ms_capacity_) {
    return make_error(ErrorCode::exhausted, "page_mass",
                      fmt::format("page mass for {} (query, head, page) triples exceeds the scratch sized at warm-up ({}); "
                                  "ask for page mass on decode batches or split the batch",
                                  gpu::pair_page_count(batch), pair_ms_capacity_));
  }
  const std::uint32_t slot = staging_next_;
  if (staging_used_[slot]) {
    const cudaError_t s = cudaEventQuery(staging_done_[slot]);
    if (s == cudaErrorNotReady) {
      return make_error(ErrorCode::exhausted, "attention",
                        fmt::format("{} attention calls are already in flight; wait on an earlier attention fence first", kStagingSlots));
    }
    if (s != cudaSuccess) {
      mark_lost();
      return cuda_error("cudaEventQuery(staging)", s);
    }
  }
  if (Status s = prepare(QueueKind::compute, waits); !s.ok()) return s.error();
  Result<Fence> opened = open_fence(QueueKind::compute);
  if (!opened) return opened.error();
  const Fence fence = opened.value();
  staging_next_ = (staging_next_ + 1) % kStagingSlots;

  std::byte* base = staging_ + slot * staging_slot_bytes_;
  const gpu::PackedParams params = gpu::pack_attention(batch, {base, table_bytes_max_});
  const std::uint64_t queries = batch.query_positions.size();
  const std::uint64_t io_bytes = queries * batch.shape.q_heads * batch.shape.head_dim * 4;
  const std::uint64_t state_bytes = queries * batch.shape.q_heads * (2ull + batch.shape.head_dim) * 4;
  std::memcpy(base + table_bytes_max_, batch.queries.data(), io_bytes);
  if (batch.load_state) std::memcpy(base + table_bytes_max_ + q_bytes_max_, batch.state.data(), state_bytes);
  // Three uploads of exactly the bytes this call uses (the slot's regions are sized for the limits).
  const std::uint64_t table_bytes = gpu::packed_slot_bytes(params.pages, params.queries, params.tasks);
  cudaStream_t compute = stream(QueueKind::compute);
  cudaError_t s = cudaMemcpyAsync(table_device_, base, table_bytes, cudaMemcpyHostToDevice, compute);
  if (s == cudaSuccess) s = cudaMemcpyAsync(q_, base + table_bytes_max_, io_bytes, cudaMemcpyHostToDevice, compute);
  if (s == cudaSuccess && batch.load_state) {
    s = cudaMemcpyAsync(state_, base + table_bytes_max_ + q_bytes_max_, state_bytes, cudaMemcpyHostToDevice, compute);
  }
  if (s != cudaSuccess) return lose(fence, cuda_error("cudaMemcpyAsync(attention inputs)", s));

  const AttentionBuffers buffers{arena_, table_device_, q_, out_, state_, pair_ms_, final_ms_, mass_};
  s = static_cast<cudaError_t>(launch_attention(params, buffers, compute));
  if (s != cudaSuccess) return lose(fence, cuda_error("attention kernel launch", s));

  std::byte* back = base + table_bytes_max_ + q_bytes_max_ + state_bytes_max_;
  Readback& r = readbacks_[slot];
  r = Readback{};
  if (batch.write_output) {
    s = cudaMemcpyAsync(back, out_, io_bytes, cudaMemcpyDeviceToHost, compute);
    r.staged_out = back;
    r.out = batch.output.data();
    r.out_bytes = io_bytes;
  }
  if (s == cudaSuccess && batch.store_state) {
    s = cudaMemcpyAsync(back + q_bytes_max_, state_, state_bytes, cudaMemcpyDeviceToHost, compute);
    r.staged_state = back + q_bytes_max_;
    r.state = batch.state.data();
    r.state_bytes = state_bytes;
  }
  if (s == cudaSuccess && !batch.page_mass.empty()) {
    s = cudaMemcpyAsync(back + q_bytes_max_ + state_bytes_max_, mass_, batch.page_mass.size() * 4, cudaMemcpyDeviceToHost, compute);
    r.staged_mass = back + q_bytes_max_ + state_bytes_max_;
    r.mass = batch.page_mass.data();
    r.mass_bytes = batch.page_mass.size() * 4;
  }
  if (s == cudaSuccess) s = cudaLaunchHostFunc(compute, copy_back, &r);
  if (s == cudaSuccess) s = cudaEventRecord(staging_done_[slot], compute);
  if (s != cudaSuccess) return lose(fence, cuda_error("attention readback", s));
  staging_used_[slot] = true;
  return finish(fence, QueueKind::compute);
}

Result<Fence> CudaBackend::do_record(QueueKind kind) {
  if (Status s = prepare(kind, {}); !s.ok()) return s.error();
  Result<Fence> opened = open_fence(kind);
  if (!opened) return opened.error();
  return finish(opened.value(), kind);
}

Status CudaBackend::do_enqueue_wait(QueueKind kind, std::span<const Fence> waits) { return prepare(kind, waits); }

FenceOutcome CudaBackend::do_query(Fence fence) {
  if (recorded_[fence.slot] == 0) return FenceOutcome::unknown;  // never recorded: not complete
  const cudaError_t s = cudaEventQuery(events_[fence.slot]);
  if (s == cudaErrorNotReady) return FenceOutcome::pending;
  if (s != cudaSuccess) {
    mark_lost();  // sticky: no fence can be trusted
    return FenceOutcome::unknown;
  }
  fences().resolve(fence, FenceOutcome::signalled);
  return FenceOutcome::signalled;
}

Result<FenceOutcome> CudaBackend::do_wait_host(Fence fence, std::chrono::nanoseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + std::min(timeout, std::chrono::nanoseconds(std::chrono::hours(24)));
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    const FenceOutcome outcome = do_query(fence);
    if (is_resolved(outcome) || std::chrono::steady_clock::now() >= deadline) return outcome;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(50));
  }
}

Status CudaBackend::do_synchronize(QueueKind kind) {
  if (cudaError_t s = cudaStreamSynchronize(stream(kind)); s != cudaSuccess) {
    mark_lost();
    return cuda_error("cudaStreamSynchronize", s);
  }
  reap();
  return Status::success();
}

}  // namespace

int visible_devices() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

Status begin_capture_for_test(Backend& backend, QueueKind queue) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return make_error(ErrorCode::unsupported, "", "begin_capture_for_test needs the cuda backend");
  if (cudaError_t s = cudaStreamBeginCapture(cuda->stream(queue), cudaStreamCaptureModeRelaxed); s != cudaSuccess) {
    return cuda_error("cudaStreamBeginCapture", s);
  }
  return Status::success();
}

Status end_capture_for_test(Backend& backend, QueueKind queue) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return make_error(ErrorCode::unsupported, "", "end_capture_for_test needs the cuda backend");
  cudaGraph_t graph = nullptr;
  const cudaError_t s = cudaStreamEndCapture(cuda->stream(queue), &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (s != cudaSuccess) return cuda_error("cudaStreamEndCapture", s);
  return Status::success();
}

}  // namespace activekv::cuda

namespace activekv {

Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options) {
  const int count = cuda::visible_devices();
  if (count == 0) {
    return make_error(ErrorCode::unsupported, "--backend",
                      "no CUDA device is visible (cudaGetDeviceCount found none); choose --backend host or opencl");
  }
  if (options.device_index < 0 || options.device_index >= count) {
    return make_error(ErrorCode::invalid_argument, "--device",
                      fmt::format("CUDA device index {} is out of range; {} device(s) visible", options.device_index, count));
  }
  cudaDeviceProp properties{};
  if (cudaError_t s = cudaGetDeviceProperties(&properties, options.device_index); s != cudaSuccess) {
    return cuda::cuda_error("cudaGetDeviceProperties", s);
  }
  auto backend = std::make_unique<cuda::CudaBackend>(options, options.device_index, properties);
  if (Status s = backend->open(); !s.ok()) return s.error();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace activekv
