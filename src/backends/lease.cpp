// lease.cpp — staging leases and copy tickets (see include/activekv/lease.hpp).
//
// Both tables keep the fences attached to a buffer in a fixed array per slot,
// retained on the backend. settle() drops the fences that signalled; whatever
// is left decides: nothing left → the buffer may be freed; a failed or unknown
// fence → the buffer is quarantined for good; else it waits.
#include "activekv/lease.hpp"

#include "activekv/assert.hpp"
#include "activekv/backend.hpp"

namespace activekv {

const char* lease_state_name(LeaseState state) noexcept {
  switch (state) {
    case LeaseState::free: return "free";
    case LeaseState::acquired: return "acquired";
    case LeaseState::copy_issued: return "copy issued";
    case LeaseState::ready: return "ready";
    case LeaseState::in_use: return "in use";
    case LeaseState::quarantined: return "quarantined";
  }
  return "?";
}

const char* lease_status_name(LeaseStatus status) noexcept {
  switch (status) {
    case LeaseStatus::ok: return "ok";
    case LeaseStatus::stale_handle: return "stale handle";
    case LeaseStatus::wrong_state: return "wrong state";
    case LeaseStatus::fences_pending: return "fences pending";
    case LeaseStatus::quarantined: return "quarantined";
    case LeaseStatus::none_free: return "none free";
    case LeaseStatus::busy: return "busy";
    case LeaseStatus::too_many_fences: return "too many fences";
    case LeaseStatus::bad_fence: return "bad fence";
    case LeaseStatus::out_of_range: return "out of range";
  }
  return "?";
}

namespace {

std::uint32_t next_generation(std::uint32_t generation) { return generation == UINT32_MAX ? 1 : generation + 1; }

bool overlaps(std::uint64_t a, std::uint64_t a_bytes, std::uint64_t b, std::uint64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

// Drops the signalled fences of `fences[0, *count)` (releasing them on the
// backend) and returns the worst outcome left, with its queue.
FenceOutcome settle_fences(Backend& backend, Fence* fences, std::uint32_t* count, QueueKind* worst_queue) {
  FenceOutcome worst = FenceOutcome::signalled;
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < *count; ++i) {
    const Fence fence = fences[i];
    const FenceOutcome outcome = backend.query(fence);
    if (outcome == FenceOutcome::signalled) {
      backend.release_fence(fence);
      continue;
    }
    if (fence_outcome_severity(outcome) > fence_outcome_severity(worst)) {
      worst = outcome;
      if (!backend.fence_queue(fence, worst_queue)) *worst_queue = QueueKind::compute;
    }
    fences[kept++] = fence;
  }
  *count = kept;
  return worst;
}

void release_all(Backend& backend, Fence* fences, std::uint32_t* count) {
  for (std::uint32_t i = 0; i < *count; ++i) backend.release_fence(fences[i]);
  *count = 0;
}

}  // namespace

// ---- StagingLeases ----------------------------------------------------------

StagingLeases::StagingLeases(Backend& backend, std::uint32_t buffers, std::uint32_t fences_per_lease_max)
    : backend_(backend),
      fences_max_(fences_per_lease_max),
      slots_(buffers),
      fences_(std::size_t{buffers} * fences_per_lease_max),
      free_(buffers),
      quarantine_(buffers) {
  AK_ASSERT(buffers > 0, "a lease table needs at least one buffer");
  AK_ASSERT(fences_per_lease_max > 0, "a lease needs room for at least one fence");
  for (std::uint32_t i = 0; i < buffers; ++i) free_[i] = i;
  free_size_ = buffers;
  counts_[static_cast<std::size_t>(LeaseState::free)] = buffers;
}

StagingLeases::~StagingLeases() {
  for (std::uint32_t i = 0; i < buffers(); ++i) release_all(backend_, &fences_[std::size_t{i} * fences_max_], &slots_[i].fence_count);
}

void StagingLeases::set_state(std::uint32_t index, LeaseState state) {
  Slot& slot = slots_[index];
  AK_ASSERT(counts_[static_cast<std::size_t>(slot.state)] > 0, "lease state count underflow");
  --counts_[static_cast<std::size_t>(slot.state)];
  ++counts_[static_cast<std::size_t>(state)];
  slot.state = state;
}

LeaseStatus StagingLeases::check(Lease lease) const {
  if (lease.slot >= buffers()) return LeaseStatus::out_of_range;
  const Slot& slot = slots_[lease.slot];
  if (lease.generation == 0 || slot.generation != lease.generation || slot.state == LeaseState::free) {
    return LeaseStatus::stale_handle;
  }
  if (slot.state == LeaseState::quarantined) return LeaseStatus::quarantined;
  return LeaseStatus::ok;
}

bool StagingLeases::current(Lease lease) const {
  const LeaseStatus status = check(lease);
  return status == LeaseStatus::ok || status == LeaseStatus::quarantined;
}

std::uint32_t StagingLeases::fence_room(Lease lease) const {
  if (check(lease) != LeaseStatus::ok) return 0;
  return fences_max_ - slots_[lease.slot].fence_count;
}

LeaseState StagingLeases::state(Lease lease) const {
  return current(lease) ? slots_[lease.slot].state : LeaseState::free;
}

LeaseState StagingLeases::slot_state(std::uint32_t slot) const {
  AK_ASSERT(slot < buffers(), "slot_state() of a slot outside the table");
  return slots_[slot].state;
}

LeaseStatus StagingLeases::acquire(Lease* lease) {
  if (free_size_ == 0) return LeaseStatus::none_free;
  const std::uint32_t index = free_[free_head_];
  free_head_ = (free_head_ + 1) % buffers();
  --free_size_;
  AK_ASSERT(slots_[index].state == LeaseState::free, "free ring holds a leased slot");
  set_state(index, LeaseState::acquired);
  slots_[index].release_requested = false;
  ++counters_.acquired;
  *lease = Lease{index, slots_[index].generation};
  return LeaseStatus::ok;
}

LeaseStatus StagingLeases::acquire_slot(std::uint32_t index, Lease* lease) {
  if (index >= buffers()) return LeaseStatus::out_of_range;
  const LeaseState state = slots_[index].state;
  if (state == LeaseState::quarantined) return LeaseStatus::quarantined;
  if (state != LeaseState::free) {
    ++counters_.refused_pending;
    return LeaseStatus::busy;
  }
  // Take it out of the free ring: swap it with the head, then pop the head.
  std::uint32_t position = free_head_;
  for (std::uint32_t i = 0; i < free_size_; ++i, position = (position + 1) % buffers()) {
    if (free_[position] == index) break;
  }
  AK_ASSERT(free_[position] == index, "a free slot missing from the free ring");
  free_[position] = free_[free_head_];
  free_[free_head_] = index;
  return acquire(lease);
}

LeaseStatus StagingLeases::attach(Slot& slot, Fence fence) {
  if (!fence.recorded() || !backend_.retain_fence(fence).ok()) return LeaseStatus::bad_fence;
  if (slot.fence_count == fences_max_) {
    // Make room by dropping fences that already signalled.
    QueueKind queue = QueueKind::compute;
    const std::size_t index = static_cast<std::size_t>(&slot - slots_.data());
    settle_fences(backend_, &fences_[index * fences_max_], &slot.fence_count, &queue);
    if (slot.fence_count == fences_max_) {
      backend_.release_fence(fence);
      return LeaseStatus::too_many_fences;
    }
  }
  const std::size_t index = static_cast<std::size_t>(&slot - slots_.data());
  fences_[index * fences_max_ + slot.fence_count++] = fence;
  return LeaseStatus::ok;
}

LeaseStatus StagingLeases::copy_issued(Lease lease, Fence fence) {
  if (const LeaseStatus status = check(lease); status != LeaseStatus::ok) {
    if (status == LeaseStatus::stale_handle) ++counters_.refused_stale;
    return status;
  }
  Slot& slot = slots_[lease.slot];
  if (slot.state != LeaseState::acquired && slot.state != LeaseState::copy_issued) return LeaseStatus::wrong_state;
  if (slot.release_requested) return LeaseStatus::wrong_state;
  const LeaseStatus status = attach(slot, fence);
  if (status != LeaseStatus::ok) return status;
  if (slot.state == LeaseState::acquired) set_state(lease.slot, LeaseState::copy_issued);
  return LeaseStatus::ok;
}

LeaseStatus StagingLeases::use(Lease lease, Fence fence) {
  if (const LeaseStatus status = check(lease); status != LeaseStatus::ok) {
    if (status == LeaseStatus::stale_handle) ++counters_.refused_stale;
    return status;
  }
  Slot& slot = slots_[lease.slot];
  if (slot.state != LeaseState::copy_issued && slot.state != LeaseState::ready && slot.state != LeaseState::in_use) {
    return LeaseStatus::wrong_state;
  }
  if (slot.release_requested) return LeaseStatus::wrong_state;
  const LeaseStatus status = attach(slot, fence);
  if (status != LeaseStatus::ok) return status;
  if (slot.state != LeaseState::in_use) set_state(lease.slot, LeaseState::in_use);
  return LeaseStatus::ok;
}

FenceOutcome StagingLeases::settle(Slot& slot) {
  const std::size_t index = static_cast<std::size_t>(&slot - slots_.data());
  QueueKind queue = QueueKind::compute;
  const FenceOutcome worst = settle_fences(backend_, &fences_[index * fences_max_], &slot.fence_count, &queue);
  if (worst == FenceOutcome::failed || worst == FenceOutcome::unknown) {
    quarantine_slot(static_cast<std::uint32_t>(index), worst, queue);
  }
  return worst;
}

void StagingLeases::quarantine_slot(std::uint32_t index, FenceOutcome cause, QueueKind queue) {
  Slot& slot = slots_[index];
  AK_ASSERT(slot.state != LeaseState::free && slot.state != LeaseState::quarantined, "quarantine of a free or quarantined lease");
  AK_ASSERT(quarantine_size_ < quarantine_.size(), "quarantine list overflow");
  quarantine_[quarantine_size_++] = QuarantineRecord{index, slot.generation, slot.state, cause, queue, 0, 0};
  release_all(backend_, &fences_[std::size_t{index} * fences_max_], &slot.fence_count);
  set_state(index, LeaseState::quarantined);
  ++counters_.quarantined;
}

void StagingLeases::free_slot(std::uint32_t index) {
  Slot& slot = slots_[index];
  AK_ASSERT(slot.fence_count == 0, "freeing a lease that still holds fences");
  slot.generation = next_generation(slot.generation);
  slot.release_requested = false;
  set_state(index, LeaseState::free);
  free_[(free_head_ + free_size_) % buffers()] = index;
  ++free_size_;
  ++counters_.released;
}

LeaseStatus StagingLeases::release(Lease lease) {
  if (const LeaseStatus status = check(lease); status != LeaseStatus::ok) {
    if (status == LeaseStatus::stale_handle) ++counters_.refused_stale;
    return status;
  }
  const FenceOutcome worst = settle(slots_[lease.slot]);
  if (worst == FenceOutcome::pending) {
    ++counters_.refused_pending;
    return LeaseStatus::fences_pending;
  }
  if (worst != FenceOutcome::signalled) return LeaseStatus::quarantined;
  free_slot(lease.slot);
  return LeaseStatus::ok;
}

LeaseStatus StagingLeases::release_when_done(Lease lease) {
  if (const LeaseStatus status = check(lease); status != LeaseStatus::ok) {
    if (status == LeaseStatus::stale_handle) ++counters_.refused_stale;
    return status;
  }
  slots_[lease.slot].release_requested = true;
  return LeaseStatus::ok;
}

std::uint32_t StagingLeases::poll() {
  std::uint32_t changed = 0;
  for (std::uint32_t i = 0; i < buffers(); ++i) {
    Slot& slot = slots_[i];
    if (slot.state == LeaseState::free || slot.state == LeaseState::quarantined) continue;
    if (slot.fence_count == 0 && !slot.release_requested) continue;
    const FenceOutcome worst = settle(slot);
    if (worst == FenceOutcome::failed || worst == FenceOutcome::unknown) {
      ++changed;
      continue;
    }
    if (worst != FenceOutcome::signalled) continue;
    if (slot.release_requested) {
      free_slot(i);
      ++changed;
    } else if (slot.state == LeaseState::copy_issued) {
      set_state(i, LeaseState::ready);
      ++changed;
    }
  }
  return changed;
}

bool StagingLeases::validate() const {
  std::uint32_t counts[lease_state_count] = {};
  for (std::uint32_t i = 0; i < buffers(); ++i) {
    const Slot& slot = slots_[i];
    ++counts[static_cast<std::size_t>(slot.state)];
    if (slot.generation == 0) return false;
    if ((slot.state == LeaseState::free || slot.state == LeaseState::quarantined) && slot.fence_count != 0) return false;
    if (slot.fence_count > fences_max_) return false;
  }
  std::uint32_t total = 0;
  for (std::size_t s = 0; s < lease_state_count; ++s) {
    if (counts[s] != counts_[s]) return false;
    total += counts[s];
  }
  if (total != buffers()) return false;
  if (free_size_ != counts_[static_cast<std::size_t>(LeaseState::free)]) return false;
  for (std::uint32_t i = 0; i < free_size_; ++i) {
    if (slots_[free_[(free_head_ + i) % buffers()]].state != LeaseState::free) return false;
  }
  if (quarantine_size_ != counts_[static_cast<std::size_t>(LeaseState::quarantined)]) return false;
  for (std::uint32_t i = 0; i < quarantine_size_; ++i) {
    if (slots_[quarantine_[i].slot].state != LeaseState::quarantined) return false;
  }
  return true;
}

// ---- CopyTickets ------------------------------------------------------------

CopyTickets::CopyTickets(Backend& backend, std::uint32_t tickets_max, std::uint32_t fences_per_ticket_max)
    : backend_(backend),
      fences_max_(fences_per_ticket_max),
      slots_(tickets_max),
      fences_(std::size_t{tickets_max} * fences_per_ticket_max),
      free_(tickets_max),
      quarantine_(tickets_max) {
  AK_ASSERT(tickets_max > 0, "a ticket table needs at least one ticket");
  AK_ASSERT(fences_per_ticket_max > 0, "a ticket needs room for at least one fence");
  for (std::uint32_t i = 0; i < tickets_max; ++i) free_[i] = tickets_max - 1 - i;
  free_size_ = tickets_max;
}

CopyTickets::~CopyTickets() {
  for (std::uint32_t i = 0; i < capacity(); ++i) release_all(backend_, &fences_[std::size_t{i} * fences_max_], &slots_[i].fence_count);
}

LeaseStatus CopyTickets::check(Ticket ticket) const {
  if (ticket.slot >= capacity()) return LeaseStatus::out_of_range;
  const Slot& slot = slots_[ticket.slot];
  if (ticket.generation == 0 || slot.generation != ticket.generation || (!slot.open && !slot.quarantined)) {
    return LeaseStatus::stale_handle;
  }
  if (slot.quarantined) return LeaseStatus::quarantined;
  return LeaseStatus::ok;
}

LeaseStatus CopyTickets::open(std::uint64_t offset, std::uint64_t bytes, HostAccess access, Ticket* ticket) {
  if (bytes == 0 || offset + bytes < offset || offset + bytes > backend_.host_pool_bytes()) return LeaseStatus::out_of_range;
  for (const Slot& slot : slots_) {
    if (!slot.open && !slot.quarantined) continue;
    if (!overlaps(offset, bytes, slot.offset, slot.bytes)) continue;
    const bool conflict = slot.quarantined || access == HostAccess::write || slot.access == HostAccess::write;
    if (conflict) {
      ++counters_.refused_pending;
      return LeaseStatus::busy;
    }
  }
  if (free_size_ == 0) return LeaseStatus::none_free;
  const std::uint32_t index = free_[--free_size_];
  Slot& slot = slots_[index];
  AK_ASSERT(!slot.open && !slot.quarantined, "free ticket slot in use");
  slot.offset = offset;
  slot.bytes = bytes;
  slot.access = access;
  slot.open = true;
  slot.close_requested = false;
  ++open_;
  ++counters_.acquired;
  *ticket = Ticket{index, slot.generation};
  return LeaseStatus::ok;
}

LeaseStatus CopyTickets::attach(Ticket ticket, Fence fence) {
  if (const LeaseStatus status = check(ticket); status != LeaseStatus::ok) {
    if (status == LeaseStatus::stale_handle) ++counters_.refused_stale;
    return status;
  }
  Slot& slot = slots_[ticket.slot];
  if (slot.close_requested) return LeaseStatus::wrong_state;
  if (!fence.recorded() || !backend_.retain_fence(fence).ok()) return LeaseStatus::bad_fence;
  Fence* fences = &fences_[std::size_t{ticket.slot} * fences_max_];
  if (slot.fence_count == fences_max_) {
    QueueKind queue = QueueKind::compute;
    settle_fences(backend_, fences, &slot.fence_count, &queue);
    if (slot.fence_count == fences_max_) {
      backend_.release_fence(fence);
      return LeaseStatus::too_many_fences;
    }
  }
  fences[slot.fence_count++] = fence;
  return LeaseStatus::ok;
}

FenceOutcome CopyTickets::settle(Slot& slot) {
  const std::size_t index = static_cast<std::size_t>(&slot - slots_.data());
  QueueKind queue = QueueKind::compute;
  const FenceOutcome worst = settle_fences(backend_, &fences_[index * fences_max_], &slot.fence_count, &queue);
  if (worst == FenceOutcome::failed || worst == FenceOutcome::unknown) {
    quarantine_slot(static_cast<std::uint32_t>(index), worst, queue);
  }
  return worst;
}

void CopyTickets::quarantine_slot(std::uint32_t index, FenceOutcome cause, QueueKind queue) {
  Slot& slot = slots_[index];
  AK_ASSERT(slot.open, "quarantine of a ticket that is not open");
  AK_ASSERT(quarantine_size_ < quarantine_.size(), "ticket quarantine list overflow");
  quarantine_[quarantine_size_++] = QuarantineRecord{
      index, slot.generation, slot.access == HostAccess::read ? LeaseState::copy_issued : LeaseState::in_use, cause, queue,
      slot.offset, slot.bytes};
  release_all(backend_, &fences_[std::size_t{index} * fences_max_], &slot.fence_count);
  slot.open = false;
  slot.quarantined = true;
  --open_;
  ++counters_.quarantined;
}

void CopyTickets::free_slot(std::uint32_t index) {
  Slot& slot = slots_[index];
  AK_ASSERT(slot.fence_count == 0, "closing a ticket that still holds fences");
  slot.open = false;
  slot.close_requested = false;
  slot.generation = next_generation(slot.generation);
  free_[free_size_++] = index;
  --open_;
  ++counters_.released;
}

LeaseStatus CopyTickets::close(Ticket ticket) {
  if (const LeaseStatus status = check(ticket); status != LeaseStatus::ok) {
    if (status == LeaseStatus::stale_handle) ++counters_.refused_stale;
    return status;
  }
  const FenceOutcome worst = settle(slots_[ticket.slot]);
  if (worst == FenceOutcome::pending) {
    ++counters_.refused_pending;
    return LeaseStatus::fences_pending;
  }
  if (worst != FenceOutcome::signalled) return LeaseStatus::quarantined;
  free_slot(ticket.slot);
  return LeaseStatus::ok;
}

LeaseStatus CopyTickets::close_when_done(Ticket ticket) {
  if (const LeaseStatus status = check(ticket); status != LeaseStatus::ok) {
    if (status == LeaseStatus::stale_handle) ++counters_.refused_stale;
    return status;
  }
  slots_[ticket.slot].close_requested = true;
  return LeaseStatus::ok;
}

std::uint32_t CopyTickets::poll() {
  std::uint32_t changed = 0;
  for (std::uint32_t i = 0; i < capacity(); ++i) {
    Slot& slot = slots_[i];
    if (!slot.open || (slot.fence_count == 0 && !slot.close_requested)) continue;
    const FenceOutcome worst = settle(slot);
    if (worst == FenceOutcome::failed || worst == FenceOutcome::unknown) {
      ++changed;
      continue;
    }
    if (worst == FenceOutcome::signalled && slot.close_requested) {
      free_slot(i);
      ++changed;
    }
  }
  return changed;
}

bool CopyTickets::host_range_busy(std::uint64_t offset, std::uint64_t bytes) const {
  for (const Slot& slot : slots_) {
    if ((slot.open || slot.quarantined) && overlaps(offset, bytes, slot.offset, slot.bytes)) return true;
  }
  return false;
}

bool CopyTickets::range_quarantined(std::uint64_t offset, std::uint64_t bytes) const {
  for (const Slot& slot : slots_) {
    if (slot.quarantined && overlaps(offset, bytes, slot.offset, slot.bytes)) return true;
  }
  return false;
}

std::uint32_t CopyTickets::tickets_overlapping(std::uint64_t offset, std::uint64_t bytes) const {
  std::uint32_t count = 0;
  for (const Slot& slot : slots_) {
    if (slot.open && overlaps(offset, bytes, slot.offset, slot.bytes)) ++count;
  }
  return count;
}

bool CopyTickets::validate() const {
  std::uint32_t open = 0, quarantined = 0;
  for (const Slot& slot : slots_) {
    if (slot.open && slot.quarantined) return false;
    if (!slot.open && slot.fence_count != 0) return false;
    if (slot.generation == 0) return false;
    open += slot.open ? 1 : 0;
    quarantined += slot.quarantined ? 1 : 0;
  }
  if (open != open_ || quarantined != quarantine_size_) return false;
  return open + quarantined + free_size_ == capacity();
}

}  // namespace activekv
