// kv_runtime_impl.hpp — the KV runtime's implementation class, shared by its source files.
//
// Private to src/runtime. The class is split by concept across:
//   kv_runtime.cpp            warm-up: the plan, the one allocation, every table sized
//   kv_runtime_admission.cpp  admission, retention and adoption of histories, leaving, reading
//   kv_runtime_step.cpp       one step: faults and fences, passes, uploads, attention, write-back
//   kv_runtime_sparse*.cpp    sparse attention: summaries, selection, scores, selective staging
// What it owns: the core's objects for one model (memory plan, arena view,
// decision log, budgets, policy, planner), the lease and ticket tables over the
// backend, and the per-step scratch (encoded rows, softmax state, attention
// schedule, scores). All of it is sized in create(); a step allocates nothing.
//
// The order of work in a step, and why it is safe:
//   begin_step   plan; issue layer 0's first pass (staging copies h2d, tickets
//                on the host ranges read, leases on the tile slots).
//   write_kv(l)  encode the new rows, upload them into their tail pages (h2d).
//   attend(l)    for each call of the layer's schedule: the pass's copy is
//                issued (if not yet); under a sparse selection the selected
//                pages the pass did not copy (it was issued on a prediction)
//                are copied now (kv_runtime_sparse_staging.cpp); the kernel is enqueued waiting ON THE
//                DEVICE for the pass's copy and the uploads, the host waits for
//                the kernel's own fence (the engine needs out on the host), and
//                the pass's tile leases are released — only now, because every
//                fence that touched them has signalled. The next pass may then
//                reuse the tiles. After the final call the changed tail rows go
//                back d2h, waiting on the kernel's fence on the device, and the
//                next layer's first pass is issued so its copy overlaps the
//                engine's work on that layer.
//   end_step     the host waits the write-back fences: nothing older than this
//                step is held only on the device. Tickets close; promotions land.
// A failed or unknown fence quarantines what it touched (tiles through the
// leases, host ranges through the tickets, promotion targets in the page
// pool), marks the step's contexts faulted and makes the step report an error:
// no output produced from bytes that did not arrive is returned as good.
#pragma once

#include "activekv/kv_runtime.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "activekv/arena.hpp"
#include "activekv/backend.hpp"
#include "activekv/decision_log.hpp"
#include "activekv/lease.hpp"
#include "activekv/planner.hpp"
#include "activekv/policy.hpp"
#include "runtime/attention_schedule.hpp"
#include "runtime/element_codec.hpp"
#include "runtime/prefix_cache.hpp"
#include "runtime/prefix_index.hpp"
#include "runtime/page_scores.hpp"
#include "runtime/sparse_selection.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::runtime_impl {

using runtime::AttentionCall;
using runtime::AttentionSchedule;
using runtime::AttentionScheduleLimits;

inline std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Adds the scope's duration to a counter.
class ScopedTimer {
 public:
  explicit ScopedTimer(std::uint64_t& sink) noexcept : sink_(sink), start_(now_ns()) {}
  ~ScopedTimer() { sink_ += now_ns() - start_; }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  std::uint64_t& sink_;
  std::uint64_t start_;
};

// The calling thread's CPU time over a scope, added to `sink` (against ScopedTimer's wall time it
// tells work from waiting for a core).
class ThreadCpuTimer {
 public:
  explicit ThreadCpuTimer(std::uint64_t& sink) noexcept : sink_(sink), start_(now()) {}
  ~ThreadCpuTimer() { sink_ += now() - start_; }
  ThreadCpuTimer(const ThreadCpuTimer&) = delete;
  ThreadCpuTimer& operator=(const ThreadCpuTimer&) = delete;

 private:
  static std::uint64_t now() noexcept {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
  }
  std::uint64_t& sink_;
  std::uint64_t start_;
};

// One public step call: its wall time, and the heap allocations made (by any thread) while it
// ran — invariant 7 says there are none after warm-up; the counter makes it visible in reports.
class StepScope {
 public:
  explicit StepScope(KvCounters& counters) noexcept
      : counters_(counters), start_(now_ns()), heap_(testing::heap_allocations()) {}
  ~StepScope() {
    counters_.step_ns += now_ns() - start_;
    counters_.heap_allocations_in_steps += testing::heap_allocations() - heap_;
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  KvCounters& counters_;
  std::uint64_t start_;
  std::uint64_t heap_;
};

// What went wrong in a step, as static text (no allocation until reported).
struct Fault {
  const char* what = nullptr;
  FenceOutcome outcome = FenceOutcome::signalled;
  std::uint32_t layer = UINT32_MAX;
};

// Selective staging's tally per context: one column per KvCounters::pages_stage_* counter, in order.
inline constexpr std::uint32_t stage_columns = 5;

// Every capacity a step may reach, derived once from the settings and the plan.
struct Sizes {
  std::uint32_t entries_max = 0;           // contexts in one step
  std::uint32_t tokens_max = 0;            // new tokens in one step
  std::uint32_t pages_per_layer_max = 0;   // logical pages of one context and layer (+1 for a partial tail)
  std::uint32_t pages_max = 0;             // page-table entries of one layer, all contexts
  std::uint32_t copies_per_pass_max = 0;   // a pass fills at most tiles × tile_pages pages
  std::uint32_t write_backs_max = 0;       // tail regions of one step, all layers
  std::uint32_t tickets_max = 0;           // one pass's reads + one step's write-backs + a layer's in-place reads
  std::uint32_t promotions_max = 0;

