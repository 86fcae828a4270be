// backend.hpp — the one narrow interface between the core and a device.
//
// The core plans; a backend moves bytes and signals fences. Everything a plan
// hands a backend is plain data with offsets, never pointers into device memory:
//
//   arena       one device allocation, made once by allocate(); addressed by
//               byte offset (tiles, page pool, recurrent slots, headroom — the
//               core's layout; the backend does not interpret it)
//   host pool   one pinned host allocation, made once by allocate(); addressed
//               by byte offset (segments of histories); host-visible always
//
// Work goes onto queues (fence.hpp); every call that enqueues returns the Fence
// that covers it. A queue may be made to wait for a fence ON THE DEVICE
// (enqueue_wait, or the `waits` argument of every enqueueing call): the host
// never blocks to order device work. Draining the compute queue from the host
// (synchronize(QueueKind::compute)) is refused: it would serialise the step
// and hide the dependency the plan should state. Waiting on the host for one
// named fence (wait_host) is allowed: it consumes exactly that result.
//
// Contract every backend keeps (the conformance suite checks it):
//   - allocate() succeeds at most once; every region of every call is bounds
//     checked against the arena and the pool before anything is enqueued.
//   - copies are byte-exact; a batched copy is one fence for all its regions.
//   - the attention kernel is exact mode of DESIGN.md: per page, ascending
//     token order, fp32 partial (m, s, acc) with K/V widened to fp32 first,
//     partials merged in ascending page order, out = acc / s. A page's partial
//     never depends on where its bytes live, so outputs are bit-identical on one
//     backend for every layout of the same pages (invariant 8).
//   - after allocate() returns, no call allocates device memory or heap memory
//     on the success path (errors build a message and may allocate).
//
// The public functions are non-virtual: they validate (bounds, shapes, fence
// handles) here, once, and call the backend's do_* hooks with checked input.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "activekv/fence.hpp"
#include "activekv/geometry.hpp"
#include "activekv/parallel_chunks.hpp"
#include "activekv/result.hpp"

namespace activekv {

class FenceTable;

// What a backend can do, as data. Callers choose paths from these, never from
// the backend's name.
struct Capabilities {
  bool can_pin = false;              // the host pool is page-locked (DMA-able without a bounce)
  bool batched_copies = false;       // many regions in one API call (else a loop, still one fence)
  bool d2d = false;                  // arena-to-arena copies
  bool d2d_own_queue = false;        // d2d runs on its own engine (else it aliases compute)
  bool out_of_order = false;         // work on one queue may complete out of order: order by fences
  bool host_visible_arena = false;   // arena_host_view() returns the arena's bytes
  bool can_hold_queue = false;       // hold_queue()/release_queue() exist (held-DMA tests)
  bool deterministic = false;        // no threads: progress only by poll()/wait_host() (virtual clock)
  bool page_mass = true;             // the kernel can write per-page attention mass
  bool page_heads = false;           // the kernel honours AttentionBatch::page_heads (per-KV-head page lists)
  bool attention_window = false;     // the kernel honours AttentionBatch::window_tokens (sliding-window layers)
  bool kernel_reads_host_pool = false;  // the kernel reads pages in the host pool in place
                                        //   (AttentionPage::host_pool; docs/IN_PLACE.md)
  std::uint32_t compute_threads = 1; // CPU threads or device units the kernel spreads over
};

// Sizes fixed at warm-up. Every limit a step may reach is stated here, so no
// call after allocate() needs to grow a table.
struct MemoryRequest {
  std::uint64_t arena_bytes = 0;       // the whole device arena (core's layout)
  std::uint64_t host_pool_bytes = 0;   // the whole host pool (core's layout)
  bool pin_host_pool = true;           // refuse (no fallback) when the pool cannot be pinned
  // Attention limits for one batch (scratch for page tables, queries, partials).
  std::uint32_t batch_tasks_max = 256;     // contexts x layers in one attention call
  std::uint32_t batch_pages_max = 65536;   // page-table entries in one attention call
  std::uint32_t batch_queries_max = 1024;  // query rows in one attention call
  std::uint32_t q_heads_max = 64;
  std::uint32_t head_dim_max = 256;
  // Copy limits: regions in one batched copy call.
  std::uint32_t copy_regions_max = 4096;
};

enum class CopyDirection : std::uint8_t {
  h2d,  // src: host pool offset, dst: arena offset    (runs on QueueKind::h2d)
  d2h,  // src: arena offset,     dst: host pool offset (runs on QueueKind::d2h)
  d2d,  // src: arena offset,     dst: arena offset     (runs on QueueKind::d2d)
};
const char* copy_direction_name(CopyDirection direction) noexcept;
QueueKind queue_of(CopyDirection direction) noexcept;

struct CopyRegion {
  std::uint64_t src_offset = 0;
  std::uint64_t dst_offset = 0;
  std::uint64_t bytes = 0;
};

// The KV shape the kernel reads (layout contract: a row is K then V, each
// kv_heads x head_dim head-major, in dtype; row_bytes = 2 x kv_heads x head_dim x dtype_bytes).
struct AttentionShape {
  std::uint32_t q_heads = 0;   // a multiple of kv_heads; query head h reads kv head h / (q_heads / kv_heads)
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  DType dtype = DType::f16;
  float scale = 0.0f;          // usually 1 / sqrt(head_dim)

