// kv_runtime.hpp — a model's KV, living entirely in ActiveKV.
//
// The KV runtime executes the core's residency plans on a backend. It is
// created once, at warm-up, from a geometry and the operator's memory settings:
// it computes the memory plan, has the backend allocate the arena and the
// pinned host pool (once each), and reserves every table a step needs. After
// that a step allocates nothing, on the heap or on the device.
//
// One step (DESIGN.md "One step"), as the engine's forward pass drives it:
//
//   begin_step(entries)            the core plans the step; the first staging
//                                  pass (non-resident history → tile slots) is
//                                  issued on the h2d queue, coalesced, batched
//   for each dense layer l:
//     write_kv(l, k, v)            the new tokens' rows (fp32 in, encoded to the
//                                  geometry's dtype) are uploaded into their
//                                  tail pages on the device
//     attend(l, q, out)            attention of every entry's new queries over
//                                  resident pages and staged tiles through the
//                                  backend's paged kernel, which waits on the
//                                  copy fences on the device; fp32 out. Then
//                                  the changed tail rows go device-to-host into
//                                  the host segments after the kernel (a device
//                                  wait), and the next layer's first pass is
//                                  issued. (attend_none(l): the rows land, no
//                                  attention.)
//   end_step()                     the host waits the write-backs (the host
//                                  copy is authoritative: nothing older than
//                                  this step is held only on the device);
//                                  staging leases and copy tickets are released
//                                  once every fence that touched them
//                                  signalled; a failed or unknown fence
//                                  quarantines what it touched and the step
//                                  reports an error (write_kv/attend return it
//                                  too, as soon as it is seen)
//
// Exactness: attention is computed per page and merged in ascending page order
// whatever the page's bytes live in (pool page or tile), and when the history
// that is not resident exceeds the tiles, attention runs in passes over the
// tile slots with the running partial carried between passes. So outputs are
// bit-identical for every device budget and policy (invariant 8).
//
// Layouts (shapes in elements, row-major):
//   entries      the step's scheduled contexts, in order; entry e appends
//                tokens_new(e) tokens at positions length_before(e) ...
//   k, v         total_new × kv_heads × head_dim fp32, entries concatenated
//   q, out       total_new × q_heads × head_dim fp32, entries concatenated
//   where total_new = Σ_e tokens_new(e) ≤ KvRuntimeSettings::step_tokens_max.
// Decisions and their reasons: docs/RUNTIME.md.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "activekv/budget.hpp"
#include "activekv/decision_log.hpp"
#include "activekv/explain.hpp"
#include "activekv/geometry.hpp"
#include "activekv/kv_tier.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/parallel_chunks.hpp"
#include "activekv/result.hpp"

