// kv_runtime_in_place.cpp — history read in place in the host pool instead of staged (docs/IN_PLACE.md).
//
// With KvRuntimeSettings::read_in_place (a backend whose kernel reads host memory:
// capabilities().kernel_reads_host_pool) a layer's passes are not copied into the tiles: the
// attention schedule points each non-resident page at its rows in the host pool, and one kernel
// call reads every page in ascending order. The accounting stays DESIGN.md's: the host range a
// kernel reads is held by a read ticket that carries the kernel's fence, and the ticket closes only
// when that fence signalled (a pending one at the first poll that sees it resolve; a failed or
// unknown one quarantines the range, as for a failed staging copy). Promotions, which staging
// copies tile to pool (d2d), copy host to pool (h2d) under the same tickets.
//
// Invariant: while a kernel that reads a host range in place may run, a read ticket holding that
// kernel's fence covers the range, so the host cannot recycle or overwrite it.
#include "runtime/kv_runtime_impl.hpp"

namespace activekv::runtime_impl {

bool KvRuntimeImpl::open_in_place(std::uint32_t layer) noexcept {
  AK_ASSERT(settings_.read_in_place, "kv runtime: open_in_place() without read_in_place");
  AK_ASSERT(pass_issued_ == UINT32_MAX && in_place_ticket_count_ == 0 && !in_place_promotion_.recorded(),
            "kv runtime: open_in_place() while another layer's reads are open");
  const StepPlan& plan = planner_.plan();
  // The layer's passes (contiguous, in plan order): nothing is copied, they are consumed here.
  const std::uint32_t first = passes_issued_;
  std::uint32_t end = first;
  while (end < plan.passes.size() && plan.passes[end].layer == layer) ++end;
  AK_ASSERT(end == plan.passes.size() || plan.passes[end].layer > layer,
            "kv runtime: a layer's passes must be contiguous and in layer order");
  passes_issued_ = end;
  // One read ticket per context: the span of its staged pages inside the layer's segment.
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const LayerPlan& lp = layer_plan(layer, e);
    if (lp.copy_count == 0) continue;
    std::uint64_t lo = UINT64_MAX, hi = 0, bytes = 0;
    for (std::uint32_t i = 0; i < lp.copy_count; ++i) {
      const StageCopy& c = plan.copies[lp.copy_first + i];
      lo = std::min(lo, c.host_offset);
      hi = std::max(hi, c.host_offset + c.bytes);
      bytes += c.bytes;
    }
    Ticket ticket;
    if (tickets_.open(lo, hi - lo, HostAccess::read, &ticket) != LeaseStatus::ok) {
      note_fault("a host range to read in place is held by a quarantined or conflicting copy", FenceOutcome::failed, layer);
      return false;
    }
    in_place_tickets_[in_place_ticket_count_++] = ticket;
    counters_.bytes_read_in_place += bytes;
  }
  return issue_in_place_promotions(first, end);
}

bool KvRuntimeImpl::issue_in_place_promotions(std::uint32_t pass_first, std::uint32_t pass_end) noexcept {
  const StepPlan& plan = planner_.plan();
  in_place_pass_first_ = pass_first;
  in_place_pass_end_ = pass_end;
  auto fail = [&](const char* what, const Error& error, std::uint32_t layer) {
    note_refusal(what, error, layer);
    for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
      promotion_failed_[i] |= plan.promotions[i].pass >= pass_first && plan.promotions[i].pass < pass_end;
    }
    return false;
  };
  std::uint32_t n = 0;
  const auto flush = [&](std::uint32_t layer) {
    if (n == 0) return true;
    if (in_place_promotion_.recorded()) {  // a batch larger than the region buffer: one copy at a time
      if (wait(in_place_promotion_, "a promotion copy (h2d) did not signal", layer) != FenceOutcome::signalled) {
        for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
          promotion_failed_[i] |= plan.promotions[i].pass >= pass_first && plan.promotions[i].pass < pass_end;
        }
      }
      release_fence(in_place_promotion_);
    }
    Result<Fence> copy = backend_.copy(CopyDirection::h2d, {regions_.data(), n});
    if (!copy.ok()) return fail("the promotion copy (h2d) was refused by the backend", copy.error(), layer);
    in_place_promotion_ = copy.value();
    ++counters_.h2d_copies;
    counters_.h2d_bytes += n * plan.page_bytes;
    counters_.promotions += n;
    for (std::uint32_t j = 0; j < in_place_ticket_count_; ++j) {
      if (tickets_.attach(in_place_tickets_[j], in_place_promotion_) != LeaseStatus::ok) {
        note_fault("a read ticket could not hold the promotion copy's fence", FenceOutcome::failed, layer);
        return false;
      }
    }
    n = 0;
    return true;
  };
  for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
    const Promotion& p = plan.promotions[i];
    if (p.pass < pass_first || p.pass >= pass_end) continue;
    // The promoted page's rows in the host pool: from the pass's copy that stages it.
    const StagePass& sp = plan.passes[p.pass];
    std::uint64_t host = UINT64_MAX;
    for (std::uint32_t c = 0; c < sp.copy_count && host == UINT64_MAX; ++c) {
      const StageCopy& copy = plan.copies[sp.copy_first + c];
      if (copy.slot == p.slot && copy.layer == p.layer && p.logical >= copy.logical_first &&
          p.logical < copy.logical_first + copy.pages) {
        host = copy.host_offset + std::uint64_t{p.logical - copy.logical_first} * plan.page_bytes;
      }
    }
    AK_ASSERT(host != UINT64_MAX, "kv runtime: a promotion whose page its pass does not stage");
    if (n == regions_.size() && !flush(p.layer)) return false;
    regions_[n++] = CopyRegion{host, p.device_offset_to, plan.page_bytes};
  }
  return flush(pass_first < plan.passes.size() ? plan.passes[pass_first].layer : 0);
}

void KvRuntimeImpl::attach_in_place(Fence kernel, std::uint32_t layer) noexcept {
  for (std::uint32_t j = 0; j < in_place_ticket_count_; ++j) {
    if (tickets_.attach(in_place_tickets_[j], kernel) != LeaseStatus::ok) {
      note_fault("a read ticket could not hold the kernel's fence", FenceOutcome::failed, layer);
    }
  }
}

void KvRuntimeImpl::close_in_place(std::uint32_t layer) noexcept {
  const StepPlan& plan = planner_.plan();
  if (in_place_promotion_.recorded()) {
    if (wait(in_place_promotion_, "a promotion copy (h2d) did not signal", layer) != FenceOutcome::signalled) {
      for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
        promotion_failed_[i] |=
            plan.promotions[i].pass >= in_place_pass_first_ && plan.promotions[i].pass < in_place_pass_end_;
      }
    }
    release_fence(in_place_promotion_);
  }
  // The kernels that read the ranges were waited by attend(): a ticket still pending (a wait that
  // timed out, already a fault) closes when its fences resolve, or quarantines its range.
  for (std::uint32_t j = 0; j < in_place_ticket_count_; ++j) close_ticket(in_place_tickets_[j]);
  in_place_ticket_count_ = 0;
}

}  // namespace activekv::runtime_impl
