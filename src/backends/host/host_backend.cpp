// host_backend.cpp — queues of commands, run by worker threads or by a virtual clock.
//
// Locking: one mutex (mutex_) guards every queue's ring positions and the
// command records; the fence table has its own mutex and is always taken
// after mutex_, never before. A threaded worker copies its command out under
// mutex_, runs it unlocked (payload arrays stay put until the command
// retires), then marks it done and retires finished commands from the head.
// Running a queue's commands (execute, retire, the worker loop, waits and
// holds) is in host_backend_queue.cpp, the virtual clock in
// host_backend_clock.cpp, the seeded draws and faults in host_backend_faults.cpp.
#include "backends/host/host_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include <fmt/format.h>

#include "activekv/huge_pages.hpp"
#include "backends/fence_table.hpp"

namespace activekv::host {

namespace {

constexpr std::uint32_t attention_jobs_in_flight = 4;     // attention calls enqueued and not retired
constexpr std::uint64_t run_here_copy_bytes = 256 << 10;  // uploads/downloads an idle queue's caller runs itself
constexpr std::uint32_t region_ring_batches = 4;          // region ring = this many maximal batches
constexpr std::size_t memory_alignment = 4096;            // the arena's and an unpinned pool's first byte

// Zeroed bytes on a memory_alignment boundary; a buffer of a huge page or more on a huge page
// boundary, advised to be 2 MiB pages before it is zeroed (activekv/huge_pages.hpp: the kernel's
// sparse reads are scattered). A refusal throws std::bad_alloc, as new[] did: the command's
// top-level handler names what was being allocated (cli/command.hpp, AllocationScope).
std::byte* allocate_aligned(std::uint64_t bytes) {
  const bool huge = huge_pages_enabled() && bytes >= huge_page_least;
  const std::uint64_t alignment = huge ? huge_page_bytes : memory_alignment;
  const std::uint64_t rounded = (std::max<std::uint64_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  if (rounded > std::numeric_limits<std::size_t>::max()) throw std::bad_alloc();
  void* memory = std::aligned_alloc(static_cast<std::size_t>(alignment), static_cast<std::size_t>(rounded));
  if (memory == nullptr) throw std::bad_alloc();
  if (huge) advise_huge_pages(memory, rounded);
  std::memset(memory, 0, static_cast<std::size_t>(rounded));
  return static_cast<std::byte*>(memory);
}

}  // namespace

void HostBackend::AlignedFree::operator()(std::byte* bytes) const noexcept { std::free(bytes); }

// Helper threads that join the compute worker in running one kernel.
struct HostBackend::ComputePool {
  std::mutex mutex;
  std::condition_variable start;
  std::condition_variable finished;
  std::uint64_t generation = 0;
  std::uint32_t remaining = 0;
  bool stop = false;
  void (*work)(void*, std::uint32_t) = nullptr;
  void* context = nullptr;
  std::vector<std::thread> threads;