  static Sizes of(const KvRuntimeSettings& settings, const MemoryPlan& plan) {
    Sizes s;
    s.entries_max = std::max(1u, settings.step_entries_max != 0 ? settings.step_entries_max : plan.budget.concurrency);
    s.tokens_max = settings.step_tokens_max != 0 ? settings.step_tokens_max : s.entries_max * plan.chunk_tokens;
    s.pages_per_layer_max = plan.budget.pages_per_layer_max + 1;
    s.pages_max = checked(std::uint64_t{s.entries_max} * s.pages_per_layer_max);
    s.copies_per_pass_max = std::max(1u, plan.arena.tiles * plan.arena.tile_pages);
    const std::uint64_t tails = pages_spanned_max(plan.chunk_tokens, plan.arena.page_tokens) + 1u;
    s.write_backs_max = checked(std::uint64_t{s.entries_max} * plan.geometry.dense_layers * tails);
    // + one per context: a layer's reads in place (kv_runtime_in_place.cpp).
    // + one per context: its state checkpoint (kv_runtime_state.cpp).
    s.tickets_max = checked(std::uint64_t{s.copies_per_pass_max} + s.write_backs_max + 2ull * s.entries_max);
    s.promotions_max = checked(std::uint64_t{s.pages_max} * plan.geometry.dense_layers);
    return s;
  }
  static std::uint32_t checked(std::uint64_t value) {
    AK_ASSERT(value <= UINT32_MAX, "kv runtime: a table size overflows 32 bits");
    return static_cast<std::uint32_t>(value);
  }
};

class KvRuntimeImpl final : public KvRuntime {
 public:
  KvRuntimeImpl(const KvRuntimeSettings& settings, const MemoryPlan& plan, Backend& backend);
  Status warm_up();

  const MemoryPlan& plan() const noexcept override { return plan_; }
  Result<AdmitResult> open_context(std::uint64_t request_id, std::uint32_t tokens_max) override {
    std::uint32_t reused = 0;
    return open_context(request_id, tokens_max, {}, reused);
  }
  Result<AdmitResult> open_context(std::uint64_t request_id, std::uint32_t tokens_max,
                                   std::span<const std::int32_t> prompt, std::uint32_t& reused_tokens) override;
  std::uint32_t take_admitted(std::span<AdmitResult> out) override;
  void finish(ContextId context) override;
  void finish_retaining(ContextId context, std::span<const std::int32_t> tokens) override;
  void offer_prefix(ContextId context, std::span<const std::int32_t> tokens) override;
  void offer_running(ContextId context, std::span<const std::int32_t> tokens) override;
  void cancel(ContextId context) override;
  bool running(ContextId context) const override { return budgets_.current(context); }
  std::uint32_t length(ContextId context) const override;
  bool faulted(ContextId context) const override;

  Status begin_step(std::span<const StepEntry> entries) override;
  std::uint32_t position_first(std::uint32_t entry) const override;
  Status write_kv(std::uint32_t layer, const float* k, const float* v) override;
  Status attend(std::uint32_t layer, const float* q, float* out) override;
  Status attend_none(std::uint32_t layer) override;
  Status end_step() override;

  std::span<const std::byte> host_row(ContextId context, std::uint32_t layer, std::uint32_t token) const override;
  const KvCounters& counters() const override { return counters_; }
  const SparseStats& sparse_stats() const override { return sparse_stats_; }
  void reset_sparse_stats() override {
    sparse_stats_ = SparseStats{};
    head_pages_read_ = 0;
  }
  Status set_sparse(const SparseSettings& sparse) override;
  void set_parallel(const ParallelChunks& parallel) override;
  bool attention_borrows_threads() const override { return attention_borrows_; }
  Explanation explain(ContextId context) const override;
  const DecisionLog& decision_log() const override { return log_; }
  std::uint32_t sparse_rank(ContextId context, std::uint32_t layer, std::uint32_t group,
                            std::uint32_t logical) const override;
  const char* check() const override;
  std::uint32_t pages_free() const override { return arena_.pages().pages_free(); }
  std::uint32_t pages_total() const override { return arena_.pages().pages_total(); }
  std::uint32_t pages_quarantined() const override { return arena_.pages().pages_quarantined(); }
  std::uint32_t histories_free() const override { return budgets_.histories_free(); }
  bool may_admit_now() const override { return budgets_.admits_now(); }
  Reason admission_wait() const override { return budgets_.admission_wait(); }
  bool prepare_tier(std::span<const std::int32_t> prompt) override;
  bool prefetch_tier(std::span<const std::int32_t> prompt) override;
  void drop_tier(std::span<const std::int32_t> prompt) override;
  std::uint32_t release_tier_leases() override;
  bool wait_tier(std::uint32_t timeout_ms) override { return tier_ != nullptr && tier_->wait(timeout_ms); }
  std::uint32_t histories_retired() const override { return budgets_.histories_retired(); }
  std::uint32_t tiles_usable() const override { return leases_.buffers() - leases_.count(LeaseState::quarantined); }
  void release_retained() override;
  Result<std::span<std::byte>> recurrent_state(ContextId context) override;
  void note_prompt(ContextId context, std::uint32_t prompt_tokens) override;
  std::uint32_t tokens_to_checkpoint(ContextId context) const override;