namespace activekv {

class Backend;

// Which residency policy decides the pages promoted into the pool. Both are
// exact; they differ only in which bytes are staged.
enum class ResidencyPolicyKind : std::uint8_t {
  exact,    // sink page + the newest contiguous pages; the run grows downward
  hotness,  // exact, plus promotion of pages below the frontier whose attention mass is high
};

// Sparse attention (docs/SPARSE.md): on decode steps (one new token per context) the kernel
// reads only a budgeted selection of a context's pages, chosen per layer from per-page key
// summaries (Quest: per-dimension min and max of the keys of each page and KV head), always with
// the sink page and the newest pages. Prefill chunks stay exact. Exact (the default) keeps no
// summaries, costs nothing and stays bit-identical.
enum class SparseMode : std::uint8_t {
  exact,     // every page (the default)
  pages,     // at most `pages` pages per context and layer (--sparse-pages N)
  fraction,  // at most ceil(fraction × the context's pages) (--sparse-fraction F)
  adaptive,  // a per-context budget between floor_pages and the context's burst, moved by the
             // captured attention mass over two timescales (--sparse-adaptive)
};
const char* sparse_mode_name(SparseMode mode) noexcept;

// How a KV head group ranks its pages (docs/SPARSE.md "Scores").
enum class SparseScore : std::uint8_t {
  bound,    // the Quest upper bound of q·k from the pages' min/max summaries (the default)
  moments,  // the attention mass estimated from per-page key means and variances
  mixed,    // half the moments' mass estimate, half the bound turned into a mass (softmax over pages)
  oracle,   // ANALYSIS ONLY: the true attention mass from every key (an exact pass per step);
            // what the best ranking at a budget captures, never a deployable policy
};
inline const char* sparse_score_name(SparseScore score) noexcept {
  switch (score) {
    case SparseScore::bound: return "bound";
    case SparseScore::moments: return "moments";
    case SparseScore::mixed: return "mixed";
    case SparseScore::oracle: return "oracle";
  }
  return "?";
}

// Staging under a sparse selection (docs/SPARSE.md "Staging"). The kernel reads the same pages in
// the same order under each, so the outputs are the same bits; only the bytes copied differ.
enum class SparseStaging : std::uint8_t {
  every,      // every non-resident page, as exact mode stages it (copies issued before the query)
  predicted,  // before the query: the pages the context's previous selection read in that layer,
              //   the sink and the newest; a selected page not predicted (a miss) is copied in
              //   attend(l) before the kernel reads it; passes issued after the query: the selection
  selected,   // only after the query: exactly the selected pages (no miss, no copy overlaps the
              //   engine's work on the layer)
};
inline const char* sparse_staging_name(SparseStaging staging) noexcept {
  switch (staging) {
    case SparseStaging::every: return "every";
    case SparseStaging::predicted: return "predicted";
    case SparseStaging::selected: return "selected";
  }
  return "?";
}

// What moves pages between layers under layer budgets (docs/SPARSE.md "Layer budgets").
enum class LayerSignal : std::uint8_t {
  captured,  // the captured mass as the kernel's per-page mass of the pages read extrapolates it
             // (the adaptive rule's estimate); in measure mode the measured recall
  moments,   // the moments' estimate: estimated mass of the selected pages over that of all pages,
             // from the per-page key moments (no key read); the same in measure mode
};
inline const char* layer_signal_name(LayerSignal signal) noexcept {
  switch (signal) {
    case LayerSignal::captured: return "captured";
    case LayerSignal::moments: return "moments";
  }
  return "?";
}

// The score or signal of a name (the names above); false when the name is none of them.
inline bool sparse_score_from_name(std::string_view name, SparseScore& out) noexcept {
  for (SparseScore s : {SparseScore::bound, SparseScore::moments, SparseScore::mixed, SparseScore::oracle}) {
    if (name == sparse_score_name(s)) return out = s, true;
  }
  return false;
}
inline bool layer_signal_from_name(std::string_view name, LayerSignal& out) noexcept {
  for (LayerSignal s : {LayerSignal::captured, LayerSignal::moments}) {
    if (name == layer_signal_name(s)) return out = s, true;
  }
  return false;
}

struct SparseSettings {
  SparseMode mode = SparseMode::exact;
  std::uint32_t pages = 0;          // mode pages: the page budget per context and layer
  float fraction = 0.0f;            // mode fraction: (0, 1]
  std::uint32_t recent_pages = 2;   // the newest pages always read (the partial last page is one of them)
  // Per-KV-head page lists: each KV head group reads its own best `budget` pages (where the
  // backend's kernel honours page_heads); false, or a backend without it: one list per
  // (context, layer) for all heads, taken round-robin over the groups' rankings.
  bool per_group = true;
  // Fixed budgets (pages, fraction): spread budget × layers over the layers by each layer's missed
  // attention mass (a running average of 1 − captured), so layers whose attention is flat read
  // more pages and peaked ones fewer; the total per step stays about the same (docs/SPARSE.md).
  bool layer_budget = false;
  LayerSignal layer_signal = LayerSignal::captured;  // with layer_budget: what the spread follows
  SparseScore score = SparseScore::bound;  // how a group ranks its pages
  float mix_moments = 0.5f;  // score mixed: the moments' weight in [0, 1] (the bound's is 1 − it)
  // Per-group lists only: each query head ranks the pages by its own score and its group reads
  // the union of its heads' rankings, taken round-robin (rank 0 of each head, then rank 1, …)
  // within the budget, instead of one ranking by the group's score (docs/SPARSE.md).
  bool per_head = false;
  // adaptive (docs/SPARSE.md "The adaptive rule" gives the reasons for each constant):
  std::uint32_t floor_pages = 8;    // the budget never falls below this (nor below sink + recent)
  float grow_below = 0.95f;         // grow fast when the captured mass estimate drops below this
  float shrink_above = 0.99f;       // shrink slowly when the slow average stays above this
  // Heavy hitters (H2O): pages whose decayed mass share stays above heavy_share are kept.
  // Always in adaptive mode; with a fixed budget (pages, fraction) when heavy_hitters is set: the
  // kept pages are forced, inside the budget (at most half of it), like the sink and the newest.
  bool heavy_hitters = false;
  float heavy_decay = 0.9f;         // per decode step
  float heavy_share = 0.02f;
  // Measure mode: the kernel also runs over every page so that the mass recall
  // mass(selected) / mass(all) is exact (SparseStats::recall_*). Costs one exact pass per step.
  bool measure = false;
  // Which non-resident pages a sparse step copies through the tiles (docs/SPARSE.md "Staging").
  // Measure mode reads every page, so it stages every page whatever this says.
  SparseStaging staging = SparseStaging::predicted;

