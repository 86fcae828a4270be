// thread_pool.cpp — see thread_pool.hpp.
#include "engine/thread_pool.hpp"

#include "activekv/assert.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace activekv::engine {
namespace {

// Iterations of busy-waiting before sleeping: about 10-50 µs.
constexpr int spin_iterations = 4000;

inline void cpu_relax() noexcept {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(std::uint32_t threads) : threads_(threads) {
  AK_ASSERT(threads >= 1, "ThreadPool: at least one thread (the caller)");
  workers_.reserve(threads - 1);
  for (std::uint32_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run(Task task, void* context) noexcept {
  AK_ASSERT(pending_.load(std::memory_order_acquire) == 0, "ThreadPool::run: a region is already running (not reentrant)");
  if (threads_ == 1) {
    task(context, 0, 1);
    return;
  }
  parked_.store(false, std::memory_order_relaxed);
  task_ = task;
  context_ = context;
  pending_.store(threads_ - 1, std::memory_order_release);
  static_generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  task(context, 0, threads_);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < spin_iterations) {
      cpu_relax();
    } else {
      const std::uint32_t left = pending_.load(std::memory_order_acquire);
      if (left != 0) pending_.wait(left, std::memory_order_acquire);
    }
  }
}

bool ThreadPool::claim(std::uint64_t generation, std::uint32_t* chunk) noexcept {
  std::uint64_t v = next_chunk_.load(std::memory_order_acquire);
  for (;;) {
    if ((v >> 32) != (generation & 0xffffffffu) || (v & 0xffffffffu) >= chunks_.load(std::memory_order_relaxed)) return false;
    if (next_chunk_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      *chunk = static_cast<std::uint32_t>(v & 0xffffffffu);
      return true;
    }
  }
}

void ThreadPool::run_claimed(std::uint64_t generation, std::uint32_t thread) noexcept {
  std::uint32_t chunk = 0;
  while (claim(generation, &chunk)) {
    // A claimed chunk keeps the region open, so its task and context are current.
    const std::uint32_t chunks = chunks_.load(std::memory_order_relaxed);
    chunk_task_(context_, chunk, chunks, thread);
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) chunks_done_.notify_one();
  }
}

void ThreadPool::run_chunks(ChunkTask task, void* context, std::uint32_t chunks) noexcept {
  AK_ASSERT(pending_.load(std::memory_order_acquire) == 0, "ThreadPool::run_chunks: a region is already running");
  if (chunks == 0) return;
  if (threads_ == 1) {
    for (std::uint32_t c = 0; c < chunks; ++c) task(context, c, chunks, 0);
    return;
  }
  parked_.store(false, std::memory_order_relaxed);
  chunk_task_ = task;
  context_ = context;
  chunks_.store(chunks, std::memory_order_relaxed);
  chunks_done_.store(0, std::memory_order_relaxed);
  const std::uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  next_chunk_.store((generation & 0xffffffffu) << 32, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  run_claimed(generation, 0);
  for (int spin = 0;; ++spin) {
    const std::uint32_t done = chunks_done_.load(std::memory_order_acquire);
    if (done == chunks) break;
    if (spin < spin_iterations) {
      cpu_relax();
    } else {
      chunks_done_.wait(done, std::memory_order_acquire);
    }
  }
  // Closed: a worker that wakes late can claim nothing of this region, even
  // once chunks_ holds a later region's count.
  next_chunk_.store(((generation & 0xffffffffu) << 32) | 0xffffffffu, std::memory_order_release);
}

void ThreadPool::park() noexcept { parked_.store(true, std::memory_order_relaxed); }

void ThreadPool::worker(std::uint32_t index) noexcept {
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen; ++spin) {
      if (spin < spin_iterations && !parked_.load(std::memory_order_relaxed)) {
        cpu_relax();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stopping_.load(std::memory_order_acquire)) return;
    // Only a chunked region can end before this worker looks at it: its claims
    // carry the generation, so a late worker finds nothing to claim. Whether
    // `now` is static is read from static_generation_, never from the state of
    // the chunked regions, which may already belong to a later one.
    if (static_generation_.load(std::memory_order_acquire) != now) {
      run_claimed(now, index);
      continue;
    }
    task_(context_, index, threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace activekv::engine
