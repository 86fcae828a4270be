// lease.hpp — the right to use a buffer until every fence that touched it signalled.
//
// Two tables, both sized at warm-up and never grown, both used from one thread
// (the step's), neither allocating on acquire, attach, poll or release:
//
// StagingLeases: device buffers (staging tiles, or any fixed set of arena
// slots the caller numbers 0..buffers-1). A lease moves
//
//   free ─acquire─▶ acquired ─copy_issued─▶ copy issued ─(copy fences signalled)─▶ ready
//                                               │                                   │
//                                               └────────────use────────────▶ in use ◀┘
//   any ─(an attached fence failed or unknown)─▶ quarantined     (forever: never free again)
//   any ─release, every attached fence signalled─▶ free          (generation + 1)
//
// `use` may follow `copy_issued` directly: the kernel waits for the copy on the
// device, so the host never needs to see `ready` first. A release while a fence
// is pending is refused (fences_pending) and changes nothing; release_when_done
// defers it to poll(). A stale handle (generation mismatch) is refused.
//
// CopyTickets: host pool byte ranges that DMA reads (h2d source) or writes (d2h
// destination). While a ticket is open its range may not be overwritten or
// recycled: open() refuses a write ticket over any open ticket, and a read
// ticket over an open write ticket; host_range_busy() is what the core asks
// before it recycles a history or writes rows. A failed or unknown fence
// quarantines the ticket's range for good.
//
// Invariants (validate() checks them):
//   leases: free + acquired + copy_issued + ready + in_use + quarantined = buffers
//   a free lease holds no fence; a quarantined one is on the quarantine list once
//   tickets: a range's open-ticket count >= its copies in flight (DESIGN.md inv. 4)
//
// Every fence attached is retained on the backend and released when the lease
// or ticket leaves it, so fence slots are never recycled under a lease.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "activekv/fence.hpp"

namespace activekv {

class Backend;

enum class LeaseState : std::uint8_t { free, acquired, copy_issued, ready, in_use, quarantined };
inline constexpr std::size_t lease_state_count = 6;
const char* lease_state_name(LeaseState state) noexcept;

// Every answer of the lease and ticket tables: no strings, no allocation.
enum class LeaseStatus : std::uint8_t {
  ok,
  stale_handle,     // generation does not match: the lease was released (and maybe reused)
  wrong_state,      // the transition is not allowed from the lease's state
  fences_pending,   // release refused: a fence that touched the buffer has not signalled
  quarantined,      // a fence failed or is unknown: the buffer is quarantined for good
  none_free,        // every buffer / ticket slot is in use (an ordinary outcome)
  busy,             // the buffer or host range is held by DMA in flight
  too_many_fences,  // the per-lease fence limit set at warm-up is reached
  bad_fence,        // a never-recorded or stale fence was attached
  out_of_range,     // a slot or host range outside the table
};
const char* lease_status_name(LeaseStatus status) noexcept;

struct Lease {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;  // 0: no lease
  friend constexpr bool operator==(Lease, Lease) = default;
};

// Why a buffer is quarantined: what explain shows.
struct QuarantineRecord {
  std::uint32_t slot = 0;        // lease slot, or ticket slot
  std::uint32_t generation = 0;  // the lease's generation when it was quarantined
  LeaseState state_before = LeaseState::free;
  FenceOutcome cause = FenceOutcome::unknown;  // failed or unknown
  QueueKind queue = QueueKind::compute;        // the queue of the fence that caused it
  std::uint64_t host_offset = 0;  // tickets: the host range
  std::uint64_t host_bytes = 0;
};

struct LeaseCounters {
  std::uint64_t acquired = 0;
  std::uint64_t released = 0;
  std::uint64_t refused_pending = 0;  // releases / reuses refused while a fence was pending
  std::uint64_t refused_stale = 0;
  std::uint64_t quarantined = 0;
};

class StagingLeases {
 public:
  StagingLeases(Backend& backend, std::uint32_t buffers, std::uint32_t fences_per_lease_max = 8);
  ~StagingLeases();
  StagingLeases(const StagingLeases&) = delete;
  StagingLeases& operator=(const StagingLeases&) = delete;

  // Any free buffer (the least recently freed first), or none_free.
  LeaseStatus acquire(Lease* lease);
  // Buffer `slot` (the planner's tile slot): busy while leased, quarantined if so.
  LeaseStatus acquire_slot(std::uint32_t slot, Lease* lease);
  // The copy filling the buffer was enqueued with this fence.
  LeaseStatus copy_issued(Lease lease, Fence fence);
  // Work reading the buffer (the kernel, a d2d promotion) was enqueued with this fence.
  LeaseStatus use(Lease lease, Fence fence);
  // Free now if every attached fence signalled; else fences_pending (nothing
  // changes) or quarantined (a fence failed / is unknown).
  LeaseStatus release(Lease lease);
  // Free at the first poll() that sees every fence signalled.
  LeaseStatus release_when_done(Lease lease);
  // Queries attached fences: copy_issued -> ready, deferred releases, quarantines.
  // Returns how many leases changed state.
  std::uint32_t poll();

