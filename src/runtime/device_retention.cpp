// device_retention.cpp — the device side of prefix reuse in the KV runtime (docs/PREFIX.md,
// "Device side"; the class: kv_runtime_impl.hpp).
//
// What it owns: copy on adopt on the device (a prefix's pages resident on the device — the sink,
// the run that ends at the prefix's last page, and promoted pages below it — are copied device to
// device into the adopting context instead of being staged from the host), the fences of
// those copies until they resolve, and the shutdown path that returns retained device pages.
// (Handing a retained history's pages over in place, reclaiming them first and dropping them are
// the budget manager's: src/core/retained_pages.cpp.)
//
// Invariant kept: a copy's source pages are never written and its target pages never read before
// the copy's fence signals. The copy is issued between steps on the d2d queue; at once every queue
// that writes pool pages (h2d: new rows; d2d: promotions and later copies) or reads them (compute:
// attention) is made to wait for its fence ON THE DEVICE, so the copy overlaps whatever the host
// does next — the suffix's prefill is computed while it lands — and no page it touches can be
// reused under it. The fence is held (the lease on those pages) until retire_device_copies() sees it
// resolve on the host after the step's kernels: signalled lands the target pages, failed or unknown
// quarantines them. The host copy stays authoritative, so a failed copy loses nothing.
#include "runtime/kv_runtime_impl.hpp"