 private:
  static std::unique_ptr<ResidencyPolicy> make_policy(const KvRuntimeSettings& settings);
  std::uint32_t entries() const noexcept { return static_cast<std::uint32_t>(planner_.plan().scheduled.size()); }
  const LayerPlan& layer_plan(std::uint32_t layer, std::uint32_t entry) const noexcept {
    return planner_.plan().layers[std::size_t{layer} * entries() + entry];
  }
  void note_fault(const char* what, FenceOutcome outcome, std::uint32_t layer) noexcept;
  // A call the backend refused: the fault, with the backend's message kept for the report.
  void note_refusal(const char* what, const Error& error, std::uint32_t layer);
  Status fault_status() const;
  // Waits on the host for one fence; a failure or timeout is noted as a fault.
  // The time waited goes to attention_ns (kernels) or copy_wait_ns (copies).
  FenceOutcome wait(Fence fence, const char* what, std::uint32_t layer, bool kernel = false) noexcept;
  void release_fence(Fence& fence) noexcept;
  // Pass p: tickets on the host ranges, leases on the tiles, one batched h2d, the promotions.
  bool issue_pass(std::uint32_t pass) noexcept;
  // After the pass's kernel: wait its copies and promotions, close tickets, release leases.
  void retire_pass() noexcept;
  // Issues the plan's next pass if it belongs to `layer` and the tiles are free.
  void issue_next_pass_of(std::uint32_t layer) noexcept;
  // Read in place (settings_.read_in_place; kv_runtime_in_place.cpp): the layer's passes are not
  // copied. open_in_place: a read ticket per context on the host range its staged pages span, and
  // the passes' promotions copied host to pool; attach_in_place: the kernel that reads the range
  // joins the tickets; close_in_place: after the kernel's wait, the promotions waited and the
  // tickets closed (still pending: at the first poll that sees them signalled).
  bool open_in_place(std::uint32_t layer) noexcept;
  void attach_in_place(Fence kernel, std::uint32_t layer) noexcept;
  void close_in_place(std::uint32_t layer) noexcept;
  bool issue_in_place_promotions(std::uint32_t pass_first, std::uint32_t pass_end) noexcept;
  // The layer's tail rows, device to host, after `waits` (the kernel, or the uploads) on the device.
  void write_back(std::uint32_t layer, std::span<const Fence> waits) noexcept;
  // Waits the layer's row uploads; a tail page whose upload failed is quarantined.
  void retire_uploads(std::uint32_t layer) noexcept;
  void finish_promotions() noexcept;
  // Closes a ticket whose fences were waited; one still pending (a timed-out wait, already a
  // fault) closes at the first poll that sees its fences resolve.
  void close_ticket(Ticket ticket) noexcept;
  void apply_deferred_cancels() noexcept;
  // A history whose host range holds a quarantined copy is retired as its context leaves.
  bool history_quarantined(std::uint32_t slot) const noexcept;
  // A context leaves its slot (finish or cancel): its policy state, its pages and its history go.
  void leave(ContextId context, bool finished) noexcept;

