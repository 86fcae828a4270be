// arena.hpp — the device arena: one allocation at warm-up, every part explicit.
//
// The Arena is the core's view of the device memory the backend allocated
// once: the layout (ArenaPlan: tiles, page pool, recurrent slots, headroom,
// with byte offsets), the pool pages' states (PagePool), and which recurrent
// slot each admitted context uses. It holds offsets, never device pointers, so
// it compiles without any GPU SDK and a plan can be checked on the host.
//
// Its counters prove invariant 7 for the device side: device_allocations is 1
// after bind_allocation() and may never grow (asserted); heap allocations by the
// arena happen in its constructor only.
#pragma once

#include <cstdint>

#include "activekv/memory_plan.hpp"
#include "activekv/page_pool.hpp"

namespace activekv {

struct ArenaCounters {
  std::uint64_t device_allocations = 0;  // backend allocations recorded: 1 after warm-up, never more
};

class Arena {
 public:
  explicit Arena(const ArenaPlan& plan);

  const ArenaPlan& plan() const noexcept { return plan_; }
  PagePool& pages() noexcept { return pages_; }
  const PagePool& pages() const noexcept { return pages_; }

  // The backend calls this once after allocating plan().used_bytes; a second call asserts.
  void bind_allocation(std::uint64_t bytes) noexcept;
  const ArenaCounters& counters() const noexcept { return counters_; }

  std::uint64_t page_offset(std::uint32_t page) const noexcept { return plan_.page_offset(page); }
  std::uint64_t tile_offset(std::uint32_t slot) const noexcept { return plan_.tile_offset(slot); }
  std::uint64_t recurrent_offset(std::uint32_t slot) const noexcept { return plan_.recurrent_offset(slot); }

 private:
  ArenaPlan plan_;
  PagePool pages_;
  ArenaCounters counters_;
};

}  // namespace activekv
