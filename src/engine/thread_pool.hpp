// thread_pool.hpp — a small persistent pool that runs one task on every thread.
//
// The forward pass is a sequence of short parallel regions (a matrix product,
// attention, a norm): tens per layer, thousands per second. Starting threads
// or allocating per region would dominate, so the pool starts its workers once
// and a region costs one atomic increment to publish and one to finish. A
// region is a plain function pointer and a context pointer: no std::function,
// no allocation, ever, after construction.
//
// Workers spin briefly (a region usually follows the previous one within
// microseconds) and then sleep on the generation counter (a futex through
// std::atomic::wait), so an idle engine costs no CPU. The calling thread is
// thread 0 and does its share; run() returns when every thread finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace activekv::engine {

class ThreadPool {
 public:
  // fn(context, index, count) runs once on each of `count` threads, index 0 on the caller.
  using Task = void (*)(void* context, std::uint32_t index, std::uint32_t count);

  // threads ≥ 1: the caller plus threads − 1 workers.
  explicit ThreadPool(std::uint32_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::uint32_t threads() const noexcept { return threads_; }
  void run(Task task, void* context) noexcept;

  // The caller is about to do work of its own with other threads (attention on
  // the KV backend's threads): idle workers stop spinning and sleep at once,
  // leaving the cores to that work. The next run() wakes them as usual.
  void park() noexcept;

  // Runs fn(begin, end, index) over an even split of [0, n) — one slice per thread.
  template <typename Fn>
  void parallel_for(std::uint32_t n, Fn&& fn) noexcept {
    struct Ctx {
      Fn* fn;
      std::uint32_t n;
    } ctx{&fn, n};
    run(
        [](void* c, std::uint32_t index, std::uint32_t count) {
          auto* x = static_cast<Ctx*>(c);
          const std::uint32_t begin = static_cast<std::uint32_t>(static_cast<std::uint64_t>(x->n) * index / count);
          const std::uint32_t end = static_cast<std::uint32_t>(static_cast<std::uint64_t>(x->n) * (index + 1) / count);
          if (begin < end) (*x->fn)(begin, end, index);
        },
        &ctx);
  }

 private:
  void worker(std::uint32_t index) noexcept;

  std::uint32_t threads_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};  // bumped once per region (and at shutdown)
  std::atomic<std::uint32_t> pending_{0};     // workers still running the current region
  std::atomic<bool> stopping_{false};
  std::atomic<bool> parked_{false};           // set by park(), cleared by run()
  Task task_ = nullptr;
  void* context_ = nullptr;
};

}  // namespace activekv::engine
