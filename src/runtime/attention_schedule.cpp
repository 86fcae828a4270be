// attention_schedule.cpp — a layer's pages, in ascending order, split into the calls of its passes.
#include "runtime/attention_schedule.hpp"

#include <algorithm>

#include "activekv/assert.hpp"

namespace activekv::runtime {

AttentionSchedule::AttentionSchedule(const AttentionScheduleLimits& limits) : limits_(limits) {
  AK_ASSERT(limits.entries_max > 0, "attention schedule: entries_max must be positive");
  AK_ASSERT(limits.pages_per_layer_max > 0, "attention schedule: pages_per_layer_max must be positive");
  const std::size_t pages_max = std::size_t{limits.entries_max} * limits.pages_per_layer_max;
  const std::size_t calls_max = std::size_t{limits.passes_max} + 1;
  context_pages_.resize(pages_max);
  context_keys_.resize(pages_max);
  context_call_.resize(pages_max);
  context_count_.resize(limits.entries_max);
  context_entry_.resize(limits.entries_max);
  context_first_.resize(limits.entries_max);
  calls_.resize(calls_max);
  tasks_.resize(calls_max * limits.entries_max);
  pages_.resize(pages_max);
  keys_.resize(pages_max);
  heads_.resize(pages_max);
  full_tasks_.resize(calls_max * limits.entries_max);
  full_pages_.resize(pages_max);
}

void AttentionSchedule::build(const StepPlan& plan, std::uint32_t layer, std::uint32_t page_tokens,
                              std::span<const std::uint32_t> query_first,
                              std::span<const std::uint32_t> query_count, std::span<const std::uint32_t> keep,
                              bool full) noexcept {
  const auto entries = static_cast<std::uint32_t>(plan.scheduled.size());
  AK_ASSERT(entries <= limits_.entries_max, "attention schedule: more entries than reserved");
  AK_ASSERT(plan.layers.size() >= std::size_t{layer + 1} * entries, "attention schedule: layer not in the plan");

  // This layer's passes are contiguous in the plan (a pass never mixes layers).
  pass_first_ = 0;
  pass_count_ = 0;
  for (std::uint32_t p = 0; p < plan.passes.size(); ++p) {
    if (plan.passes[p].layer != layer) continue;
    if (pass_count_ == 0) pass_first_ = p;
    AK_ASSERT(p == pass_first_ + pass_count_, "attention schedule: a layer's passes must be contiguous");
    ++pass_count_;
  }
  AK_ASSERT(pass_count_ <= limits_.passes_max, "attention schedule: more passes than reserved");
  const std::uint32_t final_call = pass_count_;

  // Each context's pages, ascending, tagged with the call that reads them.
  pages_staged_ = 0;
  pages_resident_ = 0;
  for (std::uint32_t i = 0; i < entries; ++i) {
    const LayerPlan& lp = plan.layers[std::size_t{layer} * entries + i];
    AK_ASSERT(lp.layer == layer, "attention schedule: plan.layers must be layer-major");
    const std::uint32_t n = (lp.length_tokens + page_tokens - 1) / page_tokens;
    AK_ASSERT(n <= limits_.pages_per_layer_max, "attention schedule: more pages than reserved");
    AttentionPage* pages = context_pages_.data() + std::size_t{i} * limits_.pages_per_layer_max;
    PageKey* keys = context_keys_.data() + std::size_t{i} * limits_.pages_per_layer_max;
    std::uint32_t* calls = context_call_.data() + std::size_t{i} * limits_.pages_per_layer_max;
    // One ascending walk over the layer plan's four sources (sink, promoted set, newest run,
    // staged copies), each sorted by logical page: O(pages + copies), no search per page.
    const std::uint32_t* promoted_logical = plan.promoted_logical_storage.data() + lp.promoted_offset;
    const std::uint32_t* promoted_page = plan.promoted_page_storage.data() + lp.promoted_offset;
    std::uint32_t promoted = 0;
    std::uint32_t copy = 0;
    // A window layer's pages below the first one its queries see are not read (not staged either):
    // the context's page list starts there, the same page for every budget.
    const std::uint32_t seen = plan.host->first_page_seen(layer, lp.length_before, page_tokens);
    AK_ASSERT(seen < n, "attention schedule: a window's first page lies below the step's last");
    while (promoted < lp.promoted_count && promoted_logical[promoted] < seen) ++promoted;
    // Entries are indexed by g − seen.
    for (std::uint32_t g = seen; g < n; ++g) {
      std::uint32_t pool_page = page_none;
      if (g == 0 && lp.sink_page != page_none) {
        pool_page = lp.sink_page;
      } else if (lp.run_count > 0 && g >= lp.run_first && g < lp.run_first + lp.run_count) {
        pool_page = plan.run_page(lp, g - lp.run_first);
      } else if (promoted < lp.promoted_count && promoted_logical[promoted] == g) {
        pool_page = promoted_page[promoted++];
      }
      const std::uint32_t first = g * page_tokens;
      const std::uint32_t tokens = std::min(page_tokens, lp.length_tokens - first);
      if (pool_page != page_none) {
        pages[g - seen] = AttentionPage{plan.page_pool_offset + std::uint64_t{pool_page} * plan.page_bytes, first, tokens};
        keys[g - seen] = PageKey{lp.slot, layer, g, false};
        calls[g - seen] = UINT32_MAX;  // decided below: the call of the next staged page above
        ++pages_resident_;
      } else {
        while (copy < lp.copy_count && plan.copies[lp.copy_first + copy].logical_first +
                                               plan.copies[lp.copy_first + copy].pages <= g) {
          ++copy;
        }
        AK_ASSERT(copy < lp.copy_count, "attention schedule: a page is neither resident nor staged");
        const StageCopy& c = plan.copies[lp.copy_first + copy];
        AK_ASSERT(g >= c.logical_first, "attention schedule: staged copies must ascend by logical page");
        AK_ASSERT(c.pass >= pass_first_ && c.pass < pass_first_ + pass_count_,
                  "attention schedule: a page is staged in another layer's pass");
        keys[g - seen] = PageKey{lp.slot, layer, g, true};
        if (in_place_) {  // its rows in the host pool, read by the final call
          pages[g - seen] = AttentionPage{c.host_offset + std::uint64_t{g - c.logical_first} * plan.page_bytes, first, tokens, true};
          calls[g - seen] = UINT32_MAX;
        } else {
          pages[g - seen] = AttentionPage{c.device_offset + std::uint64_t{g - c.logical_first} * plan.page_bytes, first, tokens};
          calls[g - seen] = c.pass - pass_first_;
        }
        ++pages_staged_;
      }
      if constexpr (ak_expensive_asserts) {
        [[maybe_unused]] const PageLocation loc = plan.locate(lp, g);
        AK_EXPENSIVE_ASSERT(loc.kind != PageLocation::Kind::absent &&
                                (pages[g - seen].host_pool || loc.device_offset == pages[g - seen].arena_offset),
                            "attention schedule: the walk disagrees with StepPlan::locate");
      }
    }
    // A resident page joins the call of the nearest staged page above it, or the final call.
    std::uint32_t next = final_call;
    for (std::uint32_t g = n; g-- > seen;) {
      if (calls[g - seen] == UINT32_MAX) {
        calls[g - seen] = next;
      } else {
        AK_ASSERT(calls[g - seen] <= next, "attention schedule: passes must follow ascending page order");
        next = calls[g - seen];
      }
    }
    context_count_[i] = n - seen;
    context_entry_[i] = lp.entry;
    context_first_[i] = seen;
  }

  // Calls in order; within a call, tasks in entry order, each a slice of its context's pages
  // (only the kept ones under a selection).
  const bool select = !keep.empty();
  AK_ASSERT(!select || keep.size() >= std::size_t{entries} * limits_.pages_per_layer_max,
            "attention schedule: a keep flag per context and page");
  const bool with_full = select && full;
  call_count_ = 0;
  task_count_ = 0;
  page_count_ = 0;
  full_task_count_ = 0;
  full_page_count_ = 0;
  // Read in place: no pass holds a page, one call reads them all.
  for (std::uint32_t c = in_place_ ? final_call : 0; c <= final_call; ++c) {
    AttentionCall& call = calls_[call_count_++];
    call = AttentionCall{c == final_call ? UINT32_MAX : pass_first_ + c, task_count_, 0, page_count_, 0};
    call.full_task_first = full_task_count_;
    call.full_page_first = full_page_count_;
    for (std::uint32_t i = 0; i < entries; ++i) {
      const std::uint32_t* ctx_calls = context_call_.data() + std::size_t{i} * limits_.pages_per_layer_max;
      const auto* begin = std::lower_bound(ctx_calls, ctx_calls + context_count_[i], c);
      const auto* end = std::upper_bound(begin, ctx_calls + context_count_[i], c);
      const auto count = static_cast<std::uint32_t>(end - begin);
      if (count == 0) continue;
      const auto from = static_cast<std::size_t>(begin - ctx_calls);
      const std::size_t base = std::size_t{i} * limits_.pages_per_layer_max + from;
      const std::uint32_t entry = context_entry_[i];
      if (with_full) {
        std::copy_n(context_pages_.data() + base, count, full_pages_.data() + full_page_count_);
        full_tasks_[full_task_count_++] =
            AttentionTask{full_page_count_ - call.full_page_first, count, query_first[entry], query_count[entry]};
        full_page_count_ += count;
      }
      std::uint32_t kept = 0;
      if (!select) {
        std::copy_n(context_pages_.data() + base, count, pages_.data() + page_count_);
        std::copy_n(context_keys_.data() + base, count, keys_.data() + page_count_);
        kept = count;
      } else {
        for (std::uint32_t j = 0; j < count; ++j) {
          const std::size_t k = base + context_first_[i] + j;  // keep is indexed by logical page
          if (keep[k] == 0) continue;
          pages_[page_count_ + kept] = context_pages_[base + j];
          keys_[page_count_ + kept] = context_keys_[base + j];
          heads_[page_count_ + kept] = keep[k];
          ++kept;
        }
        if (kept == 0) continue;
      }
      tasks_[task_count_++] = AttentionTask{page_count_ - call.page_first, kept, query_first[entry], query_count[entry]};
      page_count_ += kept;
    }
    call.task_count = task_count_ - call.task_first;
    call.page_count = page_count_ - call.page_first;
    call.full_task_count = full_task_count_ - call.full_task_first;
    call.full_page_count = full_page_count_ - call.full_page_first;
    AK_ASSERT(select || call.task_count > 0, "attention schedule: a call without tasks");
  }
}

}  // namespace activekv::runtime