  std::uint64_t row_bytes() const noexcept { return 2ull * kv_heads * head_dim * dtype_bytes(dtype); }
};

// The rows of a page a query at `position` sees, [begin, end) relative to the page: causal
// (keys ≤ position) and, with a window W > 0, keys > position − W. Empty: begin == end.
struct VisibleRows {
  std::uint32_t begin = 0, end = 0;
  bool empty() const noexcept { return end <= begin; }
  std::uint32_t count() const noexcept { return end > begin ? end - begin : 0; }
};

// One page-table entry: `tokens` rows starting at arena byte `arena_offset`,
// holding tokens [first_token, first_token + tokens). A pool page or a page
// inside a staged tile: the kernel cannot tell and must not care.
// host_pool: the offset is a byte offset in the host pool instead, read in
// place (only where capabilities().kernel_reads_host_pool; the caller holds a
// read ticket on the range until the kernel's fence resolves).
struct AttentionPage {
  std::uint64_t arena_offset = 0;
  std::uint32_t first_token = 0;
  std::uint32_t tokens = 0;
  bool host_pool = false;
};

inline VisibleRows visible_rows(const AttentionPage& page, std::uint32_t position, std::uint32_t window_tokens) noexcept {
  if (position < page.first_token) return {};
  const std::uint64_t end = std::min<std::uint64_t>(page.tokens, std::uint64_t{position} - page.first_token + 1);
  std::uint64_t begin = 0;
  // The first key seen is position − W + 1 (when positive).
  if (window_tokens != 0 && std::uint64_t{position} + 1 > std::uint64_t{page.first_token} + window_tokens)
    begin = std::min<std::uint64_t>(end, std::uint64_t{position} + 1 - window_tokens - page.first_token);
  return {static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(end)};
}

// One context x dense layer: pages[page_begin, page_begin + page_count) in
// ascending logical order (first_token strictly increasing), and query rows
// [query_begin, query_begin + query_count).
struct AttentionTask {
  std::uint32_t page_begin = 0;
  std::uint32_t page_count = 0;
  std::uint32_t query_begin = 0;
  std::uint32_t query_count = 0;
};

// Carrying the running state between calls (attention in passes over tiles):
//   state [queries][q_heads][2 + head_dim] fp32: m, s, acc
// load_state: start each (query, head) from `state` instead of empty.
// store_state: write the merged running state back to `state`.
// write_output: write out = acc / s to `output`.
// Splitting a task's pages over several calls with load/store between them
// gives bit-identical results to one call over all pages.
struct AttentionBatch {
  AttentionShape shape;
  std::span<const AttentionTask> tasks;
  std::span<const AttentionPage> pages;          // [pages]
  std::span<const std::uint32_t> query_positions; // [queries]: causal, query at p sees keys <= p
  // Host memory, read/written by the device work: must stay valid and
  // untouched until the returned fence resolves.
  std::span<const float> queries;  // [queries][q_heads][head_dim]
  std::span<float> output;         // [queries][q_heads][head_dim]; empty iff !write_output
  std::span<float> page_mass;      // empty, or [pages]: per page, the share of softmax
                                   //   mass of all (query, head) pairs of its task
                                   //   (Σ over a task's pages = 1 when every query
                                   //   sees every page), from this call's pages only
  std::span<float> state;          // empty, or [queries][q_heads][2 + head_dim]
  // Per-KV-head page lists (sparse attention): empty = every head reads every page; else
  // [pages]: bit k set = the query heads of KV head k read the page (a head skips the others,
  // and its partials still merge in ascending page order). kv_heads <= 32, every mask non-zero
  // and within the kv heads. Only where capabilities().page_heads.
  std::span<const std::uint32_t> page_heads;
  // Sliding window (a window layer, e.g. Gemma 3's local layers): 0 = none; W > 0: the query at
  // p sees only keys k with p − W < k ≤ p (llama.cpp's standard SWA: masked iff p − k ≥ W).
  // Only where capabilities().attention_window.
  std::uint32_t window_tokens = 0;
  bool load_state = false;
  bool store_state = false;
  bool write_output = true;
};

// Counters a backend keeps for reports and tests. Monotonic.
struct BackendStats {
  std::uint64_t device_allocations = 0;  // must stay at its post-allocate() value
  std::uint64_t copies[3] = {0, 0, 0};        // calls, indexed by CopyDirection
  std::uint64_t copy_regions[3] = {0, 0, 0};
  std::uint64_t copy_bytes[3] = {0, 0, 0};
  std::uint64_t attention_calls = 0;
  std::uint64_t attention_pages = 0;
  std::uint64_t attention_kv_bytes = 0;  // K/V bytes the kernel read (with page_heads: each head's part)
  std::uint64_t fences_recorded = 0;
  std::uint64_t fences_failed = 0;
  std::uint64_t fences_unknown = 0;
  std::uint64_t stale_fence_uses = 0;    // queries / waits on never-recorded or recycled handles
  std::uint64_t device_losses = 0;
};

class Backend {
 public:
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string_view name() const noexcept = 0;
  virtual const Capabilities& capabilities() const noexcept = 0;
  // A line naming the device ("PoCL pthread CPU, 16 GiB", "host (emulated), deterministic seed 7").
  virtual std::string describe() const = 0;