  // Fences the lease can still take (0 for a stale handle): check before
  // enqueuing work whose fence must be attached — work whose fence cannot be
  // attached touches a buffer the table does not know is busy.
  std::uint32_t fence_room(Lease lease) const;
  // state(stale handle) answers free.
  LeaseState state(Lease lease) const;
  LeaseState slot_state(std::uint32_t slot) const;
  bool current(Lease lease) const;

  std::uint32_t buffers() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
  std::uint32_t count(LeaseState state) const noexcept { return counts_[static_cast<std::size_t>(state)]; }
  std::span<const QuarantineRecord> quarantine() const noexcept { return {quarantine_.data(), quarantine_size_}; }
  const LeaseCounters& counters() const noexcept { return counters_; }
  // Walks every slot: counts agree, free list agrees, fences held only by live leases.
  bool validate() const;

 private:
  struct Slot {
    std::uint32_t generation = 1;
    std::uint32_t fence_count = 0;  // fences attached: fences_[slot * fences_max_ ...]
    LeaseState state = LeaseState::free;
    bool release_requested = false;
  };
  LeaseStatus check(Lease lease) const;
  LeaseStatus attach(Slot& slot, Fence fence);
  void set_state(std::uint32_t index, LeaseState state);
  // Drops signalled fences; returns the worst outcome of those left (signalled if none).
  FenceOutcome settle(Slot& slot);
  void quarantine_slot(std::uint32_t index, FenceOutcome cause, QueueKind queue);
  void free_slot(std::uint32_t index);

  Backend& backend_;
  std::uint32_t fences_max_;
  std::vector<Slot> slots_;
  std::vector<Fence> fences_;       // [buffers][fences_max]
  std::vector<std::uint32_t> free_; // ring of free slot indices
  std::uint32_t free_head_ = 0, free_size_ = 0;
  std::vector<QuarantineRecord> quarantine_;
  std::uint32_t quarantine_size_ = 0;
  std::uint32_t counts_[lease_state_count] = {};
  LeaseCounters counters_{};
};

enum class HostAccess : std::uint8_t {
  read,   // DMA reads the range (h2d source): the host must not overwrite it
  write,  // DMA writes the range (d2h destination): the host must not read, write or recycle it
};

struct Ticket {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;  // 0: no ticket
  friend constexpr bool operator==(Ticket, Ticket) = default;
};

class CopyTickets {
 public:
  CopyTickets(Backend& backend, std::uint32_t tickets_max, std::uint32_t fences_per_ticket_max = 4);
  ~CopyTickets();
  CopyTickets(const CopyTickets&) = delete;
  CopyTickets& operator=(const CopyTickets&) = delete;

  // A ticket on host pool bytes [offset, offset + bytes). busy when it
  // conflicts with an open or quarantined ticket; none_free when the table is full.
  LeaseStatus open(std::uint64_t offset, std::uint64_t bytes, HostAccess access, Ticket* ticket);
  // The DMA on this range was enqueued with this fence.
  LeaseStatus attach(Ticket ticket, Fence fence);
  // As StagingLeases::release / release_when_done.
  LeaseStatus close(Ticket ticket);
  LeaseStatus close_when_done(Ticket ticket);
  std::uint32_t poll();

  // True while any open or quarantined ticket overlaps the range: the host may
  // not overwrite or recycle it.
  bool host_range_busy(std::uint64_t offset, std::uint64_t bytes) const;
  // True while a quarantined ticket overlaps the range: for good.
  bool range_quarantined(std::uint64_t offset, std::uint64_t bytes) const;
  // Open tickets overlapping the range (the range's lease count).
  std::uint32_t tickets_overlapping(std::uint64_t offset, std::uint64_t bytes) const;

  std::uint32_t open_count() const noexcept { return open_; }
  std::uint32_t capacity() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
  std::span<const QuarantineRecord> quarantine() const noexcept { return {quarantine_.data(), quarantine_size_}; }
  const LeaseCounters& counters() const noexcept { return counters_; }
  bool validate() const;

 private:
  struct Slot {
    std::uint64_t offset = 0;  // host pool bytes [offset, offset + bytes)
    std::uint64_t bytes = 0;
    std::uint32_t generation = 1;
    std::uint32_t fence_count = 0;
    HostAccess access = HostAccess::read;
    bool open = false;
    bool quarantined = false;
    bool close_requested = false;
  };
  LeaseStatus check(Ticket ticket) const;
  FenceOutcome settle(Slot& slot);
  void quarantine_slot(std::uint32_t index, FenceOutcome cause, QueueKind queue);
  void free_slot(std::uint32_t index);

  Backend& backend_;
  std::uint32_t fences_max_;
  std::vector<Slot> slots_;
  std::vector<Fence> fences_;  // [tickets][fences_max]
  std::vector<std::uint32_t> free_;
  std::uint32_t free_size_ = 0;
  std::uint32_t open_ = 0;
  std::vector<QuarantineRecord> quarantine_;
  std::uint32_t quarantine_size_ = 0;
  LeaseCounters counters_{};
};

}  // namespace activekv