  explicit ComputePool(std::uint32_t helpers) {
    threads.reserve(helpers);
    for (std::uint32_t i = 0; i < helpers; ++i) threads.emplace_back([this, i] { loop(i + 1); });
  }
  ~ComputePool() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    start.notify_all();
    for (std::thread& t : threads) t.join();
  }
  void loop(std::uint32_t index) {
    std::uint64_t seen = 0;
    for (;;) {
      void (*job)(void*, std::uint32_t);
      void* job_context;
      {
        std::unique_lock lock(mutex);
        start.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        job = work;
        job_context = context;
      }
      job(job_context, index);
      {
        std::lock_guard lock(mutex);
        if (--remaining == 0) finished.notify_all();
      }
    }
  }
  // Runs work(0) here and work(1..helpers) on the helpers; returns when all are done.
  void run(void (*job)(void*, std::uint32_t), void* job_context) {
    {
      std::lock_guard lock(mutex);
      work = job;
      context = job_context;
      remaining = static_cast<std::uint32_t>(threads.size());
      ++generation;
    }
    start.notify_all();
    job(job_context, 0);
    std::unique_lock lock(mutex);
    finished.wait(lock, [&] { return remaining == 0; });
  }
};

HostBackend::HostBackend(const BackendOptions& options)
    : Backend(options.fences_max), options_(options), rng_(options.seed), resolved_at_(options.fences_max, 0) {
  capabilities_.can_pin = true;
  capabilities_.batched_copies = true;
  capabilities_.d2d = true;
  capabilities_.d2d_own_queue = true;
  capabilities_.out_of_order = options.deterministic && options.reorder;
  capabilities_.host_visible_arena = true;
  capabilities_.can_hold_queue = true;
  capabilities_.deterministic = options.deterministic;
  capabilities_.page_mass = true;
  capabilities_.page_heads = true;
  capabilities_.attention_window = true;
  // Its "device" memory is host memory: the kernel can read the host pool in place (docs/IN_PLACE.md).
  capabilities_.kernel_reads_host_pool = options.host_pool_reads;
  capabilities_.compute_threads = options.deterministic ? 1 : options.compute_threads;
  const char* tiles = std::getenv("ACTIVEKV_HOST_TILES");
  balance_tiles_ = tiles == nullptr || std::strcmp(tiles, "fixed") != 0;
  for (std::size_t i = 0; i < queue_kind_count; ++i) queues_[i].kind = static_cast<QueueKind>(i);
}

HostBackend::~HostBackend() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  fences().resolve_all_pending_unknown();  // wakes workers blocked in a wait command
  for (Queue& q : queues_) q.work.notify_all();
  for (Queue& q : queues_) {
    if (q.worker.joinable()) q.worker.join();
  }
  pool_.reset();
}

std::string HostBackend::describe() const {
  if (options_.deterministic) {
    return fmt::format("host (emulated device), deterministic: seed {}, {} completions, virtual clock", options_.seed,
                       options_.reorder ? "reordered" : "in-order");
  }
  return fmt::format("host (emulated device), {} compute thread{}, one worker per copy queue, {} kernel",
                     capabilities_.compute_threads, capabilities_.compute_threads == 1 ? "" : "s",
                     attention_cpu_uses_avx2() ? "AVX2/F16C" : "portable");
}

std::span<std::byte> HostBackend::host_pool() noexcept { return pool_view_; }

std::span<std::byte> HostBackend::arena_host_view() noexcept {
  if (!arena_) return {};
  return {arena_.get(), memory().arena_bytes};
}

Status HostBackend::do_allocate(const MemoryRequest& request) {
  if (request.pin_host_pool) {
    Result<PinnedRegion> region = PinnedRegion::map(request.host_pool_bytes, "--host-pool");
    if (!region.ok()) return region.error();
    pinned_pool_ = std::move(region).value();
    pool_view_ = {pinned_pool_.data(), request.host_pool_bytes};
  } else {
    plain_pool_.reset(allocate_aligned(request.host_pool_bytes));
    pool_view_ = {plain_pool_.get(), request.host_pool_bytes};
  }
  // Aligned as a device allocation is: a page-aligned pool copying into an arena 16 bytes off a
  // page boundary (what new[] returns for a large block) made each scattered staging copy of a
  // few KiB take glibc's rep-movsb path at a fraction of its speed (docs/SPARSE.md "Staging").
  arena_.reset(allocate_aligned(request.arena_bytes));
  stats_.device_allocations = 1;

  for (Queue& q : queues_) {
    q.ring.resize(options_.commands_max);
    const bool copies = q.kind != QueueKind::compute;
    q.regions.resize(copies ? std::size_t{request.copy_regions_max} * region_ring_batches : 0);
  }
  jobs_.resize(attention_jobs_in_flight);
  for (AttentionJob& job : jobs_) job.reserve(request);
  free_jobs_.reserve(attention_jobs_in_flight);
  for (std::uint32_t i = attention_jobs_in_flight; i > 0; --i) free_jobs_.push_back(i - 1);
  scratch_.resize(capabilities_.compute_threads);
  for (AttentionScratch& s : scratch_) s.reserve(request);
  // Page partials of split decode queries: up to 32 MiB (13,000 pages of the smollm2 shape).
  if (capabilities_.compute_threads > 1) split_.reserve(request, capabilities_.compute_threads - 1, 32ull << 20);

  if (!options_.deterministic) {
    if (capabilities_.compute_threads > 1) pool_ = std::make_unique<ComputePool>(capabilities_.compute_threads - 1);
    for (Queue& q : queues_) q.worker = std::thread([this, &q] { worker_loop(q); });
  }
  return Status::success();
}

