// parallel_chunks.hpp — threads a caller lends to a library component for work it cuts into
// independent chunks.
//
// The engine owns the CPU threads of a process (its pool runs the matrix products). The KV
// runtime (the sparse selection's page bounds) and a host-side attention kernel (the host
// backend, when it runs a command on the caller's thread) borrow them instead of waking threads
// of their own. Invariant: run(pool, task, context, chunks) calls task(context, c) exactly once
// for every c in [0, chunks), on whichever of the lender's threads, returns when all are done,
// and allocates nothing; a borrower's result must not depend on which thread ran a chunk.
// run == nullptr: nothing lent, one thread.
#pragma once

#include <cstdint>

namespace activekv {

struct ParallelChunks {
  using Task = void (*)(void* context, std::uint32_t chunk) noexcept;
  void (*run)(void* pool, Task task, void* context, std::uint32_t chunks) noexcept = nullptr;
  void* pool = nullptr;
  std::uint32_t threads = 1;  // threads run() may use (the caller included)
  std::uint32_t least = 128;  // fewer items (pages) than this run on the caller alone: a wake-up costs more
};

}  // namespace activekv
