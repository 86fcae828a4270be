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
    task_(context_, index, threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace activekv::engine