// ---- enqueueing ------------------------------------------------------------------

Status HostBackend::check_room(Queue& q, std::uint32_t commands, std::uint32_t regions) const {
  const std::uint64_t capacity = q.ring.size();
  if (q.tail - q.head + commands > capacity) {
    return make_error(ErrorCode::exhausted, "commands_max",
                      fmt::format("the {} queue holds {} commands in flight (limit {}); let earlier work complete "
                                  "or raise commands_max",
                                  queue_kind_name(q.kind), q.tail - q.head, capacity));
  }
  if (regions > 0) {
    const std::uint64_t ring = q.regions.size();
    std::uint64_t position = q.region_tail;
    if (position % ring + regions > ring) position += ring - position % ring;
    if (position + regions - q.region_head > ring) {
      return make_error(ErrorCode::exhausted, "copy_regions_max",
                        fmt::format("the {} queue's copy regions in flight exceed {} x copy_regions_max; let earlier "
                                    "copies complete",
                                    queue_kind_name(q.kind), region_ring_batches));
    }
  }
  return Status::success();
}

HostBackend::Command& HostBackend::push(Queue& q, Kind kind) {
  AK_ASSERT(q.tail - q.head < q.ring.size(), "push without room (check_room first)");
  Command& command = q.ring[q.tail % q.ring.size()];
  command = Command{};
  command.kind = kind;
  command.seq = seq_++;
  command.enqueued_at = now_;
  command.region_end = q.region_tail;
  if (kind != Kind::wait) {
    command.poisoned = q.poison;
    q.poison = FenceOutcome::signalled;
  }
  ++q.tail;
  return command;
}

Status HostBackend::push_waits(Queue& q, std::span<const Fence> waits) {
  for (const Fence fence : waits) {
    if (!fences().retain(fence)) {
      return make_error(ErrorCode::invalid_argument, "", "a wait on a fence that was released meanwhile");
    }
    Command& command = push(q, Kind::wait);
    command.awaited = fence;
  }
  return Status::success();
}

Fence HostBackend::open_fence(Queue& q, Command& command) {
  command.fence = fences().open(q.kind);
  return command.fence;
}

void HostBackend::publish(Queue& q) {
  if (!options_.deterministic) q.work.notify_one();
}

// Threaded mode: a queue with nothing queued, not held, no failure to pass on,
// and every awaited fence already signalled would start the next command at
// once; its caller may as well run it. Under mutex_.
bool HostBackend::can_run_here(const Queue& q, std::span<const Fence> waits) const {
  if (options_.deterministic || q.held || q.head != q.tail || q.poison != FenceOutcome::signalled || lost_) return false;
  for (const Fence fence : waits)
    if (fences().outcome(fence) != FenceOutcome::signalled) return false;
  return true;
}

// Runs the command just pushed on an idle queue (can_run_here) on this thread:
// taken as the worker would take it, executed outside the lock, its fence
// resolved, retired. The worker never sees it, so no thread is woken.
Fence HostBackend::run_here(std::unique_lock<std::mutex>& lock, Queue& q, Command& command) {
  const Fence fence = open_fence(q, command);
  const std::uint64_t position = q.dispatched++;
  Command taken = command;
  lock.unlock();
  const FenceOutcome outcome = execute(q, taken, true, true);
  fences().resolve(fence, outcome);
  lock.lock();
  Command& slot = q.ring[position % q.ring.size()];
  slot.done = true;
  slot.outcome = outcome;
  retire(q);
  // Commands queued behind this one meanwhile may start now. With none, the worker has nothing
  // to start: waking it would only cost two context switches and a turn on mutex_.
  if (q.dispatched < q.tail) publish(q);
  return fence;
}

namespace {

Error fences_exhausted(std::uint32_t capacity) {
  return make_error(ErrorCode::exhausted, "fences_max",
                    fmt::format("every one of the {} fence slots is held; release fences that are no longer needed "
                                "(release_fence) or raise fences_max",
                                capacity));
}

}  // namespace

