// budget.hpp — per-context budgets, admission, growth and reclamation of pool pages.
//
// Each running context holds pool pages across all its dense layers:
//   held = assigned (pages holding its rows) + reserved (a claim on free pages)
// and its Budget bounds them: floor ≤ target ≤ burst.
//   - Admission needs a free host history AND room for the floor: the floor is
//     reserved at once, so a running context can always place its tail pages;
//     floors are never taken back, so admission never preempts.
//     Otherwise the request waits in a FIFO queue with the reason recorded.
//   - Growth to the target is by right: free pages first, then borrowed pages
//     reclaimed from others. Growth beyond the target (borrowing, up to the
//     burst) takes free pages only.
//   - Reclamation takes borrowed pages (held above target) first, from the
//     least-recently-active context first (ties: lower request id), in a fixed
//     order; then, for an admission's floor only, pages below target down
//     toward floors. Never below a floor. Within a context: reserved pages (no
//     data) first, then promoted pages, then the oldest pages of the newest run;
//     the sink and the tail pages give way last (they are the floor).
//   Every reclaimed page and every reclamation step (one context visited) is counted.
//
// Retained device pages (docs/PREFIX.md, "Device side"): a context that finishes with
// keep_pages > 0 leaves its pages of logical page < keep_pages in its page tables, owned by its
// now free history: borrowed pages with no running owner. They hold only pages that would be
// free: reclaimed first — before any running context's page, and also for borrowing above a target
// and for promotions — whole histories, least recently retained first; and released when
// another context takes the history. A context admitted into that history with adopt set takes
// them over in place (they change owner; nothing is copied), trimmed to fit its burst above its
// floor. They are counted in pages_assigned of their slot and in retained_pages_total().
//
// Invariant 2 (DESIGN.md): every running context holds at least its floor and at
// most its burst. Invariant 1 is the page pool's. validate() walks both, plus the
// page tables, and is asserted in expensive-assert builds after every mutation.
//
// What the floor protects (docs/CORE.md, "The floor covers the tail"): a context's pages that
// reclamation and eviction may never take — the sink, the pages at or above tail_first_logical,
// the run's newest page — number at most floor_pages_per_layer in each layer, so at most its floor.
// Hence a context holding more than its floor always has a page reclamation may take, and
// free_one_assigned() asserts that it found one. tail_first_logical is what keeps the bound: the
// planner sets it to the first page a step writes; a context that starts after rows its history
// already holds (pages handed over or copied on adopt, rows restored from the KV tier) is started
// there with start_at(), and an adopting admission starts its tail past the pages it takes over.
//
// The per-layer page table is kept as runs, maintained incrementally (so a step's
// cost depends on what changed, not on history length):
//   sink      logical page 0, one pool page
//   run       the newest contiguous logical pages [run_first, run_first + run_count),
//             their pool pages in a ring (oldest at ring_head)
//   promoted  pages below the run promoted by a policy, sorted by logical page
// A layer holds at most layer_cap pages (sink + run + promoted): ceil(burst / dense_layers),
// clipped to the segment's page count, so one layer cannot starve the others.
//
// Everything is allocated in the constructor; no method allocates afterwards.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "activekv/arena.hpp"
#include "activekv/decision_log.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/result.hpp"