  // ---- one-time allocation -------------------------------------------------
  // The arena (one device allocation) and the host pool (one pinned host
  // allocation). A second call is an error. Refusals name the setting
  // (--device-pool, --host-pool) and what to change; pinning that the OS
  // refuses is an error (RLIMIT_MEMLOCK named), never a silent fallback.
  Status allocate(const MemoryRequest& request);
  bool allocated() const noexcept { return allocated_; }
  const MemoryRequest& memory() const noexcept { return memory_; }
  std::uint64_t arena_bytes() const noexcept { return memory_.arena_bytes; }
  std::uint64_t host_pool_bytes() const noexcept { return memory_.host_pool_bytes; }
  // The host pool's bytes (host-visible on every backend).
  virtual std::span<std::byte> host_pool() noexcept = 0;
  // The arena's bytes where capabilities().host_visible_arena, else empty.
  virtual std::span<std::byte> arena_host_view() noexcept { return {}; }

  // ---- copies ----------------------------------------------------------------
  // One fence for all regions. Regions are read during the call only. Refused:
  // an empty batch, a region out of bounds, more than copy_regions_max regions,
  // d2d where !capabilities().d2d, a bad wait fence.
  Result<Fence> copy(CopyDirection direction, std::span<const CopyRegion> regions,
                     std::span<const Fence> waits = {});
  // h2d from caller memory (not the pool: e.g. freshly computed rows) and d2h
  // into caller memory (tests, reading results). The caller's bytes must stay
  // valid until the fence resolves.
  Result<Fence> upload(std::uint64_t arena_offset, std::span<const std::byte> bytes,
                       std::span<const Fence> waits = {});
  Result<Fence> download(std::uint64_t arena_offset, std::span<std::byte> bytes,
                         std::span<const Fence> waits = {});

  // ---- the paged attention kernel (compute queue) ---------------------------
  // Validates shapes, page tables (bounds, ascending, within the batch limits)
  // and spans; tasks/pages/positions are read during the call only.
  Result<Fence> attention(const AttentionBatch& batch, std::span<const Fence> waits = {});

  // Threads the caller lends the kernel (ParallelChunks; {} takes them back), from the thread that
  // will call attention(): a backend that computes on the host may run a kernel that call starts
  // at once on them instead of waking threads of its own. Answers whether it will use them. The
  // output is the same bits either way. None by default.
  virtual bool set_parallel(const ParallelChunks& parallel) {
    (void)parallel;
    return false;
  }

  // ---- fences ------------------------------------------------------------------
  // A marker: resolves when all work enqueued on `queue` before it resolved
  // (failed if any of it failed, unknown if any was unknown).
  Result<Fence> record(QueueKind queue);
  // Every later call on `queue` waits for `fences` on the device.
  Status enqueue_wait(QueueKind queue, std::span<const Fence> fences);
  // Never blocks. Never-recorded and stale handles answer unknown.
  FenceOutcome query(Fence fence);
  // Keep a fence's slot (and outcome) alive beyond the caller's own handle.
  // Every fence returned by a call holds one reference for the caller; drop it
  // with release_fence when the handle is no longer needed.
  Status retain_fence(Fence fence);
  void release_fence(Fence fence);
  // The queue a current fence was recorded on; false for stale / never recorded.
  bool fence_queue(Fence fence, QueueKind* queue) const;
  // Blocks the host until `fence` resolves or `timeout` passes (then pending).
  // Deterministic backends advance their virtual clock instead of sleeping and
  // return an error when no progress is possible (e.g. a held queue).
  Result<FenceOutcome> wait_host(Fence fence, std::chrono::nanoseconds timeout);
  // Drains a copy queue from the host. QueueKind::compute is refused.
  Status synchronize(QueueKind queue);
  // Makes progress where the backend needs the host to (deterministic mode);
  // returns how many fences resolved. A no-op elsewhere.
  virtual std::uint32_t poll() { return 0; }