namespace activekv::runtime_impl {

std::uint32_t KvRuntimeImpl::copy_prefix_on_device(ContextId context, std::uint32_t source, std::uint32_t pages) noexcept {
  if (!settings_.prefix_reuse_device || !backend_.capabilities().d2d || step_open_ || pages == 0) return 0;
  // The tables hold one copy per slot and one context's pages each; more between two steps (a
  // slot cancelled and taken again) first land what is in flight, on the host.
  if (device_copy_count_ == device_copies_.size() ||
      device_copy_page_count_ + device_copy_regions_.size() > device_copy_pages_.size()) {
    retire_device_copies();
  }
  const std::uint32_t slot = context.slot;
  const PagePool& pool = arena_.pages();
  const std::uint64_t page_bytes = plan_.arena.page_bytes;
  const std::size_t regions_max = device_copy_regions_.size();  // the warm-up's copy_regions_max covers it
  const std::uint32_t page_first = device_copy_page_count_;
  std::uint32_t n = 0;
  auto place = [&](std::uint32_t l, std::uint32_t logical, std::uint32_t from) {
    const std::uint32_t page = budgets_.acquire_copy_page(slot, l, logical);
    if (page == page_none) return false;
    device_copy_regions_[n++] = CopyRegion{plan_.arena.page_offset(from), plan_.arena.page_offset(page), page_bytes};
    device_copy_pages_[device_copy_page_count_++] = pool.id(page);
    return true;
  };
  for (std::uint32_t l = 0; l < plan_.geometry.dense_layers && n < regions_max; ++l) {
    const LayerResidency& from = budgets_.layer(source, l);
    if (from.sink_page != page_none && pool.state(from.sink_page) == PageState::owned) {
      const std::uint32_t page = budgets_.acquire_copy_page(slot, l, 0);
      if (page == page_none) break;
      budgets_.set_sink(slot, l, page);
      device_copy_regions_[n++] = CopyRegion{plan_.arena.page_offset(from.sink_page), plan_.arena.page_offset(page), page_bytes};
      device_copy_pages_[device_copy_page_count_++] = pool.id(page);
    }
    // The source's run pages that end at the prefix's last page become this context's run (its
    // next tail page extends it): the newest that are final, as many as the budget allows.
    // `below`: where this context's run will start (the copied run's first page, else the first
    // tail page, logical `pages`); promoted pages must lie below it and not next to it.
    std::uint32_t below = pages;
    if (from.run_count == 0 || from.run_first >= pages || from.run_first + from.run_count < pages) {
      copy_promoted_on_device(context, source, l, below, n, place);
      continue;
    }
    std::uint32_t lo = pages;
    while (lo > from.run_first && lo - 1 >= 1 &&
           pool.state(budgets_.run_page(source, l, lo - 1 - from.run_first)) == PageState::owned) {
      --lo;
    }
    const ContextState& c = budgets_.context(slot);
    const std::uint64_t layer_room = c.layer_cap > budgets_.layer(slot, l).pages_held() + 1
                                         ? c.layer_cap - budgets_.layer(slot, l).pages_held() - 1
                                         : 0;
    const std::uint64_t budget_room = c.budget.burst_pages > c.pages_held() ? c.budget.burst_pages - c.pages_held() : 0;
    const std::uint64_t room = std::min({layer_room, budget_room, budgets_.pages_unreserved(),
                                         static_cast<std::uint64_t>(regions_max - n)});
    if (room < pages - lo) lo = pages - static_cast<std::uint32_t>(room);
    for (std::uint32_t q = lo; q < pages; ++q) {
      const bool placed = place(l, q, budgets_.run_page(source, l, q - from.run_first));
      AK_ASSERT(placed, "kv runtime: a copied run page fits: the room was counted first");
      budgets_.push_run_back(slot, l, device_copy_pages_[device_copy_page_count_ - 1].index);
    }
    if (lo < pages) below = lo;
    copy_promoted_on_device(context, source, l, below, n, place);
  }
  if (n == 0) return 0;
  // Copies in flight before this one may read pages this one writes (a source page released and
  // taken again as a target): it waits for them on the device.
  const Fence previous[1] = {device_copy_count_ > 0 ? device_copies_[device_copy_count_ - 1].fence : Fence{}};
  Result<Fence> copy = backend_.copy(CopyDirection::d2d, {device_copy_regions_.data(), n},
                                     {previous, device_copy_count_ > 0 ? 1u : 0u});
  DeviceCopy& d = device_copies_[device_copy_count_++];
  d = DeviceCopy{Fence{}, context, page_first, device_copy_page_count_ - page_first};
  if (!copy.ok()) {
    // Refused: nothing was copied; the pages never land (quarantined by retire_device_copies).
    adoption_[slot].device_promoted = 0;
    retire_device_copies();
    return 0;
  }
  d.fence = copy.value();
  const Fence waits[1] = {d.fence};
  bool ordered = backend_.enqueue_wait(QueueKind::compute, waits).ok() && backend_.enqueue_wait(QueueKind::h2d, waits).ok();
  if (ordered && backend_.capabilities().d2d_own_queue) ordered = backend_.enqueue_wait(QueueKind::d2d, waits).ok();
  if (!ordered) retire_device_copies();  // no device-side order: land it now, on the host
  ++counters_.d2d_copies;
  counters_.d2d_bytes += std::uint64_t{n} * page_bytes;
  ++counters_.prefix_device_copies;
  counters_.prefix_device_pages_copied += n;
  counters_.prefix_device_pages_promoted += adoption_[slot].device_promoted;
  record_prefix(DecisionKind::adopt, Reason::device_pages_copied, slot, n, source);
  return n;
}

template <typename Place>
void KvRuntimeImpl::copy_promoted_on_device(ContextId context, std::uint32_t source, std::uint32_t l, std::uint32_t below,
                                            std::uint32_t& n, Place& place) noexcept {
  // The source's promoted pages (below its run: pages a policy brought back) that lie in the prefix
  // and below where this context's run starts are promoted here too, device to device, while the
  // budget allows (acquire_copy_page: unreserved free pages, the burst, room for a tail page).
  const std::uint32_t slot = context.slot;
  const PagePool& pool = arena_.pages();
  const std::span<const std::uint32_t> logicals = budgets_.promoted_logical(source, l);
  const std::span<const std::uint32_t> from_pages = budgets_.promoted_pages(source, l);
  for (std::size_t i = 0; i < logicals.size() && n < device_copy_regions_.size(); ++i) {
    const std::uint32_t logical = logicals[i];
    if (logical + 1 >= below) break;  // sorted: the rest lie at or next to this context's run
    if (pool.state(from_pages[i]) != PageState::owned) continue;  // only final bytes are copied
    if (budgets_.layer(slot, l).promoted_count == plan_.promoted_pages_per_layer) break;
    if (!place(l, logical, from_pages[i])) break;
    const bool added = budgets_.add_promoted(slot, l, logical, device_copy_pages_[device_copy_page_count_ - 1].index);
    AK_ASSERT(added, "kv runtime: a copied promoted page fits: the layer's promoted set had room");
    ++adoption_[slot].device_promoted;
  }
}

void KvRuntimeImpl::retire_device_copies() noexcept {
  PagePool& pool = arena_.pages();
  for (std::uint32_t i = 0; i < device_copy_count_; ++i) {
    DeviceCopy& d = device_copies_[i];
    FenceOutcome outcome = FenceOutcome::failed;  // a refused copy never arrived
    if (d.fence.recorded()) {
      Result<FenceOutcome> waited = backend_.wait_host(d.fence, settings_.fence_timeout);
      outcome = waited.ok() ? waited.value() : FenceOutcome::unknown;
      // A copy that did not resolve may still write its pages: no further step may reuse them.
      if (!waited.ok() || outcome == FenceOutcome::pending) stalled_ = true;
    }
    for (std::uint32_t k = 0; k < d.page_count; ++k) {
      const PageId page = device_copy_pages_[d.page_first + k];
      // A page its context already gave up (finish, cancel, eviction) is no longer this copy's.
      if (!pool.current(page) || pool.state(page.index) != PageState::staging) continue;
      if (outcome == FenceOutcome::signalled) {
        pool.land(page);
      } else if (!budgets_.quarantine(page) && budgets_.current(d.context)) {
        slot_faulted_[d.context.slot] = 1;  // a page the context writes next: it must be cancelled
      }
    }
    release_fence(d.fence);
  }
  device_copy_count_ = 0;
  device_copy_page_count_ = 0;
}

void KvRuntimeImpl::release_retained() {
  AK_ASSERT(!step_open_, "kv runtime: release_retained() during a step");
  retire_device_copies();
  for (std::uint32_t slot = 0; slot < budgets_.slots(); ++slot) budgets_.release_retained(slot, Reason::retained_shutdown);
  sync_retained_counters();
}

}  // namespace activekv::runtime_impl