namespace activekv {

struct Budget {
  std::uint64_t floor_pages = 0;
  std::uint64_t target_pages = 0;
  std::uint64_t burst_pages = 0;
};

// Refuses floor below the plan's minimum floor, floor > target, target > burst, burst above
// the plan's burst (the page tables were sized for it), and a floor larger than the pool;
// names --floor-pages / --target-pages / --burst-pages.
Status validate_budget(const Budget& budget, const MemoryPlan& plan);

struct ContextHandle {
  std::uint32_t slot = UINT32_MAX;  // = the context's host history
  std::uint32_t generation = 0;
  bool valid() const noexcept { return slot != UINT32_MAX; }
  friend bool operator==(ContextHandle, ContextHandle) = default;
};

enum class AdmitOutcome : std::uint8_t { admitted, queued, refused };

struct AdmitResult {
  AdmitOutcome outcome = AdmitOutcome::refused;
  ContextHandle handle;        // valid when admitted
  std::uint64_t request_id = 0;
  Reason reason = Reason::floor_fits;
  std::uint32_t pages_adopted = 0;  // device pages of a retained history taken over in place
};

struct LayerResidency {
  std::uint32_t sink_page = page_none;  // pool page of logical page 0
  std::uint32_t run_first = 1;          // first logical page of the newest run (≥ 1)
  std::uint32_t run_count = 0;
  std::uint32_t ring_head = 0;          // ring index of run_first's pool page
  std::uint32_t promoted_count = 0;
  std::uint32_t pages_held() const noexcept { return (sink_page != page_none ? 1u : 0u) + run_count + promoted_count; }
};

struct ContextState {
  std::uint64_t request_id = 0;
  std::uint32_t generation = 0;
  bool running = false;
  Budget budget;
  std::uint32_t tokens_max = 0;        // the length this context may reach (≤ max context)
  std::uint32_t length_tokens = 0;     // rows written so far (per layer)
  std::uint64_t last_active_step = 0;  // recency for reclamation order
  std::uint64_t admitted_order = 0;    // admission sequence number
  std::uint64_t pages_assigned = 0;    // pool pages holding this context's rows (all layers)
  std::uint64_t pages_reserved = 0;    // claimed free pages
  std::uint64_t pages_held() const noexcept { return pages_assigned + pages_reserved; }
  std::uint32_t layer_cap = 0;         // most pages one layer may hold
  std::uint32_t tail_first_logical = 0;  // first logical page the current (or last) step writes: never evicted
};

struct BudgetCounters {
  std::uint64_t admitted = 0, queued = 0, refused = 0, finished = 0, cancelled = 0;
  std::uint64_t pages_grown = 0;        // to target, by right
  std::uint64_t pages_borrowed = 0;     // beyond target, from free pages
  std::uint64_t pages_reclaimed = 0;    // taken back from another context
  std::uint64_t reclaim_steps = 0;      // contexts visited by reclamation
  std::uint64_t pages_evicted = 0;      // a context's own pages giving way to its new tail/promotion
  std::uint64_t pages_promoted = 0;
  std::uint64_t retained_pages_kept = 0;       // device pages left with a finished context's retained history
  std::uint64_t retained_pages_adopted = 0;    // of those, taken over in place by an adopting context
  std::uint64_t retained_pages_reclaimed = 0;  // of those, freed: reclaimed first, history taken, or dropped
};

class BudgetManager {
 public:
  BudgetManager(const MemoryPlan& plan, Arena& arena, DecisionLog& log);

  const MemoryPlan& plan() const noexcept { return plan_; }
  Arena& arena() noexcept { return arena_; }
  // Most pages layer l of context `slot` may hold: the context's layer cap, and for a window layer
  // (memory_plan.hpp) at most the sink and its ring's pages, which cover every query's window.
  std::uint32_t layer_cap_of(std::uint32_t slot, std::uint32_t l) const noexcept {
    const std::uint32_t cap = contexts_[slot].layer_cap;
    return plan_.host.is_ring(l) ? std::min(cap, window_cap_) : cap;
  }
  DecisionLog& log() noexcept { return log_; }
  const DecisionLog& log() const noexcept { return log_; }

  // User-facing check of a request before submit: an Error naming --max-context.
  Status check_request(std::uint32_t tokens_max) const;

  // Admits (reserving the floor) or queues (FIFO) or refuses (too long, queue full, bad budget).
  // budget == nullptr: the plan's default budget. preferred_slot: the history to admit into when
  // it is free at admission (an adopted retained prefix); otherwise a free history that holds no
  // retained prefix, else the least recently retained one (see set_retained).
  // adopt: when admitted at once into preferred_slot, the context takes over the retained device
  // pages that history holds (AdmitResult::pages_adopted); otherwise they are released.
  AdmitResult submit(std::uint64_t request_id, std::uint32_t tokens_max, const Budget* budget = nullptr,
                     std::uint32_t preferred_slot = UINT32_MAX, bool adopt = false) noexcept;
  // Returns every page and the history, then admits from the queue head while floors fit.
  // retire: the history leaves use for good instead of returning to the free list (see
  // retire_history), decided before a queued request could be admitted into it.
  // keep_pages > 0 (and not retire): the pages of logical page < keep_pages stay as retained
  // device pages of the history (see above); the rest go back to the pool.
  void finish(ContextHandle context, bool retire = false, std::uint32_t keep_pages = 0) noexcept;
  void cancel(ContextHandle context, bool retire = false) noexcept;
  // Removes a waiting request; false if it is not queued.
  bool cancel_queued(std::uint64_t request_id) noexcept;
  // A context whose history already holds rows [0, tokens) (an adopted prefix, rows restored from
  // the KV tier) starts after them: its length becomes `tokens` and its tail its next step's first
  // page, tokens / page_tokens, so every page it took over lies below its tail and may give way
  // like any other (the sink and the run's newest page excepted). Between steps; never backwards;
  // it holds no page past its rows.
  void start_at(ContextHandle context, std::uint32_t tokens) noexcept;
  // Contexts admitted from the queue since the last call (copied into out; returns count copied).
  std::uint32_t take_admitted(std::span<AdmitResult> out) noexcept;