  bool enabled() const noexcept { return mode != SparseMode::exact; }
};

// What sparse selection did, for eval and reports. Cumulative since create() or the last
// reset_sparse_stats(), and the last step. One "selection" is one (context, layer) of a decode step.
struct SparseStats {
  std::uint64_t decode_steps = 0;        // steps with at least one sparse selection
  std::uint64_t selections = 0;          // (context, layer) pairs that selected
  std::uint64_t pages_read = 0;          // Σ pages the kernel read in those selections (per-group lists:
                                         //   Σ over groups of a group's pages ÷ groups, rounded down per step)
  std::uint64_t pages_context = 0;       // Σ pages those contexts held (what exact would read)
  // Captured mass as the runtime estimates it (the adaptive rule's signal; every selection):
  double captured_estimate_sum = 0.0;
  // Measure mode only: Σ over selections of the exact recall mass(selected)/mass(all),
  // averaged over the layer's query heads.
  double recall_sum = 0.0;
  std::uint64_t recall_count = 0;
  double recall_min = 1.0;
  // The same per dense layer (layers below recall_layers_max; the rest are not tallied).
  static constexpr std::uint32_t recall_layers_max = 64;
  std::array<double, recall_layers_max> recall_layer_sum{};
  std::array<std::uint32_t, recall_layers_max> recall_layer_count{};
  std::uint64_t select_ns = 0;           // time spent choosing pages (bounds, ranking), steady clock
  std::uint64_t select_cpu_ns = 0;       // the same spans in the choosing thread's CPU time
  std::uint64_t summary_upload_bytes = 0; // page summaries copied into the arena's summaries part
  // Layer signal moments: Σ and count of the moments' estimate of the captured mass (selections that
  // selected), to set beside the measured recall.
  double moment_estimate_sum = 0.0;
  std::uint64_t moment_estimate_count = 0;
  // The last step:
  std::uint64_t pages_read_last = 0, pages_context_last = 0, selections_last = 0;
  double recall_last = 0.0;  // mean over its selections (measure mode), else 0

