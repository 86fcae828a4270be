// explain.hpp — why each of a context's pages is where it is, and what the last step decided.
//
// explain() reads the budget manager's page tables and the decision log; it builds
// strings and so runs off the step path (a CLI command, a debug endpoint, a test).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "activekv/budget.hpp"
#include "activekv/decision_log.hpp"

namespace activekv {

// A run of a context's resident pages in one layer, all resident for one reason.
struct ResidentRun {
  std::uint32_t layer = 0;
  std::uint32_t logical_first = 0;
  std::uint32_t pages = 0;
  const char* reason = "";  // static text: "sink page", "newest run", "tail page", "promoted (hot)", ...
  std::uint32_t pool_page_first = page_none;  // pool page of logical_first
  std::vector<std::uint32_t> pool_pages;      // the pool page of each logical page of the run
};

// Where the bytes of a page a sparse selection read came from in that step (docs/SPARSE.md "Staging").
enum class PickStaging : std::uint8_t {
  resident,   // in the device pool
  in_place,   // read in place in the host pool
  staged,     // copied through a tile after the query (the selection was known), or every page staged
  predicted,  // copied through a tile before the query: the previous step's selection read it
  missed,     // not predicted: copied through a tile in attend(l), before the kernel read it
};
const char* pick_staging_text(PickStaging staging) noexcept;

// Sparse attention (filled by the KV runtime): one page the last decode step's selection read.
struct SparsePick {
  std::uint32_t layer = 0;
  std::uint32_t logical = 0;
  float bound = 0.0f;                 // the q·k upper bound from the page's summary (max over heads)
  std::uint32_t rank = UINT32_MAX;    // the order it was taken by bound; UINT32_MAX: forced (sink,
                                      //   newest, heavy hitter, or the budget covered every page)
  std::uint32_t group = UINT32_MAX;   // per-KV-head page lists: the KV head group that read it (bound
                                      //   and rank are that group's); UINT32_MAX: every group (one list)
  PickStaging staging = PickStaging::resident;
};

struct Explanation {
  std::uint64_t request_id = 0;
  std::uint32_t slot = 0;
  std::uint32_t length_tokens = 0;
  Budget budget;
  std::uint64_t pages_assigned = 0;
  std::uint64_t pages_reserved = 0;
  std::uint64_t last_active_step = 0;
  std::vector<ResidentRun> runs;
  std::uint32_t pages_staged_per_step = 0;  // logical pages not resident (staged by the next step; a window
                                            //   layer's only from its window's first page)
  std::uint32_t window_layers = 0;          // dense layers that attend to a window (0: none)
  std::uint32_t window_tokens = 0;          // their window W
  std::uint32_t ring_tokens = 0;            // their host ring: min(max_context, (ceil(W / P) + 1) × P)
  bool staged_in_place = false;             // those pages are read by the kernel in place in the host
                                            //   pool, not copied through the tiles (docs/IN_PLACE.md)
  std::uint64_t step = 0;                   // the step whose decisions follow
  std::vector<Decision> decisions;          // that step's decisions for this context
  // Prefix reuse (filled by the KV runtime): logical pages 0 .. adopted_pages − 1 of every layer
  // came from a retained prefix, adopted in place or copied from a running context's history.
  std::uint32_t adopted_pages = 0;
  bool adopted_copied = false;
  std::uint64_t adopted_from_request = 0;
  // The shared KV tier (filled by the KV runtime): logical pages [tier_pages_first, tier_pages_end)
  // of every layer were restored from the tier (docs/TIER.md); equal when none were.
  std::uint32_t tier_pages_first = 0;
  std::uint32_t tier_pages_end = 0;
  // The host prefix cache (filled by the KV runtime): logical pages [cache_pages_first,
  // cache_pages_end) of every layer were copied from it; its first page is shared by
  // cache_shared_prefixes cached prefixes.
  std::uint32_t cache_pages_first = 0;
  std::uint32_t cache_pages_end = 0;
  std::uint32_t cache_shared_prefixes = 0;
  // Rows of the prompt's partial last page (logical page cache_pages_end) copied from the cache
  // too, with the page placed on the device for them; 0 when none were.
  std::uint32_t cache_partial_rows = 0;
  // Pages of the cache's match not adopted: the window layers' rows the next query needs were not
  // cached (ring), or no cached state checkpoint lay at a later boundary (state); 0 when none.
  std::uint32_t cache_ring_cut_pages = 0;
  std::uint32_t cache_state_cut_pages = 0;
  // Pages of the tier's accepted run not restored: window rows missing (ring) or no state at a
  // later block end (state); 0 when none.
  std::uint32_t tier_ring_cut_pages = 0;
  std::uint32_t tier_state_cut_pages = 0;
  std::uint32_t adopted_device_copied = 0;  // of the adopted pages, pool pages copied device to device from the source's resident pages
  std::uint32_t adopted_device_promoted = 0;  // of those, the source's promoted pages below its run, promoted here too
  std::uint32_t adopted_device_pages = 0;  // of the adopted pages, device pool pages handed over from the retained history
  std::uint64_t adopted_host_pages = 0;    // the rest (adopted pages × dense layers − the two above): streamed from the host pool
  // Recurrent state (hybrid models; filled by the KV runtime): the device slot holding it, and
  // the history's checkpoints on the host.
  std::uint64_t state_bytes = 0;              // 0: the model has no recurrent state
  std::uint32_t recurrent_slot = UINT32_MAX;  // the arena's recurrent slot bound to the context
  std::uint32_t state_restored_tokens = 0;    // the state came from a checkpoint at this position (0: started empty)
  std::uint32_t state_checkpoints_held = 0;   // checkpoints its history holds on the host
  std::uint32_t state_checkpoint_newest = 0;  // the newest one's position (what a follow-up can adopt up to)
  // Sparse attention (filled by the KV runtime; empty in exact mode): the pages the last decode
  // step that selected read, per layer, ascending; the pages the context held then, per layer.
  std::uint64_t sparse_step = 0;
  std::uint32_t sparse_pages_held = 0;
  std::vector<SparsePick> sparse_picks;
  // That step's staging of the context's pages not resident, summed over layers (KvCounters'
  // pages_stage_*): copied and read, split by why; copied but not read; neither.
  std::uint32_t sparse_stage_selected = 0, sparse_stage_predicted = 0, sparse_stage_missed = 0;
  std::uint32_t sparse_stage_unselected = 0, sparse_stage_skipped = 0;
  std::string sparse_score;                         // the score the pages were ranked by ("bound", …)
  std::string sparse_layer_signal;                  // with layer budgets: what spread them; else empty
  std::vector<std::uint32_t> sparse_layer_budget;   // per layer: the budget (pages per group) it had
};

// The planner's current step number is `step`; decisions recorded in it are included.
Explanation explain(const BudgetManager& budgets, ContextHandle context, std::uint64_t step);
std::string explanation_text(const Explanation& explanation);
std::string explanation_json(const Explanation& explanation, int indent = 2);

}  // namespace activekv