Result<Fence> HostBackend::do_copy(CopyDirection direction, std::span<const CopyRegion> regions,
                                   std::span<const Fence> waits) {
  std::unique_lock lock(mutex_);
  Queue& q = queue(queue_of(direction));
  const auto count = static_cast<std::uint32_t>(regions.size());
  if (Status s = check_room(q, static_cast<std::uint32_t>(waits.size()) + 1, count); !s.ok()) return s.error();
  if (fences().slots_used() == fences().capacity()) return fences_exhausted(fences().capacity());
  // A small copy (a tail write-back) into an idle queue runs on the caller's
  // thread; staging copies (large) stay on the worker, overlapping compute.
  std::uint64_t total = 0;
  for (const CopyRegion& region : regions) total += region.bytes;
  const bool here = total <= run_here_copy_bytes && can_run_here(q, waits);
  if (!here)
    if (Status s = push_waits(q, waits); !s.ok()) return s.error();
  Command& command = push(q, Kind::copy);
  command.direction = direction;
  const std::uint64_t ring = q.regions.size();
  std::uint64_t position = q.region_tail;
  if (position % ring + count > ring) position += ring - position % ring;
  std::copy(regions.begin(), regions.end(), q.regions.begin() + static_cast<std::ptrdiff_t>(position % ring));
  command.region_begin = position;
  command.region_count = count;
  q.region_tail = position + count;
  command.region_end = q.region_tail;
  draw(command, true);
  if (bool& fail = fail_next_copy_[static_cast<std::size_t>(direction)]; fail && command.fault != Fault::failed_copy) {
    if (command.fault == Fault::failed_fence) --faults_.failed_fences;
    if (command.fault == Fault::unknown_fence) --faults_.unknown_fences;
    command.fault = Fault::failed_copy;
    ++faults_.failed_copies;
  }
  fail_next_copy_[static_cast<std::size_t>(direction)] = false;
  if (here) return run_here(lock, q, command);
  const Fence fence = open_fence(q, command);
  publish(q);
  return fence;
}

Result<Fence> HostBackend::do_upload(std::uint64_t arena_offset, std::span<const std::byte> bytes,
                                     std::span<const Fence> waits) {
  std::unique_lock lock(mutex_);
  Queue& q = queue(QueueKind::h2d);
  if (Status s = check_room(q, static_cast<std::uint32_t>(waits.size()) + 1, 0); !s.ok()) return s.error();
  if (fences().slots_used() == fences().capacity()) return fences_exhausted(fences().capacity());
  // A small upload (new rows) into an idle queue is a memcpy on the caller's thread.
  const bool here = bytes.size() <= run_here_copy_bytes && can_run_here(q, waits);
  if (!here)
    if (Status s = push_waits(q, waits); !s.ok()) return s.error();
  Command& command = push(q, Kind::upload);
  command.arena_offset = arena_offset;
  command.source = bytes.data();
  command.bytes = bytes.size();
  draw(command, true);
  if (here) return run_here(lock, q, command);
  const Fence fence = open_fence(q, command);
  publish(q);
  return fence;
}

Result<Fence> HostBackend::do_download(std::uint64_t arena_offset, std::span<std::byte> bytes,
                                       std::span<const Fence> waits) {
  std::unique_lock lock(mutex_);
  Queue& q = queue(QueueKind::d2h);
  if (Status s = check_room(q, static_cast<std::uint32_t>(waits.size()) + 1, 0); !s.ok()) return s.error();
  if (fences().slots_used() == fences().capacity()) return fences_exhausted(fences().capacity());
  const bool here = bytes.size() <= run_here_copy_bytes && can_run_here(q, waits);
  if (!here)
    if (Status s = push_waits(q, waits); !s.ok()) return s.error();
  Command& command = push(q, Kind::download);
  command.arena_offset = arena_offset;
  command.destination = bytes.data();
  command.bytes = bytes.size();
  draw(command, true);
  if (here) return run_here(lock, q, command);
  const Fence fence = open_fence(q, command);
  publish(q);
  return fence;
}