  // Per (context, layer) selection: pages read over pages held (0 when none).
  double read_share() const noexcept { return pages_context == 0 ? 0.0 : double(pages_read) / double(pages_context); }
  double pages_read_per_selection() const noexcept { return selections == 0 ? 0.0 : double(pages_read) / double(selections); }
  double mean_recall() const noexcept { return recall_count == 0 ? 0.0 : recall_sum / double(recall_count); }
  double mean_moment_estimate() const noexcept {
    return moment_estimate_count == 0 ? 0.0 : moment_estimate_sum / double(moment_estimate_count);
  }
};

struct KvRuntimeSettings {
  MemorySettings memory;                 // geometry, --host-pool, --device-pool, pages, tiles, budgets
  std::uint32_t q_heads = 0;             // query heads per layer (a multiple of kv_heads)
  std::uint32_t step_entries_max = 0;    // contexts in one step; 0 = the plan's concurrency
  std::uint32_t step_tokens_max = 0;     // new tokens in one step, all entries; 0 = entries × chunk_tokens
  ResidencyPolicyKind policy = ResidencyPolicyKind::exact;
  float hotness_threshold = 0.05f;       // hotness: a page with at least this share of the mass is hot
  std::uint32_t hotness_candidates = 1024;
  std::uint32_t decision_log_records = 65536;
  std::chrono::nanoseconds fence_timeout = std::chrono::seconds(30);  // host waits on one fence
  // Prefix reuse (docs/PREFIX.md): finish_retaining() keeps a finished history's full pages as a
  // retained prefix and open_context(…, prompt, …) adopts the longest one. Off: every history
  // is emptied when its context leaves (configuration key prefix_reuse, --no-prefix-reuse).
  bool prefix_reuse = false;
  // With prefix reuse on: a retained history's full device pages stay in the pool, borrowed by the
  // free history (reclaimed first), and a follow-up adopting it in place takes them over instead
  // of staging its history from the host (docs/PREFIX.md, "Device side").
  bool prefix_reuse_device = true;
  std::uint64_t model_identity = 0;      // seeds the prefix hashes (0: the geometry's)
  // The shared KV tier (docs/TIER.md; null: none). Not owned: it outlives the runtime. Admission
  // restores the prompt's blocks past the local prefix from it; finish_retaining offers the
  // history's whole blocks to it.
  KvTierPort* tier = nullptr;
  // Sparse attention; exact by default. Summaries are kept only when enabled at create().
  SparseSettings sparse;
  // History that is not resident is read by the attention kernel in place in the host pool
  // instead of being staged through the tiles: for backends whose kernel reads host memory
  // (capabilities().kernel_reads_host_pool: the host backend, whose device memory is host RAM).
  // Same bytes, same page order, so the same bits (docs/IN_PLACE.md). create() refuses it on a
  // backend that cannot. Off (the default): staged.
  bool read_in_place = false;
};

using ContextId = ContextHandle;

struct StepEntry {
  ContextId context;
  std::uint32_t tokens_new = 0;  // 1 for decode, a chunk (≤ chunk_tokens) for prefill
};

// Everything the runtime did, for reports and explain. Monotonic except the
// *_last fields, which describe the last step.
struct KvCounters {
  std::uint64_t steps = 0;
  std::uint64_t h2d_copies = 0, h2d_bytes = 0;   // staging copies and new-row uploads
  std::uint64_t d2h_copies = 0, d2h_bytes = 0;   // tail write-back
  std::uint64_t d2d_copies = 0, d2d_bytes = 0;   // promotions
  std::uint64_t rows_uploaded = 0;               // new rows written into tail pages
  std::uint64_t bytes_staged = 0;                // history staged into tiles
  std::uint64_t bytes_written_back = 0;
  std::uint64_t pages_resident = 0, pages_staged = 0;  // pages the kernel read resident / not resident
  std::uint64_t pages_resident_last = 0, pages_staged_last = 0;
  std::uint64_t pages_in_place = 0, pages_in_place_last = 0;  // of pages_staged: read in place in the host pool
  std::uint64_t bytes_read_in_place = 0;         // history the kernel read in place instead of staging it
  // Sparse steps staging through the tiles (SparseSettings::staging other than every; every layer
  // of such a step, prefill too): each page not resident is exactly one of
  std::uint64_t pages_stage_selected = 0;   //   read; copied after the query (its selection known), or an entry that reads every page
  std::uint64_t pages_stage_predicted = 0;  //   read; copied before the query because the previous selection read it
  std::uint64_t pages_stage_missed = 0;     //   read; not predicted: copied in attend(l) before the kernel read it
  std::uint64_t pages_stage_unselected = 0; //   copied but not read (a prediction the query did not confirm, a promotion)
  std::uint64_t pages_stage_skipped = 0;    //   neither copied nor read
  std::uint64_t attention_calls = 0;             // kernel calls (one per pass and layer, plus the final)
  std::uint64_t passes = 0, passes_last = 0;     // passes over the tile slots
  std::uint64_t promotions = 0;
  std::uint64_t pages_reclaimed = 0;             // from the budgets
  std::uint64_t reclaim_steps = 0;
  std::uint64_t quarantines = 0;                 // tiles, host ranges and pages quarantined by failed/unknown fences
  std::uint64_t failed_steps = 0;                // steps that reported a fault
  std::uint64_t tiles_retired = 0;               // staging tiles taken out of the planner's rotation (quarantined)
  std::uint64_t histories_retired = 0;           // host histories taken out of use (a quarantined host range)
  std::uint64_t device_allocations_after_warmup = 0;  // from the backend's own counter: must stay 0
  std::uint64_t heap_allocations_in_steps = 0;        // heap allocations (any thread) during the step calls: must stay 0
  // Prefix reuse (docs/PREFIX.md):
  std::uint64_t prefix_adoptions = 0;         // admissions that adopted a retained prefix (in place or copied)
  std::uint64_t prefix_copies = 0;            // of them, copied from a history a running context holds
  std::uint64_t prefix_ring_recomputed = 0;   // matches refused because a window layer's ring no longer held their window
  std::uint64_t prefix_reused_tokens = 0;     // prompt tokens adopted instead of prefilled
  std::uint64_t retained_kept = 0;            // finished histories kept as retained prefixes
  std::uint64_t retained_dropped = 0;         // retained prefixes dropped or cut short (admission needed the history, cancel, retire)
  std::uint64_t retained_histories = 0;       // a level: histories holding a retained prefix now
  // The host prefix cache (docs/PREFIX.md, "The host prefix cache"; all 0 without one):
  std::uint64_t prefix_cache_lookups = 0;     // admissions with a prompt that looked in the cache
  std::uint64_t prefix_cache_hits = 0;        // of them, admissions that copied at least one page from it
  std::uint64_t prefix_cache_hit_tokens = 0;  // prompt tokens copied from the cache instead of prefilled
  std::uint64_t prefix_cache_ring_cuts = 0;   // adoptions cut back: the cache lacked window rows their window needs
  std::uint64_t prefix_cache_ring_cut_pages = 0;  // matched pages those cuts gave up (prefilled instead)
  std::uint64_t prefix_cache_state_cuts = 0;  // adoptions cut back to the last cached state checkpoint (hybrid models)
  std::uint64_t prefix_cache_state_cut_pages = 0;  // matched pages those cuts gave up (prefilled instead)
  std::uint64_t prefix_cache_states_stored = 0;  // recurrent-state checkpoints stored beside cached pages (hybrid)
  std::uint64_t prefix_cache_states = 0;      // a level: state checkpoints the cache holds now
  std::uint64_t prefix_cache_state_evictions = 0;  // states given up for newer ones (the pages stay)
  std::uint64_t prefix_cache_window_less_pages = 0;  // pages stored without a window layer's rows (gone from its ring)
  std::uint64_t prefix_cache_pages_stored = 0;  // pages written into the cache by finished histories
  std::uint64_t prefix_cache_pages_shared = 0;  // pages a finished history found already stored (shared, not copied)
  std::uint64_t prefix_cache_evictions = 0;   // pages evicted (least recently used leaves first)
  std::uint64_t prefix_cache_pages = 0;       // a level: pages the cache holds now
  std::uint64_t prefix_cache_bytes = 0;       // a level: bytes those pages hold
  std::uint64_t prefix_cache_pages_total = 0; // the cache's capacity in pages (the plan's prefix_cache_pages)
  // The shared KV tier (docs/TIER.md):
  std::uint64_t tier_restores = 0;            // admissions that restored blocks from the tier
  std::uint64_t tier_leases = 0;              // finished histories held while the tier's writer read them
  std::uint64_t tier_running_offers = 0;      // calls of offer_running() that gave the writer blocks (window layers)
  std::uint64_t tier_restored_tokens = 0;     // prompt tokens restored from the tier instead of prefilled
  std::uint64_t tier_reservations = 0;        // histories reserved for a lookup's reader to write into
  std::uint64_t tier_reservations_lost = 0;   // ready lookups not adopted: their history was taken meanwhile
  std::uint64_t tier_ring_cuts = 0;           // restores cut back: the blocks lacked window rows their window needs
  std::uint64_t tier_ring_cut_tokens = 0;     // accepted tokens those cuts gave up (prefilled instead)
  std::uint64_t tier_state_cuts = 0;          // restores cut back to the last block carrying a state (hybrid models)
  std::uint64_t tier_state_cut_tokens = 0;    // accepted tokens those cuts gave up (prefilled instead)
  std::uint64_t retained_device_pages_kept = 0;       // device pages left with finished contexts' retained histories
  std::uint64_t retained_device_pages_adopted = 0;    // of them, handed over in place to the adopting context
  std::uint64_t retained_device_pages_reclaimed = 0;  // of them, freed (reclaimed first, history taken or dropped)
  std::uint64_t retained_device_pages = 0;            // a level: device pages retained histories hold now
  std::uint64_t prefix_device_copies = 0;              // copies on adopt whose device-resident pages went d2d
  std::uint64_t h2d_bytes_adopting = 0;                // of h2d_bytes, staged or uploaded for contexts that adopted a prefix (follow-ups)
  std::uint64_t prefix_device_pages_copied = 0;        // pages those copies moved device to device (not staged from the host)
  std::uint64_t prefix_device_pages_promoted = 0;      // of them, the source's promoted pages below its run (promoted in the adopter too)
  // Recurrent state (hybrid models; docs/RUNTIME.md "Recurrent state"):
  std::uint64_t state_checkpoints = 0;        // states written device to host into a history's checkpoint
  std::uint64_t state_checkpoint_bytes = 0;   // their bytes
  std::uint64_t state_restores = 0;           // admissions whose state came from a checkpoint (adopted prefixes)
  std::uint64_t state_restore_bytes = 0;
  std::uint64_t state_clamped_tokens = 0;     // matched prompt tokens not adopted: past the newest checkpoint at or before the match
  std::uint64_t state_failures = 0;           // checkpoint or restore copies whose fence failed (checkpoint dropped, context faulted)
  // Where the step calls' time went (steady clock, nanoseconds, summed over steps):
  std::uint64_t step_ns = 0;          // inside begin_step, write_kv, attend, attend_none, end_step
  std::uint64_t plan_ns = 0;          // the core's planner (in begin_step)
  std::uint64_t attention_ns = 0;     // the host waiting for attention kernels
  std::uint64_t copy_wait_ns = 0;     // the host waiting for staging, promotion, upload and write-back fences
  // step_ns − plan_ns − attention_ns − copy_wait_ns is the runtime's own issuing work:
  // encoding rows, building page tables, enqueueing, leases and tickets.
};

class KvRuntime {
 public:
  virtual ~KvRuntime() = default;

