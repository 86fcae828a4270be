// alloc_counter.hpp — counts every heap allocation in the process.
//
// Linked into every test binary (and the engine, for its report): a replaced
// global operator new/delete increments an atomic counter. Invariant 7 ("zero
// heap allocations on the step path after warm-up") is checked by reading the
// count before and after the steps under test:
//
//   const auto before = activekv::testing::heap_allocations();
//   run_steps();
//   EXPECT_EQ(activekv::testing::heap_allocations(), before);
#pragma once

#include <cstdint>

namespace activekv::testing {

// Allocations (operator new of any form, malloc excluded) since process start.
std::uint64_t heap_allocations() noexcept;
// True where the replaced operator new is linked in (tests, activekv binary).
bool heap_counter_linked() noexcept;

// A server's I/O threads (HTTP workers, the listener) allocate freely while its
// engine thread steps. A thread that calls mark_io_thread() is left out of
// heap_allocations_outside_io(), so the engine thread can count the step path's
// allocations (its own and its compute pool's) around each step without
// counting what the I/O threads do meanwhile.
void mark_io_thread() noexcept;
std::uint64_t heap_allocations_outside_io() noexcept;

}  // namespace activekv::testing