Result<Fence> HostBackend::do_attention(const AttentionBatch& batch, std::span<const Fence> waits) {
  std::unique_lock lock(mutex_);
  Queue& q = queue(QueueKind::compute);
  // An idle compute queue runs the kernel here, on the caller's thread (and
  // the kernel's helpers): two thread hand-offs fewer per call (run_here).
  if (can_run_here(q, waits) && !free_jobs_.empty()) {
    Command& command = push(q, Kind::attention);
    command.job = free_jobs_.back();
    free_jobs_.pop_back();
    jobs_[command.job].assign(batch);
    jobs_[command.job].host_pool = pool_view_.data();
    draw(command, false);
    return run_here(lock, q, command);
  }
  if (Status s = check_room(q, static_cast<std::uint32_t>(waits.size()) + 1, 0); !s.ok()) return s.error();
  if (free_jobs_.empty()) {
    return make_error(ErrorCode::exhausted, "",
                      fmt::format("{} attention calls are in flight on the host backend; wait for one to complete",
                                  attention_jobs_in_flight));
  }
  if (fences().slots_used() == fences().capacity()) return fences_exhausted(fences().capacity());
  if (Status s = push_waits(q, waits); !s.ok()) return s.error();
  Command& command = push(q, Kind::attention);
  command.job = free_jobs_.back();
  free_jobs_.pop_back();
  jobs_[command.job].assign(batch);
  jobs_[command.job].host_pool = pool_view_.data();
  draw(command, false);
  const Fence fence = open_fence(q, command);
  publish(q);
  return fence;
}

Result<Fence> HostBackend::do_record(QueueKind kind) {
  std::lock_guard lock(mutex_);
  Queue& q = queue(kind);
  if (Status s = check_room(q, 1, 0); !s.ok()) return s.error();
  if (fences().slots_used() == fences().capacity()) return fences_exhausted(fences().capacity());
  Command& command = push(q, Kind::marker);
  draw(command, false);
  const Fence fence = open_fence(q, command);
  publish(q);
  return fence;
}

Status HostBackend::do_enqueue_wait(QueueKind kind, std::span<const Fence> waited) {
  std::lock_guard lock(mutex_);
  Queue& q = queue(kind);
  if (Status s = check_room(q, static_cast<std::uint32_t>(waited.size()), 0); !s.ok()) return s;
  const std::uint64_t first = q.tail;
  if (Status s = push_waits(q, waited); !s.ok()) return s;
  for (std::uint64_t p = first; p < q.tail; ++p) draw(q.ring[p % q.ring.size()], false);
  publish(q);
  return Status::success();
}

// ---- executing ----------------------------------------------------------------------

void HostBackend::apply_copy(Queue& q, const Command& command, std::uint64_t permille) {
  std::byte* const arena = arena_.get();
  std::byte* const pool = pool_view_.data();
  std::uint64_t total = 0;
  if (command.kind == Kind::copy) {
    for (std::uint32_t i = 0; i < command.region_count; ++i) total += q.regions[(command.region_begin + i) % q.regions.size()].bytes;
  } else {
    total = command.bytes;
  }
  std::uint64_t budget = permille >= 1000 ? total : total * permille / 1000;
  if (command.kind == Kind::upload) {
    std::memcpy(arena + command.arena_offset, command.source, budget);
    return;
  }
  if (command.kind == Kind::download) {
    std::memcpy(command.destination, arena + command.arena_offset, budget);
    return;
  }
  const std::byte* src_base = command.direction == CopyDirection::h2d ? pool : arena;
  std::byte* dst_base = command.direction == CopyDirection::d2h ? pool : arena;
  for (std::uint32_t i = 0; i < command.region_count && budget > 0; ++i) {
    const CopyRegion& region = q.regions[(command.region_begin + i) % q.regions.size()];
    const std::uint64_t bytes = std::min(region.bytes, budget);
    std::memmove(dst_base + region.dst_offset, src_base + region.src_offset, bytes);
    budget -= bytes;
  }
}

bool HostBackend::set_parallel(const ParallelChunks& parallel) {
  if (options_.deterministic || parallel.run == nullptr || parallel.threads < 2) {
    lent_ = {};
    return false;
  }
  lent_ = parallel;
  return true;
}