  // Warm-up: plan, allocate once (arena and pinned host pool, through the
  // backend), reserve every table. Refusals name the setting to change.
  static Result<std::unique_ptr<KvRuntime>> create(const KvRuntimeSettings& settings, Backend& backend);

  virtual const MemoryPlan& plan() const noexcept = 0;

  // ---- admission (the core's budgets) --------------------------------------
  // Admitted (a history and the floor held), queued (FIFO, with the reason),
  // or an error: longer than --max-context, or the queue is full (--queue-max).
  virtual Result<AdmitResult> open_context(std::uint64_t request_id, std::uint32_t tokens_max) = 0;
  // As open_context, and with prefix reuse on: when admitted at once, the context adopts the
  // longest retained prefix of `prompt` in full pages (leaving at least one prompt token to
  // prefill): its length starts at reused_tokens, whose rows are the retained ones. Adopted in
  // place when the history holding it is free, copied (host rows) when a running context holds it.
  // A history that held another retained prefix and is taken by the admission drops it (counted,
  // logged). A request that is queued adopts nothing (reused_tokens = 0).
  virtual Result<AdmitResult> open_context(std::uint64_t request_id, std::uint32_t tokens_max,
                                           std::span<const std::int32_t> prompt, std::uint32_t& reused_tokens) = 0;
  // Requests admitted from the queue since the last call (after finish/cancel freed room).
  virtual std::uint32_t take_admitted(std::span<AdmitResult> out) = 0;
  // The shared KV tier (docs/TIER.md), between steps; without a tier: true, nothing held.
  // prepare_tier: gives back the histories the tier's writer finished reading, then starts (or
  // checks) the background lookup of `prompt`'s whole blocks past its longest local prefix. True:
  // open_context may run now (the lookup ended, or there is nothing to look up); false: the
  // lookup runs, ask again (the request waits in admission; other contexts keep stepping).
  virtual bool prepare_tier(std::span<const std::int32_t> prompt) = 0;
  // A request that waits in the queue: starts the lookup of its blocks when a reader is free (no
  // history is reserved yet), so the round trip runs while it waits. True when its lookup runs
  // or ended; false: none could start (ask again later). Without a tier: true.
  virtual bool prefetch_tier(std::span<const std::int32_t> prompt) = 0;
  // A request that leaves the queue unadmitted (cancelled): its lookup goes unused; a history
  // reserved for it is given back once the tier's reader is out of its rows (release_tier_leases).
  virtual void drop_tier(std::span<const std::int32_t> prompt) = 0;
  // Gives back the histories the tier's writer finished reading; returns how many are still held
  // (finished contexts whose rows it still reads: neither free nor running).
  virtual std::uint32_t release_tier_leases() = 0;
  // Waits up to timeout_ms for the tier's lookup to end or a write to finish; false without a tier.
  virtual bool wait_tier(std::uint32_t timeout_ms) = 0;
  // Returns the history and every page. Between steps only.
  virtual void finish(ContextId context) = 0;
  // As finish; with prefix reuse on, the history's full pages stay as a retained prefix indexed by
  // `tokens` (the tokens whose rows the context holds, in order: at most length(context) are used).
  virtual void finish_retaining(ContextId context, std::span<const std::int32_t> tokens) = 0;
  // With a host prefix cache: the full pages of a running context's rows so far, indexed by
  // `tokens` (at most length(context) are used), go into the cache now, so the same prompt
  // arriving while this one still decodes adopts them (docs/PREFIX_CACHE.md, "A prompt repeated
  // while it runs"). Called once its prompt is prefilled. No effect without a cache, or for a
  // history that is quarantined or faulted. Between steps only.
  virtual void offer_prefix(ContextId context, std::span<const std::int32_t> tokens) = 0;
  // The shared KV tier, window-layer models (docs/TIER.md, "Written while running"): the tier
  // blocks whose ends this running context's history reached since it was admitted or last
  // offered are written behind now, while its window layers' rings still hold their rows (a caller
  // that ends its chunks where tokens_to_checkpoint() says offers every block whole). `tokens` are
  // the context's tokens so far. O(1) when no block end was crossed; no effect without a tier, for
  // a model without window layers (their blocks go at finish, whole), or for a history that is
  // quarantined or faulted. Between steps only; no allocation.
  virtual void offer_running(ContextId context, std::span<const std::int32_t> tokens) = 0;
  // As finish, but allowed during a step: deferred until the step's fences resolved.
  virtual void cancel(ContextId context) = 0;
  virtual bool running(ContextId context) const = 0;
  virtual std::uint32_t length(ContextId context) const = 0;
  // True when a step that touched this context failed: it must be cancelled.
  virtual bool faulted(ContextId context) const = 0;