  // Grows the reservation by up to `pages`: to the target by right (reclaiming borrowed pages
  // from others), beyond it up to the burst from free pages only. Returns pages granted.
  std::uint64_t grow(ContextHandle context, std::uint64_t pages) noexcept;
  // Gives back up to `pages` of the reservation, never below the floor. Returns pages returned.
  std::uint64_t shrink(ContextHandle context, std::uint64_t pages) noexcept;
  // Takes up to `pages` from other contexts (not `for_slot`) in reclamation order and frees them.
  // down_to_floor: also below targets (admission). Returns pages freed.
  std::uint64_t reclaim(std::uint64_t pages, std::uint32_t for_slot, bool down_to_floor) noexcept;

  // --- residency primitives, used by the planner (no allocation) ---
  bool current(ContextHandle context) const noexcept {
    return context.slot < contexts_.size() && contexts_[context.slot].running &&
           contexts_[context.slot].generation == context.generation;
  }
  ContextState& context(std::uint32_t slot) noexcept { return contexts_[slot]; }
  const ContextState& context(std::uint32_t slot) const noexcept { return contexts_[slot]; }
  // Layer-major: a step walks one layer across all contexts, so that walk is sequential in memory.
  LayerResidency& layer(std::uint32_t slot, std::uint32_t layer) noexcept { return layers_[layer * slot_count_ + slot]; }
  const LayerResidency& layer(std::uint32_t slot, std::uint32_t layer) const noexcept {
    return layers_[layer * slot_count_ + slot];
  }
  // Cache hints for a batch of tail placements (the planner's phase 1): the ring entries a slide
  // reads and writes, and then — once those have arrived — the record of the page it would drop.
  // Hints only: nothing changes. The ring and the page records outgrow the caches at hundreds of
  // contexts, and a slide's three dependent loads would otherwise each wait a full miss in turn.
  void prefetch_run_ends(std::uint32_t slot, std::uint32_t layer) const noexcept {
    const LayerResidency& r = this->layer(slot, layer);
    const std::uint32_t* ring = ring_.data() + ring_offset(slot, layer);
    __builtin_prefetch(ring + r.ring_head, 0);
    __builtin_prefetch(ring + ring_index(r.ring_head, r.run_count), 1);
  }
  void prefetch_run_oldest_page(std::uint32_t slot, std::uint32_t layer) const noexcept {
    const LayerResidency& r = this->layer(slot, layer);
    if (r.run_count > 1) arena_.pages().prefetch(ring_[ring_offset(slot, layer) + r.ring_head]);
  }
  // Pool page of the run's i-th page (i = 0 is run_first).
  std::uint32_t run_page(std::uint32_t slot, std::uint32_t layer, std::uint32_t i) const noexcept;
  std::span<const std::uint32_t> promoted_logical(std::uint32_t slot, std::uint32_t layer) const noexcept;
  std::span<const std::uint32_t> promoted_pages(std::uint32_t slot, std::uint32_t layer) const noexcept;
  // Where the page tables live (a plan refers to them by offset).
  std::span<const std::uint32_t> ring_storage() const noexcept { return ring_; }
  std::uint32_t ring_offset(std::uint32_t slot, std::uint32_t layer) const noexcept {
    return (slot * dense_layers_ + layer) * ring_capacity_;
  }
  std::uint32_t ring_capacity() const noexcept { return ring_capacity_; }
  // (head + i) mod ring capacity for head < capacity and i ≤ capacity, without a division.
  std::uint32_t ring_index(std::uint32_t head, std::uint32_t i) const noexcept {
    const std::uint32_t at = head + i;
    return at >= ring_capacity_ ? at - ring_capacity_ : at;
  }
  std::span<const std::uint32_t> promoted_logical_storage() const noexcept { return promoted_logical_; }
  std::span<const std::uint32_t> promoted_page_storage() const noexcept { return promoted_page_; }
  std::uint32_t promoted_offset(std::uint32_t slot, std::uint32_t layer) const noexcept {
    return (slot * dense_layers_ + layer) * plan_.promoted_pages_per_layer;
  }