void HostBackend::apply_attention(const Command& command, bool threaded, bool here) {
  AttentionJob& job = jobs_[command.job];
  // On the caller's thread its lent threads (awake: they just ran its last region) serve as the
  // helpers; on the compute worker, the backend's own.
  const bool lent = threaded && here && lent_.run != nullptr;
  std::uint32_t threads = lent ? std::min<std::uint32_t>(lent_.threads, static_cast<std::uint32_t>(scratch_.size()))
                          : threaded && pool_ ? capabilities_.compute_threads
                                              : 1;
  // Enough units for the threads: when queries are fewer than threads, cut
  // each query's page list into parts (merged in page order afterwards) —
  // when the pages are enough to pay for a helper's part: below
  // split_pages_min pages per query the call runs on this thread alone
  // (a decode step over 512 tokens, 32 pages, splits; measured in
  // docs/BACKENDS.md, "Decode split"). Outputs are the same bits either way
  // (attention_cpu.hpp).
  constexpr std::size_t split_pages_min = 16;
  const auto queries = static_cast<std::uint32_t>(job.positions.size());
  job.page_parts = 1;
  if (queries < threads && queries > 0 && job.pages.size() >= split_pages_min * queries) {
    const std::uint32_t parts = threads / queries;
    if (job.can_split(parts, split_)) job.page_parts = parts;
  }
  if (balance_tiles_) job.balance_tiles(threads);
  const std::uint32_t units = job.units();
  if (units <= 1) threads = 1;  // one unit: no helper to wake (its page mass would be zeros)
  const std::size_t pages = job.pages.size();
  const bool mass = job.page_mass != nullptr;
  // A static split of the units over the threads, interleaved (later prefill
  // tiles see more pages): deterministic per thread count.
  struct Split {
    HostBackend* self;
    const AttentionJob* job;
    std::uint32_t units, threads;
    std::size_t pages;
    bool mass;
  } split{this, &job, units, threads, pages, mass};
  auto work = [](void* context, std::uint32_t index) noexcept {
    const Split& sp = *static_cast<const Split*>(context);
    AttentionScratch& scratch = sp.self->scratch_[index];
    if (sp.mass) std::fill(scratch.mass.begin(), scratch.mass.begin() + static_cast<std::ptrdiff_t>(sp.pages), 0.0f);
    AttentionSplit* parts = sp.job->page_parts > 1 ? &sp.self->split_ : nullptr;
    for (std::uint32_t unit = index; unit < sp.units; unit += sp.threads)
      run_attention_units(sp.self->arena_.get(), *sp.job, unit, unit + 1, scratch, parts);
  };
  if (threads > 1 && lent) {
    lent_.run(lent_.pool, work, &split, threads);  // chunk i: thread i's share and scratch
  } else if (threads > 1) {
    pool_->run(work, &split);
  } else {
    work(&split, 0);
  }
  if (job.page_parts > 1) finish_attention_split(job, split_, mass ? scratch_[0].mass.data() : nullptr);
  if (mass) {
    for (std::size_t p = 0; p < pages; ++p) {
      float sum = 0.0f;
      for (std::uint32_t t = 0; t < threads; ++t) sum += scratch_[t].mass[p];
      job.page_mass[p] = sum;
    }
    finish_page_mass(job, job.page_mass);
  }
}

// ---- factory ----------------------------------------------------------------------------

}  // namespace activekv::host

namespace activekv {

Result<std::unique_ptr<Backend>> make_host_backend(const BackendOptions& options) {
  if (options.compute_threads == 0 || options.compute_threads > 64) {
    return make_error(ErrorCode::invalid_argument, "--compute-threads", "the host backend takes 1 to 64 compute threads");
  }
  const FaultRates& f = options.faults;
  const bool any_fault = f.late_fence > 0 || f.failed_fence > 0 || f.unknown_fence > 0 || f.failed_copy > 0;
  if (any_fault && !options.deterministic) {
    return make_error(ErrorCode::invalid_argument, "--faults", "fault injection needs the deterministic mode (a seed)");
  }
  for (const double rate : {f.late_fence, f.failed_fence, f.unknown_fence, f.failed_copy}) {
    if (!(rate >= 0.0 && rate <= 1.0)) return make_error(ErrorCode::invalid_argument, "--faults", "fault rates lie in [0, 1]");
  }
  return std::unique_ptr<Backend>(std::make_unique<host::HostBackend>(options));
}

}  // namespace activekv