  // ---- one step ----------------------------------------------------------------
  // Plans the step (refusals: a stale or faulted context, too many entries or
  // tokens, a chunk too large, a context past its tokens_max) and issues the
  // first staging copies.
  virtual Status begin_step(std::span<const StepEntry> entries) = 0;
  // The new tokens' first row position of entry e (= its length before the step).
  virtual std::uint32_t position_first(std::uint32_t entry) const = 0;
  // k, v: total_new × kv_heads × head_dim fp32, entries concatenated.
  virtual Status write_kv(std::uint32_t layer, const float* k, const float* v) = 0;
  // q, out: total_new × q_heads × head_dim fp32, entries concatenated. Returns when
  // out is written; an error when a fence failed (out is then not to be used).
  virtual Status attend(std::uint32_t layer, const float* q, float* out) = 0;
  // The new rows of this layer land without attention: K/V computed elsewhere
  // (a restored prefix, a prompt whose logits are not needed). Staging passes
  // still run, so promotions land; the rows are written back to the host.
  virtual Status attend_none(std::uint32_t layer) = 0;
  // Write-back waited, leases released. Every dense layer must have been attended.
  virtual Status end_step() = 0;

  // ---- reading ---------------------------------------------------------------------
  // The authoritative host copy of one row (row_bytes: K then V in the dtype).
  virtual std::span<const std::byte> host_row(ContextId context, std::uint32_t layer,
                                              std::uint32_t token) const = 0;
  virtual const KvCounters& counters() const = 0;
  // Sparse attention's statistics (all zero in exact mode).
  virtual const SparseStats& sparse_stats() const = 0;
  virtual void reset_sparse_stats() = 0;
  // Between steps: another sparse setting (budget, mode, measure). Refused when the runtime was
  // created exact (no summaries were kept) and `sparse` is enabled; exact is always accepted.
  virtual Status set_sparse(const SparseSettings& sparse) = 0;
  // Threads to borrow (ParallelChunks; {} stops borrowing), from the thread that runs the steps:
  // the sparse selection's bound, and the backend's attention kernel where it takes them
  // (Backend::set_parallel). They must outlive their use: whoever hands them takes them back
  // before they go.
  virtual void set_parallel(const ParallelChunks& parallel) { (void)parallel; }
  // The backend's attention kernel runs on the lent threads (set_parallel): a lender need not
  // free its cores for the kernel's own threads while attend() runs.
  virtual bool attention_borrows_threads() const { return false; }
  virtual Explanation explain(ContextId context) const = 0;
  // Every decision held in the log (a fixed ring): what explain() draws on, including decisions
  // about no running context (a history stored in the prefix cache, its evictions).
  virtual const DecisionLog& decision_log() const = 0;
  // Diagnostics (activekv eval --passkey): the rank of a logical page among every page of the
  // context's layer by the score the group ranked them by in the last decode step that selected
  // (0 = ranked first; ties to the lower page), whether or not it was read; UINT32_MAX when there
  // is no such per-group selection.
  virtual std::uint32_t sparse_rank(ContextId context, std::uint32_t layer, std::uint32_t group,
                                    std::uint32_t logical) const {
    (void)context, (void)layer, (void)group, (void)logical;
    return UINT32_MAX;
  }
  // ---- recurrent state (hybrid models; docs/RUNTIME.md "Recurrent state") ---------
  // The context's recurrent state: plan().geometry.recurrent_state_bytes bytes (every recurrent
  // layer together, laid out by the model: the runtime only keeps and moves the bytes), in the
  // context's slot of the arena's recurrent part, host-addressable. All zero for a context that
  // starts empty; for one that adopted a prefix, the state at its length (restored from a
  // checkpoint: the adopted length is always a checkpoint's position). Valid from begin_step to
  // end_step for a context in that step: the forward pass reads and updates it in place. Refused,
  // naming the cause: a geometry without recurrent state, a context not in the open step.
  virtual Result<std::span<std::byte>> recurrent_state(ContextId context) = 0;
  // The prompt's length, for a context admitted without its prompt (take_admitted; open_context
  // with a prompt notes it itself): the runtime keeps a checkpoint of the state at the prompt's
  // last whole page before its last token. No-op without recurrent state.
  virtual void note_prompt(ContextId context, std::uint32_t prompt_tokens) = 0;
  // Tokens the context may append before the next position where the runtime checkpoints its
  // state (the prompt's checkpoint, every K pages): a caller that cuts its chunk there lets a step
  // end exactly on it, and the runtime takes the checkpoint at that step's end. UINT32_MAX when no
  // checkpoint lies ahead or the model has no recurrent state. Decode steps end on every page
  // boundary by themselves (the newest page boundary is always checkpointed). A window-layer
  // model with a shared KV tier also ends a chunk at every tier block's end, where offer_running()
  // writes the block while the rings hold its rows.
  virtual std::uint32_t tokens_to_checkpoint(ContextId context) const = 0;