  // ---- prefix reuse (kv_runtime_admission.cpp; docs/PREFIX.md) ----
  // A context was admitted into `context.slot`: it adopts `match` (in place or copied) or the
  // slot's own retained prefix, if any, is dropped. Returns the tokens adopted.
  // device_pages: the retained device pages the budget manager handed over with the history.
  std::uint32_t settle_admission(ContextId context, runtime::PrefixMatch match, std::uint32_t device_pages) noexcept;
  // Window layers: a match the source history's host rings no longer cover becomes no match.
  runtime::PrefixMatch clamp_to_rings(runtime::PrefixMatch match) noexcept;
  bool rings_cover(runtime::PrefixMatch match) const noexcept;  // clamp_to_rings' test, without counting
  runtime::PrefixMatch adoptable_prefix(std::span<const std::int32_t> prompt, bool* in_place = nullptr) const noexcept;
  // Mirrors the budget manager's retained-device-page counters into counters_.
  void sync_retained_counters() noexcept;
  // ---- device retention (device_retention.cpp; docs/PREFIX.md, "Device side") ----
  // Copy on adopt: the source history's pages of logical page < `pages` that are resident on the
  // device (final: owned) are copied device to device into pages of the context in `slot`, on the
  // d2d queue; every queue that could write a pool page or read the copied ones waits for the copy
  // on the device. Returns the pages copied (0: none resident, no room, or no d2d).
  std::uint32_t copy_prefix_on_device(ContextId context, std::uint32_t source, std::uint32_t pages) noexcept;
  template <typename Place>
  void copy_promoted_on_device(ContextId context, std::uint32_t source, std::uint32_t layer, std::uint32_t below,
                               std::uint32_t& n, Place& place) noexcept;
  // Waits the device copies of copy on adopt on the host (they are on a copy queue) and lands
  // their pages; a failed or unknown fence quarantines them (a tail page faults its context).
  void retire_device_copies() noexcept;
  // The slot's retained prefix leaves the index: counted and logged with `reason`.
  void drop_retained(std::uint32_t slot, Reason reason) noexcept;
  // Drops every retained prefix whose history was taken by a context that did not adopt it
  // (admissions from the queue inside finish/cancel).
  void sweep_retained() noexcept;
  void record_prefix(DecisionKind kind, Reason reason, std::uint32_t slot, std::uint32_t pages,
                     std::uint32_t other_slot = UINT32_MAX) noexcept;

  KvRuntimeSettings settings_;
  MemoryPlan plan_;
  Sizes sizes_;
  Backend& backend_;
  Arena arena_;
  DecisionLog log_;
  BudgetManager budgets_;
  std::unique_ptr<ResidencyPolicy> policy_;
  ResidencyPlanner planner_;
  StagingLeases leases_;
  CopyTickets tickets_;
  AttentionSchedule schedule_;
  AttentionShape shape_{};
  std::uint64_t device_allocations_baseline_ = 0;

  // ---- per-step state, all reserved at warm-up ----
  bool step_open_ = false;
  std::uint32_t layers_written_ = 0;   // write_kv(l) done for l < layers_written_
  std::uint32_t layers_attended_ = 0;  // attend(l) done for l < layers_attended_
  std::uint32_t total_new_ = 0;
  std::vector<ScheduledContext> scheduled_;
  std::vector<std::uint32_t> query_first_, query_count_;
  std::vector<std::uint32_t> positions_;      // [step_tokens_max]
  std::vector<std::byte> rows_;               // [step_tokens_max × row_bytes]: one layer's encoded rows
  std::vector<float> state_;                  // [step_tokens_max × q_heads × (2 + head_dim)]
  std::vector<float> page_mass_;              // [pages of one call]
  std::vector<PageScore> scores_;
  std::vector<Fence> uploads_;                // this layer's row uploads
  std::vector<std::uint32_t> upload_pages_;   // the tail pool page each upload writes
  std::uint32_t upload_count_ = 0;
  std::vector<Fence> waits_;
  std::vector<CopyRegion> regions_;
  std::vector<Fence> write_backs_;            // [dense_layers]: d2h fences, waited in end_step
  std::vector<Ticket> write_back_tickets_;    // [write-backs of a step]
  std::uint32_t write_back_ticket_count_ = 0;
  // The pass in flight (issued, not yet retired).
  std::uint32_t pass_issued_ = UINT32_MAX;
  std::uint32_t passes_issued_ = 0;           // passes [0, passes_issued_) of the plan are issued
  Fence pass_copy_{}, pass_d2d_{};
  std::vector<Lease> pass_leases_;            // [tiles]
  std::uint32_t pass_lease_count_ = 0;
  std::vector<Ticket> pass_tickets_;          // [copies in one pass]
  std::uint32_t pass_ticket_count_ = 0;
  // Read in place: the layer's tickets (one per context) and its promotions' h2d copy in flight.
  std::vector<Ticket> in_place_tickets_;      // [entries]
  std::uint32_t in_place_ticket_count_ = 0;
  Fence in_place_promotion_{};
  std::uint32_t in_place_pass_first_ = 0, in_place_pass_end_ = 0;  // the passes whose promotions it carries
  std::vector<std::uint8_t> promotion_failed_;  // [promotions of a step]
  std::vector<std::uint8_t> slot_faulted_;      // [slots]
  std::vector<ContextId> deferred_cancels_;
  std::uint32_t deferred_cancel_count_ = 0;
  Fault fault_{};
  bool stalled_ = false;       // a fence did not resolve in time: no step may follow
  std::string backend_error_;  // the backend's own words for a refused call (error path only)
  KvCounters counters_{};
  SparseStats sparse_stats_{};

