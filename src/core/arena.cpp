// arena.cpp — the arena's layout, pool pages and device-allocation counter (see arena.hpp).
#include "activekv/arena.hpp"

namespace activekv {

Arena::Arena(const ArenaPlan& plan) : plan_(plan), pages_(plan.pages) {}

void Arena::bind_allocation(std::uint64_t bytes) noexcept {
  AK_ASSERT(counters_.device_allocations == 0, "invariant 7: the arena is allocated once, at warm-up");
  AK_ASSERT(bytes >= plan_.used_bytes, "the backend's arena allocation is smaller than the plan's layout");
  ++counters_.device_allocations;
}

}  // namespace activekv
