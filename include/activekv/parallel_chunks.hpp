// parallel_chunks.hpp — threads lent to the runtime and the backend by whoever owns them.
//
// The engine owns a thread pool for its matrix products; the runtime borrows it for work it cuts
// into independent chunks (the sparse selection's page bounds), and a backend whose kernel runs
// on the host (the host backend) borrows it for the attention calls it runs on the caller's
// thread, so that no second set of threads has to be woken for each call. The invariant: a
// chunk's work depends only on its index, never on which thread runs it, so results are the same
// bits with or without the threads. run() is called only from the thread that lent the pool (the
// one that runs the steps) and never allocates.
#pragma once

#include <cstdint>

namespace activekv {

// run(pool, task, context, chunks) calls task(context, c) once for every c in [0, chunks), on
// whichever of its threads, and returns when all are done; it must not allocate. The engine hands
// its thread pool (RuntimeKv); none (run == nullptr): one thread.
struct ParallelChunks {
  using Task = void (*)(void* context, std::uint32_t chunk) noexcept;
  void (*run)(void* pool, Task task, void* context, std::uint32_t chunks) noexcept = nullptr;
  void* pool = nullptr;
  std::uint32_t threads = 1;  // threads run() may use (the caller included)
  std::uint32_t least = 128;  // fewer items (pages) than this run on the caller alone: a wake-up costs more
};

}  // namespace activekv