  // ---- sparse attention (docs/SPARSE.md): null summaries when created exact ----
  // Summaries of each history's pages, valid up to summarized_tokens_[slot] for the context
  // whose generation + 1 is summarized_generation_[slot] (else rebuilt from the host rows).
  std::unique_ptr<runtime::PageSummaries> summaries_;
  std::vector<std::uint32_t> summarized_generation_, summarized_tokens_;  // [slots]
  std::vector<float> key_row_;                 // [kv_heads × head_dim]: one decoded key row
  std::vector<float> bounds_;                  // [kv_heads × pages_per_layer_max]
  std::vector<float> q_positive_, q_negative_; // [q_heads × head_dim]: the decode query, split
  std::unique_ptr<runtime::SelectionScratch> selection_;
  std::vector<std::uint32_t> selected_;        // [pages_per_layer_max]
  std::vector<std::uint32_t> keep_;            // [entries_max × pages_per_layer_max]: KV heads reading each page
  bool per_group_ = false;                     // per-KV-head page lists this step (settings and backend)
  std::uint32_t all_heads_ = 0;                // the mask of every KV head
  std::uint64_t head_pages_read_ = 0;          // Σ (page, KV head) pairs read, for pages_read
  std::vector<std::uint8_t> heavy_flags_;      // [pages_per_layer_max]
  std::vector<float> heavy_;                   // [slots × layers × pages_per_layer_max]: decayed page mass
  // The last step's selection per (slot, layer, page): rank (UINT32_MAX: not read) and bound.
  std::vector<std::uint32_t> pick_rank_;
  std::vector<float> pick_bound_;
  // Per-group lists: [slots × layers × kv_heads × pages_per_layer_max], each group's rank and bound.
  std::vector<std::uint32_t> pick_group_rank_;
  std::vector<float> pick_group_bound_;
  std::vector<std::uint8_t> pick_per_group_;   // [slots]: the last selection was per group
  std::vector<std::uint32_t> pick_pages_;      // [slots × layers]: pages the context held
  std::vector<std::uint64_t> pick_step_;       // [slots]: the step of the last selection
  // Adaptive budget per slot: the budget (pages), the slow average of the captured mass.
  std::vector<float> budget_pages_, captured_slow_;
  std::vector<float> layer_captured_;          // [slots × layers]: running average of each layer's captured mass
  std::vector<float> layer_captured_step_;     // [entries_max × layers]: this step's, < 0 unknown (applied at end_step)
  // Per entry of the step: Σ captured-mass estimate over layers, layers counted, selection width.
  std::vector<double> captured_sum_;
  std::vector<std::uint32_t> captured_layers_, fill_, unselected_, tail_count_;
  std::vector<float> tail_mass_;
  std::vector<std::uint32_t> entry_of_slot_;   // [slots]: this step's entry, UINT32_MAX if none
  std::vector<float> full_state_;              // measure mode: the softmax state over every page