  // Obtains a pool page for (slot, layer, logical): from the reservation, else growing to the
  // target (free, then reclaiming borrowed pages), else borrowing a free page up to the burst.
  // Returns page_none when none of those can: the caller evicts one of the context's own pages.
  // allow_reclaim = false: never take pages from other contexts (promotions use this).
  std::uint32_t acquire_page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, PageState state,
                             Reason reason, bool allow_reclaim = true) noexcept;
  // Appends logical page run_first + run_count to the layer's run (the new tail page).
  void push_run_back(std::uint32_t slot, std::uint32_t layer, std::uint32_t pool_page) noexcept;
  // Prepends run_first − 1 to the run (a promotion that extends the run downward).
  void push_run_front(std::uint32_t slot, std::uint32_t layer, std::uint32_t pool_page) noexcept;
  void set_sink(std::uint32_t slot, std::uint32_t layer, std::uint32_t pool_page) noexcept;
  // Inserts a promoted page below the run; false when the layer's promoted set is full.
  bool add_promoted(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, std::uint32_t pool_page) noexcept;
  // Frees one of the context's pages in `layer` so the layer can take a new one: the run's oldest
  // page (the run slides), else its lowest promoted page; never the sink or a tail page (at or
  // above the context's tail_first_logical). The freed page stays with the context as reserved.
  // Returns false when the layer has nothing it may give.
  bool evict_one(std::uint32_t slot, std::uint32_t layer, Reason reason) noexcept;
  // The run slides by one page in place: its oldest page (below the tail, owned) becomes the new
  // newest page, logical run_first + run_count — what evict_one() then acquire_page() from the
  // reservation would do, without the trip through the free list. Recorded as an eviction.
  // Returns false, changing nothing, when the run may not slide or its oldest page is not owned.
  bool slide_run(std::uint32_t slot, std::uint32_t layer, Reason reason) noexcept;
  // Pages of `layer` that reclamation or eviction may take (promoted + run pages below the tail).
  std::uint32_t evictable(std::uint32_t slot, std::uint32_t layer) const noexcept;
  // One past the highest logical page the context's tables hold in any layer (0 when none).
  std::uint32_t held_end_logical(std::uint32_t slot) const noexcept;
  // A fence that touched `page` failed or its outcome is unknown: the page is quarantined for
  // good and leaves its context's page table (a promoted page, the sink, or a run page below the
  // tail — the older part of the run goes with it, to keep the run contiguous); the history is
  // re-staged from the host from the next step on. The context keeps its floor (a free page is
  // reserved in its place, reclaiming if needed). Returns false when that cannot be done — the
  // page was a tail page (it holds rows the step is writing) or no page is left to keep the floor —
  // and the caller must cancel the context. Call between steps (after step_completed()).
  bool quarantine(PageId page) noexcept;
  // Marks a context active in `step` (reclamation order).
  void touch(std::uint32_t slot, std::uint64_t step) noexcept { contexts_[slot].last_active_step = step; }
  void set_step(std::uint64_t step) noexcept { step_ = step; }