  // ---- held queues (tests: hold a copy engine to prove leases are honoured)
  Status hold_queue(QueueKind queue);
  Status release_queue(QueueKind queue);

  // A snapshot (fence outcomes are counted by the fence table as they resolve).
  BackendStats stats() const;
  // True after a device loss: every call that enqueues is refused.
  bool lost() const noexcept { return lost_; }

 protected:
  explicit Backend(std::uint32_t fences_max);

  virtual Status do_allocate(const MemoryRequest& request) = 0;
  virtual Result<Fence> do_copy(CopyDirection direction, std::span<const CopyRegion> regions,
                                std::span<const Fence> waits) = 0;
  virtual Result<Fence> do_upload(std::uint64_t arena_offset, std::span<const std::byte> bytes,
                                  std::span<const Fence> waits) = 0;
  virtual Result<Fence> do_download(std::uint64_t arena_offset, std::span<std::byte> bytes,
                                    std::span<const Fence> waits) = 0;
  virtual Result<Fence> do_attention(const AttentionBatch& batch, std::span<const Fence> waits) = 0;
  virtual Result<Fence> do_record(QueueKind queue) = 0;
  virtual Status do_enqueue_wait(QueueKind queue, std::span<const Fence> fences) = 0;
  // Only called with a current fence that the table still shows pending: a
  // backend with native events checks them here and resolves the table entry.
  virtual FenceOutcome do_query(Fence fence) = 0;
  virtual Result<FenceOutcome> do_wait_host(Fence fence, std::chrono::nanoseconds timeout) = 0;
  virtual Status do_synchronize(QueueKind queue) = 0;
  virtual Status do_hold_queue(QueueKind queue, bool hold);
  // Called when a fence slot is recycled (no holder left, resolved): a backend
  // with native events releases the slot's event here.
  virtual void on_fence_recycled(std::uint32_t slot) { (void)slot; }

  // The fence table every backend shares (src/backends/fence_table.hpp):
  // slots, generations, outcomes, holds. Created by the constructor.
  FenceTable& fences() noexcept { return *fences_; }
  const FenceTable& fences() const noexcept { return *fences_; }
  // A backend error not attributable to one fence: every pending fence becomes
  // unknown, and every later enqueueing call is refused.
  void mark_lost() noexcept;

  // For backends: counted on the calling thread only, at enqueue.
  BackendStats stats_{};
  bool lost_ = false;

 private:
  std::unique_ptr<FenceTable> fences_;
  Status check_waits(std::span<const Fence> waits);
  Status check_enqueue() const;

  MemoryRequest memory_{};
  bool allocated_ = false;
};

// Options for make_backend. Unused fields are ignored by backends they do not concern.
struct FaultRates {
  double late_fence = 0.0;     // a completion delayed by late_ticks
  double failed_fence = 0.0;   // the work ran, its fence reports failed
  double unknown_fence = 0.0;  // its fence reports unknown
  double failed_copy = 0.0;    // a copy does not happen (or only partly) and its fence fails
  std::uint64_t late_ticks = 1000;
};

struct BackendOptions {
  std::uint32_t compute_threads = 1;   // host: kernel threads (the compute worker included)
  std::uint32_t fences_max = 4096;     // fence table slots
  std::uint32_t commands_max = 4096;   // in-flight commands per queue (host backend)
  std::int32_t device_index = 0;       // opencl/cuda: which device
  // host backend, deterministic mode: no threads, a virtual clock, seeded
  // completion order and faults.
  bool deterministic = false;
  std::uint64_t seed = 1;
  FaultRates faults{};
  bool reorder = true;                 // deterministic: completions may reorder (within the rules)
  // host: the kernel reads pages in the host pool in place (capabilities().kernel_reads_host_pool;
  // off: the host backend offers only what a discrete device does, staging).
  bool host_pool_reads = true;
};

// Names make_backend knows, whether built here or not.
std::span<const std::string_view> backend_names() noexcept;
// True when `name` is compiled into this build.
bool backend_built(std::string_view name) noexcept;
// "host", "opencl" or "cuda". An unknown name, a backend not built here, or a
// backend with no usable device is a clear error naming --backend.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options);

// Factories each backend folder defines (declared here so the registry needs
// no backend's headers). Present in the link only when that backend is built.
Result<std::unique_ptr<Backend>> make_host_backend(const BackendOptions& options);
Result<std::unique_ptr<Backend>> make_opencl_backend(const BackendOptions& options);
Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options);

}  // namespace activekv