  // ---- staging under a sparse selection (kv_runtime_sparse_staging.cpp; docs/SPARSE.md "Staging") ----
  // The step stages selectively: sparse on, SparseSettings::staging not every, not measure mode,
  // not read in place. Decided in begin_step for the whole step.
  bool stage_tally_ = false;      // sparse on, staging through the tiles: tile_fill_ is kept and tallied
  bool stage_selective_ = false;
  bool defer_passes_ = false;     // SparseSettings::staging selected with a decode entry: passes wait for the query
  std::uint32_t selection_layer_ = UINT32_MAX;  // the layer whose selection keep_ holds this step
  // Per tile page ([tiles × tile_pages]) in the pass in flight: how it was filled (TileFill).
  std::vector<std::uint8_t> tile_fill_;
  std::vector<std::uint32_t> tile_copy_;        // [tiles × tile_pages]: the pass's copy (index in the pass) holding the tile page
  std::vector<std::uint8_t> copy_filled_;       // [copies in one pass]: 1 some page copied at issue, 2 some page missed
  Fence pass_miss_{};                           // the misses' copy of the pass in flight
  // The last selection per (slot, layer, page): read by some KV head (the prediction); valid for
  // the context whose generation + 1 is predict_generation_[slot].
  std::vector<std::uint8_t> last_read_;
  std::vector<std::uint32_t> predict_generation_;  // [slots]
  std::vector<std::uint8_t> pick_staging_;      // [slots × layers × pages_per_layer_max]: PickStaging of a read page
  std::vector<std::uint32_t> stage_last_;       // [slots × stage_columns]: the context's last step's pages_stage_*
  // begin_step: whether the step stages selectively; resets the per-step state.
  void begin_sparse_staging() noexcept;
  // issue_pass: marks in tile_fill_ the pass's tile pages to copy (all, the selection, or the
  // prediction, and always a promotion's source); returns the copy regions built into regions_
  // with their tickets opened into pass_tickets_ (false: a ticket refused, a fault noted).
  bool plan_pass_copies(std::uint32_t pass, std::uint32_t& regions) noexcept;
  bool page_wanted(std::uint32_t layer, std::uint32_t slot, std::uint32_t logical, bool& predicted) const noexcept;
  // attend, before a pass's kernel: copies the selected pages the pass did not fill (misses), then
  // tallies the pass's pages (read and why, copied unread, skipped). False: a fault was noted.
  bool stage_misses(const AttentionCall& call, std::uint32_t layer) noexcept;
  // attended false (attend_none): no kernel read the pass; its pages were copied unread or skipped.
  void tally_pass(std::uint32_t pass, std::uint32_t layer, bool attended) noexcept;
  void finish_sparse_staging() noexcept;
  void note_pages_in_place(std::uint32_t layer) noexcept;  // read in place: the layer's read staged pages, for explain  // end_step: the step's tallies join the counters
  // A fence that fills (copy) or reads (kernel, d2d) the pass's tiles joins their leases.
  void attach_pass_leases(Fence fence, bool fills) noexcept;
  // Whether layer `layer`'s first pass waits for its query (SparseStaging::selected).
  bool defer_pass_of(std::uint32_t layer) const noexcept;
  std::uint32_t tile_position(std::uint64_t device_offset) const noexcept;
  double recall_step_sum_ = 0.0;
  std::uint64_t recall_step_count_ = 0;
  // write_kv: the layer's new keys join their pages' summaries (rebuilt first when stale).
  void summarize_rows(std::uint32_t layer);
  void add_key(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const std::byte* row) noexcept;
  void upload_summaries(std::uint32_t layer, std::uint64_t offset, std::uint64_t bytes);
  ParallelChunks parallel_;  // threads the selection's bound may borrow (set_parallel)
  bool attention_borrows_ = false;  // the backend's kernel runs on parallel_ too
  // The bound of `n` pages of one entry and layer, all KV heads, cut into chunks of pages over
  // parallel_'s threads (one thread without them, or for few pages): the same bits either way.
  // When the setting uses the moments, the same chunks also give each query head's moments'
  // log-mass of the pages (into score_scratch_, [q_heads][pages_per_layer_max]).
  void sparse_bounds(std::uint32_t layer, std::uint32_t e, const float* qe, std::uint32_t n, float* out,
                     std::size_t out_stride) noexcept;
  std::vector<Fence> summary_uploads_;  // [entries_max]: the layer's summary uploads (waited with its rows)
  // Scores other than the bound (kv_runtime_sparse_score.cpp): storage reserved for a setting,
  // a page emptied (summary and moments), a key's moments, and a decode entry's per-group
  // scores written over its bounds (out + group × stride) when the setting asks.
  Status prepare_scores(const SparseSettings& sparse);
  void clear_page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept;
  void add_moments(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const std::byte* row,
                   bool decoded) noexcept;
  void score_pages(std::uint32_t layer, std::uint32_t e, const float* qe, std::uint32_t n, float* out,
                   std::size_t stride) noexcept;
  std::unique_ptr<runtime::PageMoments> moments_;  // score moments: per page and KV head, Σk and Σk²
  std::vector<float> score_scratch_;           // the moments' log-mass: [q_heads × pages_per_layer_max]
  // per_head: each query head's own score of every page ([q_heads × pages_per_layer_max]) and
  // one head's moments' mass ([pages_per_layer_max]).
  void head_scores(std::uint32_t layer, std::uint32_t e, const float* qe, std::uint32_t n) noexcept;
  std::vector<float> head_scores_, head_mass_;
  std::vector<float> moment_mass_;             // the moments' mass of an entry's layer: [kv_heads × pages_per_layer_max]
  // Layer budgets following the moments' estimate (LayerSignal::moments): the estimated captured
  // mass of a selection (moment_mass_ after score_pages; keep_ the selection's head masks), the
  // mean over the groups; per entry this layer's (moment_captured_, 1 when every page is read).
  static bool moment_signal(const SparseSettings& s) noexcept {
    return s.layer_budget && s.layer_signal == LayerSignal::moments;
  }
  static bool moments_wanted(const SparseSettings& s) noexcept {
    return s.score == SparseScore::moments || s.score == SparseScore::mixed || moment_signal(s);
  }
  float moment_captured(const std::uint32_t* keep, std::uint32_t n, bool per_group) const noexcept;
  std::vector<float> moment_captured_;         // [entries_max]
  std::vector<std::uint32_t> pick_budget_;     // [slots × layers]: the last selection's budget (explain)
  std::vector<float> oracle_scores_;           // score oracle: [q_heads × tokens of a layer]
  std::uint32_t summary_upload_count_ = 0;
  // attend: chooses each decode entry's pages into keep_; false when every page is read.
  bool select_sparse(std::uint32_t layer, const float* q) noexcept;
  std::uint32_t sparse_budget(std::uint32_t slot, std::uint32_t layer, std::uint32_t pages) noexcept;
  // attend: the kernel's per-page mass of a call joins the heavy-hitter scores and the estimate.
  void note_page_mass(std::span<const runtime::PageKey> keys, std::span<const float> mass) noexcept;
  // attend, after the layer's calls: each decode entry's captured mass (exact in measure mode,
  // else estimated), for the statistics and the adaptive rule.
  void note_captured_mass(std::uint32_t layer, bool measured, bool estimated) noexcept;
  // end_step: the adaptive budgets move; the step's statistics close.
  void finish_sparse_step() noexcept;
  // explain: the last selection's pages, bounds and ranks (off the step path: it allocates).
  void explain_sparse(ContextId context, Explanation& e) const;

