// attention_schedule.hpp — one dense layer's attention, cut into kernel calls over the tile passes.
//
// The planner stages every non-resident page of a layer into tile slots, in
// passes of at most `tiles` tiles (StepPlan::passes). Tiles are reused from
// pass to pass, so a page staged in pass p can only be read while pass p's
// bytes are in the tiles. This file turns one layer of a StepPlan into the
// kernel calls that read every page exactly once, in ascending page order:
//
//   call c < passes   the pages of pass c, plus the resident pages between the
//                     previous call's last page and pass c's last staged page
//   call = passes     the final call: every page left (the newest run and the
//                     tail pages), which writes the output
//
// For each context (task) the calls cover consecutive, ascending slices of its
// pages, so carrying the running softmax state from call to call (the backend's
// load_state / store_state) merges the partials in exactly the order one call
// over all pages would: the output is bit-identical for every split, that is,
// for every device budget (invariant 8). The rule that makes this possible is
// that the planner assigns staged pages to passes in ascending logical order
// within a context and layer; build() asserts it.
//
// Read in place (read_host_in_place(true), docs/IN_PLACE.md): a staged page's entry is its rows
// in the host pool (AttentionPage::host_pool) instead of its place in a tile, and every page of a
// context joins the final call: no tile, so no pass cuts the page list. The pages and their order
// are the same, so the output is the same bits.
//
// Plain data in preallocated storage: build() allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/planner.hpp"

namespace activekv::runtime {

struct AttentionCall {
  std::uint32_t pass = UINT32_MAX;  // global index into StepPlan::passes; UINT32_MAX: the final call
  std::uint32_t task_first = 0;     // into tasks()
  std::uint32_t task_count = 0;     // 0 only under a sparse selection: the pass runs, no kernel
  std::uint32_t page_first = 0;     // into pages(); tasks' page_begin are relative to this
  std::uint32_t page_count = 0;
  // With a selection and `full` asked: the same call over every page (measure mode), into
  // full_tasks() / full_pages().
  std::uint32_t full_task_first = 0, full_task_count = 0;
  std::uint32_t full_page_first = 0, full_page_count = 0;
  bool final() const noexcept { return pass == UINT32_MAX; }
};

// The identity of a page-table entry, parallel to pages(): where a score goes.
struct PageKey {
  std::uint32_t slot = 0;
  std::uint32_t layer = 0;
  std::uint32_t logical = 0;
  bool staged = false;
};

struct AttentionScheduleLimits {
  std::uint32_t entries_max = 0;          // contexts in one step
  std::uint32_t pages_per_layer_max = 0;  // logical pages of one context and layer
  std::uint32_t passes_max = 0;           // passes of one layer
};

class AttentionSchedule {
 public:
  explicit AttentionSchedule(const AttentionScheduleLimits& limits);

  // query_first[e], query_count[e]: the query rows of entry e in the step's q array.
  // keep (sparse attention): empty = every page; else [entries_max × pages_per_layer_max], by the
  // plan's entry order within the layer: page g of context i is read iff keep[i × max + g] != 0,
  // by the KV heads whose bits are set (heads(), parallel to pages(): the kernel's page_heads).
  // Pages not kept leave the tasks; the calls (and so the passes) stay. full: also the
  // unfiltered tasks (full_tasks(), full_pages()), for measuring the mass of every page.
  void build(const StepPlan& plan, std::uint32_t layer, std::uint32_t page_tokens,
             std::span<const std::uint32_t> query_first, std::span<const std::uint32_t> query_count,
             std::span<const std::uint32_t> keep = {}, bool full = false) noexcept;

  // Staged pages are read in place in the host pool (the backend's kernel reads it).
  void read_host_in_place(bool in_place) noexcept { in_place_ = in_place; }
  bool reads_host_in_place() const noexcept { return in_place_; }

  std::span<const AttentionCall> calls() const noexcept { return {calls_.data(), call_count_}; }
  std::span<const AttentionTask> tasks() const noexcept { return {tasks_.data(), task_count_}; }
  std::span<const AttentionPage> pages() const noexcept { return {pages_.data(), page_count_}; }
  std::span<const PageKey> keys() const noexcept { return {keys_.data(), page_count_}; }
  // Under a selection: each page's keep mask (the KV heads that read it); unset without one.
  std::span<const std::uint32_t> heads() const noexcept { return {heads_.data(), page_count_}; }
  std::span<const AttentionTask> full_tasks() const noexcept { return {full_tasks_.data(), full_task_count_}; }
  std::span<const AttentionPage> full_pages() const noexcept { return {full_pages_.data(), full_page_count_}; }
  // The global pass indices of this layer: [pass_first, pass_first + pass_count).
  std::uint32_t pass_first() const noexcept { return pass_first_; }
  std::uint32_t pass_count() const noexcept { return pass_count_; }
  std::uint32_t pages_staged() const noexcept { return pages_staged_; }
  std::uint32_t pages_resident() const noexcept { return pages_resident_; }
  std::uint32_t pages_in_place() const noexcept { return in_place_ ? pages_staged_ : 0; }  // of pages_staged()

 private:
  AttentionScheduleLimits limits_;
  // Per context of the layer: its pages in ascending order, tagged with their call.
  std::vector<AttentionPage> context_pages_;  // [entries_max × pages_per_layer_max]
  std::vector<PageKey> context_keys_;
  std::vector<std::uint32_t> context_call_;   // call index of each page
  std::vector<std::uint32_t> context_count_;  // pages per context
  std::vector<std::uint32_t> context_entry_;
  std::vector<std::uint32_t> context_first_;  // per context: its first logical page read (a window layer's)
  std::vector<AttentionCall> calls_;
  std::vector<AttentionTask> tasks_;
  std::vector<AttentionPage> pages_;
  std::vector<PageKey> keys_;
  std::vector<std::uint32_t> heads_;
  std::vector<AttentionTask> full_tasks_;
  std::vector<AttentionPage> full_pages_;
  std::uint32_t full_task_count_ = 0, full_page_count_ = 0;
  std::uint32_t call_count_ = 0, task_count_ = 0, page_count_ = 0;
  std::uint32_t pass_first_ = 0, pass_count_ = 0;
  std::uint32_t pages_staged_ = 0, pages_resident_ = 0;
  bool in_place_ = false;
};

}  // namespace activekv::runtime
