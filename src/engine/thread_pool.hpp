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

  // fn(context, chunk, chunks, thread) runs once for every chunk in [0, chunks),
  // each on whichever thread claims it first (thread: 0 = the caller, for
  // per-thread scratch). A descheduled thread delays only a chunk it holds:
  // the others take the rest, and the region ends when every chunk is done,
  // without waiting for a thread that never woke. Work must not depend on
  // which thread runs a chunk.
  using ChunkTask = void (*)(void* context, std::uint32_t chunk, std::uint32_t chunks, std::uint32_t thread);
  void run_chunks(ChunkTask task, void* context, std::uint32_t chunks) noexcept;

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
  // The generation of the latest static region (run()). A worker that wakes for
  // generation g runs the static task only when g is this one: a static region
  // stays current until every worker finished it, but a chunked region may have
  // ended, and later ones begun, before a late worker looks at it.
  std::atomic<std::uint64_t> static_generation_{0};
  // Chunked regions: claims are (generation << 32 | next chunk), so a worker
  // that wakes after its region ended can never claim a chunk of a later one.
  bool claim(std::uint64_t generation, std::uint32_t* chunk) noexcept;
  void run_claimed(std::uint64_t generation, std::uint32_t thread) noexcept;
  std::atomic<std::uint64_t> next_chunk_{0};
  std::atomic<std::uint32_t> chunks_done_{0};
  std::atomic<std::uint32_t> chunks_{0};    // written only while no claim of the old region can succeed
  ChunkTask chunk_task_ = nullptr;
  Task task_ = nullptr;
  void* context_ = nullptr;
};

}  // namespace activekv::engine