  // ---- recurrent state (kv_runtime_state.cpp; state_plan.hpp): empty without recurrent state ----
  void init_state();                                   // constructor: every table sized
  std::span<std::byte> state_bytes(std::uint32_t recurrent_slot) noexcept;
  void bind_state(ContextId context) noexcept;         // admission: a free slot, zeroed
  void release_state(std::uint32_t slot) noexcept;     // leaving: the slot goes back
  void drop_checkpoints(std::uint32_t slot, std::uint32_t above_tokens) noexcept;
  // The newest checkpoint position of history `slot` at or below `tokens` (0: none), its index.
  std::uint32_t checkpoint_before(std::uint32_t slot, std::uint32_t tokens, std::uint32_t* index) const noexcept;
  // Admission: a match cut down to the newest checkpoint at or before it (whole pages).
  runtime::PrefixMatch clamp_to_checkpoint(runtime::PrefixMatch match) noexcept;
  // Admission: the adopted length's checkpoint (of history from_slot) into the context's slot;
  // false when a copy failed (counted; the context is then faulted).
  bool restore_state(ContextId context, std::uint32_t from_slot, std::uint32_t tokens) noexcept;
  std::uint32_t checkpoint_index(std::uint32_t slot, std::uint32_t tokens) const noexcept;
  void checkpoint_states() noexcept;                   // end_step: page boundaries reached → host
  const char* check_state() const noexcept;
  void explain_state(ContextId context, Explanation& e) const;
  std::vector<std::uint32_t> state_slot_;        // [history slots]: its running context's recurrent slot (UINT32_MAX: none)
  std::vector<std::uint32_t> state_free_;        // [device slots]: a stack of free recurrent slots
  std::uint32_t state_free_count_ = 0;
  std::vector<std::uint32_t> checkpoint_pos_;    // [history slots × checkpoints]: position held (UINT32_MAX: none)
  std::vector<std::uint32_t> prompt_checkpoint_; // [history slots]: the prompt's checkpoint position (0: none)
  std::vector<std::uint32_t> state_restored_;    // [history slots]: the running context's restored position (explain)
  std::vector<Ticket> state_tickets_;            // [entries_max]: one step's checkpoint copies
  std::vector<Fence> state_fences_;
  std::vector<std::uint64_t> state_pending_;     // entry << 32 | checkpoint index