  std::uint64_t pages_reserved_total() const noexcept { return reserved_total_; }
  // Free pages nobody has reserved: what borrowing may take.
  std::uint64_t pages_unreserved() const noexcept { return arena_.pages().pages_free() - reserved_total_; }
  std::uint64_t floors_committed() const noexcept { return floors_committed_; }
  std::uint32_t running() const noexcept { return running_; }
  std::uint32_t queued() const noexcept { return queue_size_; }
  std::uint32_t slots() const noexcept { return static_cast<std::uint32_t>(contexts_.size()); }  // = plan history_slots
  std::uint32_t running_max() const noexcept { return running_max_; }  // = plan host concurrency
  std::uint32_t histories_free() const noexcept { return free_slot_count_; }
  // Why submit() with the plan's budget would queue now (queue_not_empty, no_free_history,
  // floor_does_not_fit), or floor_fits when it would admit at once. A caller whose request should
  // adopt a prefix submits only when admits_now(), since a request admitted later from the queue
  // adopts nothing.
  Reason admission_wait() const noexcept {
    if (queue_size_ > 0) return Reason::queue_not_empty;
    if (free_slot_count_ == 0 || running_ >= running_max_) return Reason::no_free_history;
    if (!floor_fits(plan_.budget.floor_pages)) return Reason::floor_does_not_fit;
    return Reason::floor_fits;
  }
  bool admits_now() const noexcept { return admission_wait() == Reason::floor_fits; }
  std::uint32_t histories_retired() const noexcept { return retired_count_; }
  // Takes a host history out of use for good: a copy that touched its host range failed, so the
  // range is quarantined (invariant 4) and no later context may write or stage there. The slot
  // must not be running (finish or cancel with retire = true does it as the context leaves).
  // Recorded as a retire decision. With every history retired, submit() refuses
  // (no_usable_history). Returns false when already retired.
  bool retire_history(std::uint32_t slot) noexcept;
  bool history_retired(std::uint32_t slot) const noexcept { return retired_[slot] != 0; }
  // A history a background reader still reads (the KV tier's write-behind, docs/TIER.md): held
  // while its context runs, it does not return to the free list when the context leaves, so no
  // admission can write into it, until release_history(). Invariant: free + running + retired +
  // held (not retired) histories = slots.
  void hold_history(std::uint32_t slot) noexcept;
  // A free history reserved for a request before its admission (the KV tier's reader writes its
  // rows, docs/TIER.md): taken off the free list as admission would take it (`preferred` if free,
  // else another by the same order) and held like a finished one, until release_history().
  // Needs a free history; returns the slot.
  std::uint32_t reserve_history(std::uint32_t preferred) noexcept;
  void release_history(std::uint32_t slot) noexcept;  // back on the free list (unless retired); admits from the queue
  bool history_held(std::uint32_t slot) const noexcept { return held_[slot] != 0; }
  std::uint32_t histories_held() const noexcept { return held_count_; }
  // A free history that still holds a retained prefix (the runtime's prefix index) carries a
  // recency stamp > 0; admission takes such a history only when no other is free, the smallest
  // stamp first. The stamp is an ordering hint only: a retained history is a free history.
  void set_retained(std::uint32_t slot, std::uint64_t stamp) noexcept { retained_stamp_[slot] = stamp; }
  std::uint64_t retained_stamp(std::uint32_t slot) const noexcept { return retained_stamp_[slot]; }
  const BudgetCounters& counters() const noexcept { return counters_; }
  // The retained device pages a free history holds, and all of them.
  std::uint64_t retained_pages(std::uint32_t slot) const noexcept {
    return contexts_[slot].running ? 0 : contexts_[slot].pages_assigned;
  }
  std::uint64_t retained_pages_total() const noexcept { return retained_total_; }
  // Pages a running context may still take above its reservation: the unreserved free pages and
  // the retained device pages, which give way first (acquire_page reclaims them on demand).
  std::uint64_t pages_borrowable() const noexcept { return pages_unreserved() + retained_total_; }
  // Frees the retained device pages of a free history (its retained prefix was dropped), logged as
  // a reclaim with `reason`. Returns the pages freed.
  std::uint64_t release_retained(std::uint32_t slot, Reason reason) noexcept;
  // Copy on adopt on the device (docs/PREFIX.md): a page for (slot, layer, logical), in state
  // staging, that a device-to-device copy will fill. Taken only from unreserved free pages — never
  // the floor's reservation, never reclaimed from another context or retained history — within the
  // burst, leaving the layer room for a tail page. page_none when none can be had.
  std::uint32_t acquire_copy_page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept;
  // A running context whose history grew between steps past its run (rows restored from the KV
  // tier after adopted device pages): the run's pages are freed, each logged with `reason`, so
  // the next tail page starts a new run (the run is contiguous up to the tail). The sink and the
  // promoted pages stay. Every run page must be final (owned). Returns the pages freed.
  std::uint32_t release_runs(std::uint32_t slot, Reason reason) noexcept;

  // Invariants 1 and 2 and the page tables' consistency; nullptr when sound, else what broke.
  const char* check() const noexcept;
  void validate() const noexcept;

