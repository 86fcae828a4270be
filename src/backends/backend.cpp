// backend.cpp — the checks every backend shares, done once, before any enqueue.
//
// A backend's do_* hooks receive only input that passed these checks: regions
// inside the arena and the pool, shapes that agree with their spans, page
// tables in ascending order, fences that were recorded and are current. So a
// plan's bug is a clear Error here rather than a stray DMA on a device.
// Nothing here allocates on the success path.
#include "activekv/backend.hpp"

#include <bit>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "backends/fence_table.hpp"

namespace activekv {

const char* queue_kind_name(QueueKind queue) noexcept {
  switch (queue) {
    case QueueKind::compute: return "compute";
    case QueueKind::h2d: return "h2d";
    case QueueKind::d2h: return "d2h";
    case QueueKind::d2d: return "d2d";
  }
  return "?";
}

const char* fence_outcome_name(FenceOutcome outcome) noexcept {
  switch (outcome) {
    case FenceOutcome::pending: return "pending";
    case FenceOutcome::signalled: return "signalled";
    case FenceOutcome::failed: return "failed";
    case FenceOutcome::unknown: return "unknown";
  }
  return "?";
}

const char* copy_direction_name(CopyDirection direction) noexcept {
  switch (direction) {
    case CopyDirection::h2d: return "h2d";
    case CopyDirection::d2h: return "d2h";
    case CopyDirection::d2d: return "d2d";
  }
  return "?";
}

QueueKind queue_of(CopyDirection direction) noexcept {
  switch (direction) {
    case CopyDirection::h2d: return QueueKind::h2d;
    case CopyDirection::d2h: return QueueKind::d2h;
    case CopyDirection::d2d: return QueueKind::d2d;
  }
  return QueueKind::compute;
}

namespace {

// [offset, offset + bytes) inside [0, limit), without overflow.
bool inside(std::uint64_t offset, std::uint64_t bytes, std::uint64_t limit) noexcept {
  return offset <= limit && bytes <= limit - offset;
}

Error invalid(std::string message) { return make_error(ErrorCode::invalid_argument, "", std::move(message)); }

}  // namespace

Backend::Backend(std::uint32_t fences_max) : fences_(std::make_unique<FenceTable>(fences_max)) {
  fences_->set_recycle_hook(
      [](void* self, std::uint32_t slot) { static_cast<Backend*>(self)->on_fence_recycled(slot); }, this);
}

Backend::~Backend() = default;

Status Backend::allocate(const MemoryRequest& request) {
  if (allocated_) {
    return make_error(ErrorCode::refused, "", "the arena and host pool are allocated once, at warm-up; allocate() was called again");
  }
  if (request.arena_bytes == 0) {
    return make_error(ErrorCode::refused, "--device-pool", "the device arena must have an explicit, non-zero size");
  }
  if (request.host_pool_bytes == 0) {
    return make_error(ErrorCode::refused, "--host-pool", "the host pool must have an explicit, non-zero size");
  }
  if (request.batch_tasks_max == 0 || request.batch_pages_max == 0 || request.batch_queries_max == 0 ||
      request.q_heads_max == 0 || request.head_dim_max == 0 || request.copy_regions_max == 0) {
    return invalid("every batch limit of the memory request must be at least 1");
  }
  Status status = do_allocate(request);
  if (!status.ok()) return status;
  memory_ = request;
  allocated_ = true;
  return Status::success();
}

Status Backend::check_enqueue() const {
  if (lost_) return make_error(ErrorCode::backend, "", fmt::format("the {} device was lost; nothing more can be enqueued", name()));
  if (!allocated_) return make_error(ErrorCode::refused, "", "enqueue before allocate(): allocate the arena and the host pool at warm-up first");
  return Status::success();
}

Status Backend::check_waits(std::span<const Fence> waits) {
  for (const Fence fence : waits) {
    if (!fence.recorded()) {
      ++stats_.stale_fence_uses;
      return invalid("a wait on a fence that was never recorded: it will never complete");
    }
    if (!fences_->current(fence)) {
      ++stats_.stale_fence_uses;
      return invalid(fmt::format("a wait on a stale fence (slot {}, generation {}): it was released and recycled",
                                 fence.slot, fence.generation));
    }
  }
  return Status::success();
}

Result<Fence> Backend::copy(CopyDirection direction, std::span<const CopyRegion> regions, std::span<const Fence> waits) {
  if (Status s = check_enqueue(); !s.ok()) return s.error();
  if (Status s = check_waits(waits); !s.ok()) return s.error();
  if (regions.empty()) return invalid(fmt::format("an empty {} copy batch", copy_direction_name(direction)));
  if (regions.size() > memory_.copy_regions_max) {
    return make_error(ErrorCode::exhausted, "copy_regions_max",
                      fmt::format("{} regions in one copy; the limit set at warm-up is {}", regions.size(),
                                  memory_.copy_regions_max));
  }
  if (direction == CopyDirection::d2d && !capabilities().d2d) {
    return make_error(ErrorCode::unsupported, "", fmt::format("the {} backend has no device-to-device copies", name()));
  }
  const std::uint64_t src_limit = direction == CopyDirection::h2d ? memory_.host_pool_bytes : memory_.arena_bytes;
  const std::uint64_t dst_limit = direction == CopyDirection::d2h ? memory_.host_pool_bytes : memory_.arena_bytes;
  std::uint64_t bytes_total = 0;
  for (const CopyRegion& region : regions) {
    if (region.bytes == 0) return invalid("a copy region of 0 bytes");
    if (!inside(region.src_offset, region.bytes, src_limit) || !inside(region.dst_offset, region.bytes, dst_limit)) {
      return invalid(fmt::format("{} copy region [src {}, dst {}, {} bytes] lies outside the {} ({} bytes) or the {} ({} bytes)",
                                 copy_direction_name(direction), region.src_offset, region.dst_offset, region.bytes,
                                 direction == CopyDirection::h2d ? "host pool" : "arena", src_limit,
                                 direction == CopyDirection::d2h ? "host pool" : "arena", dst_limit));
    }
    bytes_total += region.bytes;
  }
  Result<Fence> fence = do_copy(direction, regions, waits);
  if (fence.ok()) {
    const auto d = static_cast<std::size_t>(direction);
    ++stats_.copies[d];
    stats_.copy_regions[d] += regions.size();
    stats_.copy_bytes[d] += bytes_total;
    ++stats_.fences_recorded;
  }
  return fence;
}

Result<Fence> Backend::upload(std::uint64_t arena_offset, std::span<const std::byte> bytes, std::span<const Fence> waits) {
  if (Status s = check_enqueue(); !s.ok()) return s.error();
  if (Status s = check_waits(waits); !s.ok()) return s.error();
  if (bytes.empty()) return invalid("an upload of 0 bytes");
  if (!inside(arena_offset, bytes.size(), memory_.arena_bytes)) {
    return invalid(fmt::format("upload [{}, +{}) lies outside the arena ({} bytes)", arena_offset, bytes.size(), memory_.arena_bytes));
  }
  Result<Fence> fence = do_upload(arena_offset, bytes, waits);
  if (fence.ok()) {
    ++stats_.copies[0];
    ++stats_.copy_regions[0];
    stats_.copy_bytes[0] += bytes.size();
    ++stats_.fences_recorded;
  }
  return fence;
}

Result<Fence> Backend::download(std::uint64_t arena_offset, std::span<std::byte> bytes, std::span<const Fence> waits) {
  if (Status s = check_enqueue(); !s.ok()) return s.error();
  if (Status s = check_waits(waits); !s.ok()) return s.error();
  if (bytes.empty()) return invalid("a download of 0 bytes");
  if (!inside(arena_offset, bytes.size(), memory_.arena_bytes)) {
    return invalid(fmt::format("download [{}, +{}) lies outside the arena ({} bytes)", arena_offset, bytes.size(), memory_.arena_bytes));
  }
  Result<Fence> fence = do_download(arena_offset, bytes, waits);
  if (fence.ok()) {
    ++stats_.copies[1];
    ++stats_.copy_regions[1];
    stats_.copy_bytes[1] += bytes.size();
    ++stats_.fences_recorded;
  }
  return fence;
}

namespace {

Status check_shape(const AttentionShape& shape, const MemoryRequest& memory) {
  if (shape.kv_heads == 0 || shape.head_dim == 0 || shape.q_heads == 0) {
    return invalid("attention shape: q_heads, kv_heads and head_dim must be at least 1");
  }
  if (shape.q_heads % shape.kv_heads != 0) {
    return invalid(fmt::format("attention shape: q_heads ({}) must be a multiple of kv_heads ({})", shape.q_heads, shape.kv_heads));
  }
  if (shape.q_heads > memory.q_heads_max || shape.head_dim > memory.head_dim_max) {
    return make_error(ErrorCode::exhausted, "q_heads_max/head_dim_max",
                      fmt::format("attention shape {} q heads x {} dims exceeds the warm-up limits {} x {}",
                                  shape.q_heads, shape.head_dim, memory.q_heads_max, memory.head_dim_max));
  }
  if (!(shape.scale > 0.0f) || !std::isfinite(shape.scale)) return invalid("attention scale must be positive and finite");
  return Status::success();
}

Status check_spans(const AttentionBatch& batch, const MemoryRequest& memory) {
  const std::uint64_t queries = batch.query_positions.size();
  const std::uint64_t head_elements = std::uint64_t{batch.shape.q_heads} * batch.shape.head_dim;
  if (batch.tasks.empty()) return invalid("an attention batch without tasks");
  if (batch.tasks.size() > memory.batch_tasks_max || batch.pages.size() > memory.batch_pages_max ||
      queries > memory.batch_queries_max) {
    return make_error(ErrorCode::exhausted, "batch_tasks_max/batch_pages_max/batch_queries_max",
                      fmt::format("attention batch of {} tasks, {} pages, {} queries exceeds the warm-up limits {}, {}, {}",
                                  batch.tasks.size(), batch.pages.size(), queries, memory.batch_tasks_max,
                                  memory.batch_pages_max, memory.batch_queries_max));
  }
  if (batch.queries.size() != queries * head_elements) {
    return invalid(fmt::format("attention queries hold {} floats; {} positions x {} heads x {} dims need {}",
                               batch.queries.size(), queries, batch.shape.q_heads, batch.shape.head_dim, queries * head_elements));
  }
  if (batch.write_output ? batch.output.size() != queries * head_elements : !batch.output.empty()) {
    return invalid("attention output must hold queries x q_heads x head_dim floats exactly when write_output is set");
  }
  if (!batch.page_mass.empty() && batch.page_mass.size() != batch.pages.size()) {
    return invalid("attention page_mass must be empty or hold one float per page");
  }
  const bool wants_state = batch.load_state || batch.store_state;
  if (wants_state != !batch.state.empty() ||
      (wants_state && batch.state.size() != queries * batch.shape.q_heads * (2ull + batch.shape.head_dim))) {
    return invalid("attention state must hold queries x q_heads x (2 + head_dim) floats exactly when load_state or store_state is set");
  }
  if (!batch.write_output && !batch.store_state) return invalid("an attention batch that writes neither output nor state");
  if (!batch.page_heads.empty()) {
    if (batch.page_heads.size() != batch.pages.size()) {
      return invalid("attention page_heads must be empty or hold one mask per page");
    }
    if (batch.shape.kv_heads > 32) return invalid("attention page_heads needs kv_heads <= 32 (one bit per KV head)");
    const std::uint32_t all = batch.shape.kv_heads == 32 ? UINT32_MAX : (1u << batch.shape.kv_heads) - 1u;
    for (std::size_t i = 0; i < batch.page_heads.size(); ++i) {
      if (batch.page_heads[i] == 0 || (batch.page_heads[i] & ~all) != 0) {
        return invalid(fmt::format("attention page_heads[{}] = {:#x}: a mask must name at least one of the {} KV heads and no other",
                                   i, batch.page_heads[i], batch.shape.kv_heads));
      }
    }
  }
  return Status::success();
}

Status check_tasks(const AttentionBatch& batch, std::uint64_t arena_bytes, std::uint64_t host_pool_bytes,
                   bool reads_host_pool) {
  const std::uint64_t row_bytes = batch.shape.row_bytes();
  std::uint64_t query_end_previous = 0;
  for (std::size_t t = 0; t < batch.tasks.size(); ++t) {
    const AttentionTask& task = batch.tasks[t];
    if (!inside(task.page_begin, task.page_count, batch.pages.size())) {
      return invalid(fmt::format("attention task {}: pages [{}, +{}) outside the batch's {} pages", t, task.page_begin,
                                 task.page_count, batch.pages.size()));
    }
    if (!inside(task.query_begin, task.query_count, batch.query_positions.size()) || task.query_count == 0) {
      return invalid(fmt::format("attention task {}: queries [{}, +{}) empty or outside the batch's {} queries", t,
                                 task.query_begin, task.query_count, batch.query_positions.size()));
    }
    if (task.query_begin < query_end_previous) {
      return invalid(fmt::format("attention task {}: query rows overlap an earlier task's; tasks must own ascending, disjoint rows", t));
    }
    query_end_previous = std::uint64_t{task.query_begin} + task.query_count;
    std::uint64_t token_end_previous = 0;
    for (std::uint32_t i = 0; i < task.page_count; ++i) {
      const AttentionPage& page = batch.pages[task.page_begin + i];
      if (page.tokens == 0) return invalid(fmt::format("attention task {}: page {} holds no tokens", t, i));
      if (i > 0 && page.first_token < token_end_previous) {
        return invalid(fmt::format("attention task {}: page {} (first token {}) is not after the previous page (ends at {}); "
                                   "pages must be in ascending token order",
                                   t, i, page.first_token, token_end_previous));
      }
      token_end_previous = std::uint64_t{page.first_token} + page.tokens;
      if (page.host_pool) {
        if (!reads_host_pool) {
          return invalid(fmt::format("attention task {}: page {} is in the host pool, and this backend's kernel cannot "
                                     "read the host pool in place (capabilities().kernel_reads_host_pool): stage it",
                                     t, i));
        }
        if (!inside(page.arena_offset, std::uint64_t{page.tokens} * row_bytes, host_pool_bytes)) {
          return invalid(fmt::format("attention task {}: page {} at host pool offset {} ({} rows of {} bytes) lies "
                                     "outside the host pool ({} bytes)",
                                     t, i, page.arena_offset, page.tokens, row_bytes, host_pool_bytes));
        }
      } else if (!inside(page.arena_offset, std::uint64_t{page.tokens} * row_bytes, arena_bytes)) {
        return invalid(fmt::format("attention task {}: page {} at arena offset {} ({} rows of {} bytes) lies outside the arena ({} bytes)",
                                   t, i, page.arena_offset, page.tokens, row_bytes, arena_bytes));
      }
    }
  }
  return Status::success();
}

}  // namespace

Result<Fence> Backend::attention(const AttentionBatch& batch, std::span<const Fence> waits) {
  if (Status s = check_enqueue(); !s.ok()) return s.error();
  if (Status s = check_waits(waits); !s.ok()) return s.error();
  if (Status s = check_shape(batch.shape, memory_); !s.ok()) return s.error();
  if (Status s = check_spans(batch, memory_); !s.ok()) return s.error();
  if (Status s = check_tasks(batch, memory_.arena_bytes, memory_.host_pool_bytes, capabilities().kernel_reads_host_pool); !s.ok()) return s.error();
  if (!batch.page_mass.empty() && !capabilities().page_mass) {
    return make_error(ErrorCode::unsupported, "", fmt::format("the {} backend does not compute per-page attention mass", name()));
  }
  if (!batch.page_heads.empty() && !capabilities().page_heads) {
    return make_error(ErrorCode::unsupported, "",
                      fmt::format("the {} backend does not read per-KV-head page lists (page_heads)", name()));
  }
  if (batch.window_tokens != 0 && !capabilities().attention_window) {
    return make_error(ErrorCode::unsupported, "",
                      fmt::format("the {} backend's attention kernel has no sliding window (window_tokens)", name()));
  }
  Result<Fence> fence = do_attention(batch, waits);
  if (fence.ok()) {
    ++stats_.attention_calls;
    std::uint64_t rows = 0;  // with page_heads: rows × KV heads that read them
    for (const AttentionTask& task : batch.tasks) {
      stats_.attention_pages += task.page_count;
      for (std::uint32_t i = 0; i < task.page_count; ++i) {
        const std::uint32_t p = task.page_begin + i;
        const std::uint64_t heads = batch.page_heads.empty() ? batch.shape.kv_heads
                                                             : static_cast<std::uint64_t>(std::popcount(batch.page_heads[p]));
        rows += batch.pages[p].tokens * heads;
      }
    }
    stats_.attention_kv_bytes += rows * batch.shape.row_bytes() / batch.shape.kv_heads;
    ++stats_.fences_recorded;
  }
  return fence;
}

Result<Fence> Backend::record(QueueKind queue) {
  if (Status s = check_enqueue(); !s.ok()) return s.error();
  Result<Fence> fence = do_record(queue);
  if (fence.ok()) ++stats_.fences_recorded;
  return fence;
}

Status Backend::enqueue_wait(QueueKind queue, std::span<const Fence> fences) {
  if (Status s = check_enqueue(); !s.ok()) return s;
  if (Status s = check_waits(fences); !s.ok()) return s;
  if (fences.empty()) return Status::success();
  return do_enqueue_wait(queue, fences);
}

FenceOutcome Backend::query(Fence fence) {
  const FenceOutcome outcome = fences_->outcome(fence);
  if (!fences_->current(fence)) {
    ++stats_.stale_fence_uses;
    return FenceOutcome::unknown;
  }
  if (is_resolved(outcome)) return outcome;
  return do_query(fence);
}

Status Backend::retain_fence(Fence fence) {
  if (!fences_->retain(fence)) {
    ++stats_.stale_fence_uses;
    return invalid("retain of a never-recorded or stale fence");
  }
  return Status::success();
}

void Backend::release_fence(Fence fence) { fences_->release(fence); }

bool Backend::fence_queue(Fence fence, QueueKind* queue) const {
  return fences_->queue_if_current(fence, queue);
}

Result<FenceOutcome> Backend::wait_host(Fence fence, std::chrono::nanoseconds timeout) {
  if (!fences_->current(fence)) {
    ++stats_.stale_fence_uses;
    return invalid("wait_host on a never-recorded or stale fence: it will never complete");
  }
  const FenceOutcome outcome = fences_->outcome(fence);
  if (is_resolved(outcome)) return outcome;
  return do_wait_host(fence, timeout);
}

Status Backend::synchronize(QueueKind queue) {
  if (queue == QueueKind::compute) {
    return make_error(ErrorCode::refused, "",
                      "synchronising the compute queue from the host is refused: make the consumer wait on the "
                      "attention fence (enqueue_wait) or wait_host on that one fence");
  }
  if (Status s = check_enqueue(); !s.ok()) return s;
  return do_synchronize(queue);
}

Status Backend::hold_queue(QueueKind queue) {
  if (!capabilities().can_hold_queue) {
    return make_error(ErrorCode::unsupported, "", fmt::format("the {} backend cannot hold a queue", name()));
  }
  return do_hold_queue(queue, true);
}

Status Backend::release_queue(QueueKind queue) {
  if (!capabilities().can_hold_queue) {
    return make_error(ErrorCode::unsupported, "", fmt::format("the {} backend cannot hold a queue", name()));
  }
  return do_hold_queue(queue, false);
}

Status Backend::do_hold_queue(QueueKind queue, bool hold) {
  (void)queue;
  (void)hold;
  return make_error(ErrorCode::unsupported, "", "holding a queue is not implemented by this backend");
}

void Backend::mark_lost() noexcept {
  lost_ = true;
  ++stats_.device_losses;
  fences_->resolve_all_pending_unknown();
}

BackendStats Backend::stats() const {
  BackendStats snapshot = stats_;
  snapshot.fences_failed = fences_->failed_total();
  snapshot.fences_unknown = fences_->unknown_total();
  return snapshot;
}

}  // namespace activekv