  // ---- prefix reuse: null index when off ----
  struct Adoption {
    std::uint32_t pages = 0;             // logical pages 0 .. pages − 1 of every layer came from a retained prefix
    bool copied = false;                 // copied from a running context's history (else adopted in place)
    std::uint64_t from_request = 0;      // the request whose history held them
    std::uint32_t device_pages = 0;      // device pool pages handed over with the history (in place only)
    std::uint32_t device_copied = 0;     // device pool pages copied d2d from the source history's resident pages
    std::uint32_t device_promoted = 0;   // of them, the source's promoted pages (below its run), promoted here
    std::uint32_t tier_pages_first = 0;  // pages [tier_pages_first, tier_pages_end) were restored from the tier
    std::uint32_t tier_pages_end = 0;
    std::uint32_t cache_pages_first = 0; // pages [cache_pages_first, cache_pages_end) were copied from the prefix cache
    std::uint32_t cache_pages_end = 0;
    std::uint32_t cache_shared = 0;      // cached prefixes sharing the first of them
    std::uint32_t cache_partial_rows = 0;  // rows of the partial page cache_pages_end copied from the cache too
    std::uint32_t cache_ring_cut = 0;      // matched cache pages not adopted: window rows missing (prefix_cache_ring_cut)
    std::uint32_t cache_state_cut = 0;     // matched cache pages not adopted: no cached state there (prefix_cache_state_cut)
    std::uint32_t tier_ring_cut = 0;       // accepted tier pages not restored: window rows missing (tier_ring_cut)
    std::uint32_t tier_state_cut = 0;      // accepted tier pages not restored: no state at a later block end (tier_state_cut)
  };
  KvTierPort* tier_ = nullptr;
  std::vector<std::span<std::byte>> tier_segments_;         // [dense layers] scratch: one history's segments
  std::vector<std::span<const std::byte>> tier_csegments_;  // [dense layers] the same, read-only
  std::vector<std::uint32_t> tier_generation_;              // per slot: the generation when reserved for a lookup
  std::vector<TierState> tier_states_;                      // [checkpoints] scratch: a finished history's states
  std::vector<std::uint32_t> tier_offered_blocks_;          // per slot: blocks below this were adopted or offered while running
  // Admission: the history a ready lookup wrote this prompt's blocks into, while it is still free and
  // untouched since (kv_runtime_tier.cpp); UINT32_MAX when there is none.
  std::uint32_t tier_ready_history(std::span<const std::int32_t> prompt, std::uint32_t reused) noexcept;
  std::uint32_t restore_from_tier(std::uint32_t slot, std::span<const std::int32_t> prompt, std::uint32_t reused,
                                  std::uint32_t tier_slot) noexcept;
  void note_tier_cuts(std::uint32_t slot, const TierAdoptCut& cut, std::uint32_t reused) noexcept;
  // The history's segments (rings for window layers) into tier_csegments_ and its state checkpoints
  // into tier_states_; returns how many states.
  std::uint32_t tier_history_views(std::uint32_t slot) noexcept;
  // The prompt's whole blocks [first, end) the tier may give past `reused` local tokens; false: none.
  bool tier_blocks(std::span<const std::int32_t> prompt, std::uint32_t reused, std::uint32_t& first,
                   std::uint32_t& end) const noexcept;
  runtime::PrefixMatch local_prefix(std::span<const std::int32_t> prompt) const noexcept;
  // ---- the host prefix cache (kv_runtime_prefix_cache.cpp; null without one) ----
  std::unique_ptr<runtime::PrefixCache> cache_;
  Status create_prefix_cache();  // warm-up, once the host pool is allocated
  // The prompt's full pages the cache holds, at most the pages a prompt may adopt, cut back to the
  // longest prefix whose window rows it holds (window layers); the match before the cut in
  // cache_matched_pages_.
  std::uint32_t cache_prefix_pages(std::span<const std::int32_t> prompt) noexcept;
  std::uint32_t cache_matched_pages_ = 0;
  std::uint32_t cache_window_pages_ = 0;  // after the window cut, before the state cut
  std::uint32_t cache_state_covered(std::uint32_t n) const noexcept;
  void offer_states_to_cache(std::uint32_t slot) noexcept;
  std::uint32_t window_first_page(std::uint32_t q) const noexcept;
  std::uint32_t cache_ring_covered(std::uint32_t n) const noexcept;
  // Tokens the host holds for `prompt`: the longest of the local match and the cache's (the tier starts there).
  std::uint32_t host_prefix_tokens(std::span<const std::int32_t> prompt, runtime::PrefixMatch match) noexcept;
  // finish_retaining: the history's full pages go into the cache (new ones copied, the rest shared).
  void offer_to_cache(std::uint32_t slot, std::span<const std::int32_t> tokens) noexcept;
  // Admission: the prompt's pages past `reused` that the cache holds are copied into the history.
  std::uint32_t restore_from_cache(std::uint32_t slot, std::span<const std::int32_t> prompt, std::uint32_t reused) noexcept;
  // Admission, last: when the host holds every full page below the prompt's last token, the first
  // rows of the prompt's partial last page, from a cached page a finished answer filled; the page
  // goes to the device with them (an h2d copy the first step waits for). Returns the new length.
  std::uint32_t adopt_partial_page(ContextId context, std::span<const std::int32_t> prompt, std::uint32_t reused) noexcept;
  void sync_cache_counters() noexcept;
  std::unique_ptr<runtime::PrefixIndex> prefix_;
  std::vector<std::uint32_t> retained_generation_;  // per slot: the context generation the retained prefix belongs to
  std::vector<std::uint64_t> retained_request_;     // per slot: the request that wrote it
  std::vector<Adoption> adoption_;                  // per slot: what the running context adopted
  std::uint64_t retain_stamp_ = 0;
  // Copies on adopt in flight on the device: each holds its fence (the lease on the pages it reads
  // and writes) until retire_device_copies() sees it resolve. Sized at warm-up.
  struct DeviceCopy {
    Fence fence{};
    ContextId context{};
    std::uint32_t page_first = 0;  // into device_copy_pages_
    std::uint32_t page_count = 0;
  };
  std::vector<DeviceCopy> device_copies_;          // [slots]
  std::uint32_t device_copy_count_ = 0;
  std::vector<PageId> device_copy_pages_;          // [slots × dense layers × layer_pages_max]: target pages
  std::uint32_t device_copy_page_count_ = 0;
  std::vector<CopyRegion> device_copy_regions_;    // [dense layers × layer_pages_max]
};

}  // namespace activekv::runtime_impl