 private:
  struct Waiting {
    std::uint64_t request_id = 0;
    std::uint32_t tokens_max = 0;
    Budget budget;
    std::uint32_t preferred_slot = UINT32_MAX;
    bool adopt = false;
  };
  bool floor_fits(std::uint64_t floor_pages) const noexcept;
  AdmitResult admit(const Waiting& request, Reason reason, bool adopt) noexcept;
  // Frees whole retained histories' device pages, least recently retained first (not `except`),
  // until `pages` are freed or none is left. Returns pages freed.
  std::uint64_t reclaim_retained(std::uint64_t pages, std::uint32_t except) noexcept;
  // Keeps the pages of logical page < keep_pages in the slot's tables, releasing the rest.
  void trim_tables(std::uint32_t slot, std::uint32_t keep_pages) noexcept;
  // Releases one adopted page of a context that holds more than it may: the lowest promoted page,
  // else the run's oldest, of the layer holding the most. False when nothing is left but sinks.
  bool drop_one_adopted(std::uint32_t slot) noexcept;
  // Removes and returns a free slot: `preferred` if free, else one without a retained prefix, else LRU.
  std::uint32_t take_free_slot(std::uint32_t preferred) noexcept;
  void release_all(std::uint32_t slot, std::uint32_t keep_pages = 0) noexcept;
  void admit_from_queue() noexcept;
  std::uint64_t take_from(std::uint32_t victim, std::uint64_t pages, std::uint64_t keep_pages,
                          std::uint32_t for_slot, Reason reason) noexcept;
  void free_one_assigned(std::uint32_t slot, Reason reason, std::uint32_t for_slot) noexcept;
  void release_page(std::uint32_t slot, std::uint32_t pool_page) noexcept;
  void drop_run_oldest(std::uint32_t slot, std::uint32_t layer, DecisionKind kind, Reason reason,
                       std::uint32_t other_slot) noexcept;
  void drop_promoted_lowest(std::uint32_t slot, std::uint32_t layer, DecisionKind kind, Reason reason,
                            std::uint32_t other_slot) noexcept;
  bool budget_ok(const Budget& budget) const noexcept;
  void record(DecisionKind kind, Reason reason, std::uint32_t slot, std::uint32_t layer, std::uint32_t logical,
              std::uint32_t pool_page, std::uint32_t pages, std::uint32_t other_slot = UINT32_MAX) noexcept;

  MemoryPlan plan_;
  std::uint32_t window_cap_ = UINT32_MAX;  // max(floor per layer, 1 + ring pages): a window layer's most pages
  Arena& arena_;
  DecisionLog& log_;
  std::uint32_t dense_layers_ = 0;
  std::uint32_t ring_capacity_ = 0;
  std::uint32_t slot_count_ = 0;
  std::vector<ContextState> contexts_;        // one per slot (= host history): history_slots of them
  std::vector<LayerResidency> layers_;        // dense_layers × slots (layer-major)
  std::vector<std::uint32_t> ring_;           // slot × dense_layers × ring_capacity pool pages
  std::vector<std::uint32_t> promoted_logical_;  // slot × dense_layers × promoted_pages_per_layer
  std::vector<std::uint32_t> promoted_page_;
  std::vector<std::uint32_t> free_slots_;     // stack of free slots
  std::uint32_t free_slot_count_ = 0;
  std::vector<std::uint8_t> retired_;   // per slot: the history is out of use for good
  std::uint32_t retired_count_ = 0;
  std::vector<std::uint8_t> held_;      // per slot: a background reader holds the history (hold_history)
  std::uint32_t held_count_ = 0;        // held, left, and not retired: neither free nor running
  std::vector<std::uint64_t> retained_stamp_;  // per slot: > 0 while a free history holds a retained prefix
  std::vector<Waiting> queue_;                // FIFO ring, queue_max
  std::uint32_t queue_head_ = 0;
  std::uint32_t queue_size_ = 0;
  std::vector<AdmitResult> admitted_;         // admitted from the queue, not yet taken
  std::uint32_t admitted_count_ = 0;
  std::vector<std::uint32_t> order_;          // scratch: reclamation order of slots
  std::uint64_t reserved_total_ = 0;
  std::uint64_t retained_total_ = 0;          // retained device pages of free histories
  std::uint64_t floors_committed_ = 0;
  std::uint64_t admissions_ = 0;
  std::uint32_t running_ = 0;
  std::uint32_t running_max_ = 0;             // the plan's host concurrency (slots − retained_histories)
  std::uint64_t step_ = 0;
  BudgetCounters counters_;
};

}  // namespace activekv