  // Invariants 1 and 2 (pages conserved, floors and bursts kept) and the lease
  // tables; nullptr when sound, else what broke.
  virtual const char* check() const = 0;
  // Pages held by contexts + free + staging + quarantined = pool; all free at shutdown.
  virtual std::uint32_t pages_free() const = 0;
  virtual std::uint32_t pages_total() const = 0;
  // Pages a failed or unknown fence took out of use for good.
  virtual std::uint32_t pages_quarantined() const = 0;
  virtual std::uint32_t histories_free() const = 0;
  // A request opened now would be admitted at once: nothing queued ahead, a free history, room
  // below the concurrency (with a retained-history allowance a history may be free while the
  // concurrency's worth of contexts run, docs/PREFIX.md) and room in the arena for its floor. A
  // caller that wants its request to adopt a prefix (retained, cached or from the tier) submits
  // only then: a request queued inside the runtime is admitted later without adopting.
  virtual bool may_admit_now() const = 0;
  // Why a request opened now would wait (queue_not_empty, no_free_history, floor_does_not_fit), or
  // floor_fits when may_admit_now().
  virtual Reason admission_wait() const = 0;
  // Host histories retired for good: a failed copy quarantined part of their host range.
  // histories_free() + running contexts + histories_retired() + histories held by the tier's
  // writer (release_tier_leases) = the plan's history_slots (concurrency + retained_histories).
  virtual std::uint32_t histories_retired() const = 0;
  // Staging tiles still usable (not quarantined). With none, every step is refused.
  virtual std::uint32_t tiles_usable() const = 0;
  // Shutdown, between steps: waits the device copies in flight (their fences), then returns every
  // retained history's device pages to the pool (counted, logged: retained_shutdown). The host
  // prefixes stay indexed. After it, with no context running, pages_free() == pages_total().
  virtual void release_retained() = 0;
};

}  // namespace activekv
