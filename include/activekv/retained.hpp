// retained.hpp — retained history: immutable pages kept on the device in headroom.
//
// A context's pages below its tail never change again (rows are appended, never
// rewritten), so once such a page has crossed PCIe into a staging tile there is
// no reason to fetch it across PCIe again. Retained history keeps a copy in a
// headroom page; the next time the page must be staged, it is materialised by
// a device-to-device copy from headroom into the tile, overlapping the
// host-to-device copy of the pages that are not retained (the incoming suffix).
// DESIGN.md "Spending what it frees".
//
//   entry (slot, layer, logical page)  →  headroom page (index, generation) or none
//   entry key = (slot × dense_layers + layer) × pages_per_layer_max + logical
//   a retained page is immutable: logical < floor(length_tokens / P)   (full, below the tail)
//   the host copy stays authoritative: dropping an entry loses nothing
//
// Pages are captured first come, first served while headroom has free pages, up
// to a per-context cap (so one context cannot take all of it); they leave when
// their context finishes (release_context) or when pressure takes the headroom
// back (take_back_headroom: every revoked page's entry is dropped at once).
//
// split() walks a staged token range in page order and cuts it into runs: runs
// of consecutive non-retained pages (one host-to-device copy each, the host
// segment being contiguous) and runs of retained pages whose headroom pages are
// adjacent (one device-to-device copy each). The engine issues those copies;
// the simulator charges them.
//
// Tables are sized in create(); no method allocates afterwards.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "activekv/headroom.hpp"
#include "activekv/result.hpp"

namespace activekv {

struct RetainedConfig {
  std::uint32_t slots = 0;                 // contexts that can run at once (the budget's concurrency)
  std::uint32_t dense_layers = 0;
  std::uint32_t page_tokens = 0;           // P (headroom pages are pool-page sized)
  std::uint32_t pages_per_layer_max = 0;   // max_context_tokens / P
  std::uint64_t pages_per_context_max = 0; // cap per context across its layers; 0 = no cap
};

// One copy that fills part of a staging tile: tokens [token_begin, token_end) of a layer,
// from the host segment (retained == false) or from headroom at device_offset_bytes.
struct StagedRun {
  std::uint32_t token_begin = 0;
  std::uint32_t token_end = 0;
  bool retained = false;
  std::uint64_t device_offset_bytes = 0;   // headroom offset of the run's first page (retained only)
};

struct SplitCounts {
  std::uint32_t runs = 0;                  // runs written (≤ out.size()); runs_needed may be larger
  std::uint32_t runs_needed = 0;
  std::uint32_t host_runs = 0;             // host-to-device copies
  std::uint32_t retained_runs = 0;         // device-to-device copies
  std::uint64_t host_tokens = 0;
  std::uint64_t retained_tokens = 0;
};

struct RetainedCounters {
  std::uint64_t pages_captured = 0;        // pages that became retained
  std::uint64_t capture_refusals = 0;      // headroom full or the context at its cap
  std::uint64_t pages_materialised = 0;    // retained pages found by split() (d2d instead of h2d)
  std::uint64_t pages_released = 0;        // returned when their context finished
  std::uint64_t pages_dropped = 0;         // revoked by a headroom taking
};

class RetainedHistory {
 public:
  // Refuses a zero field (naming it) and tables that would not fit in 32-bit keys.
  static Result<RetainedHistory> create(const RetainedConfig& config, Headroom& headroom);

  // Retains logical page `logical` of (slot, layer) if it is immutable for a context of
  // `length_tokens`, not yet retained, the context is under its cap and headroom has a free
  // page. Returns the headroom offset to copy the page into (from the tile that holds it),
  // or UINT64_MAX when it is not retained (an ordinary outcome).
  std::uint64_t capture(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical,
                        std::uint32_t length_tokens) noexcept;
  bool retained(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept;
  std::uint64_t pages_held(std::uint32_t slot) const noexcept { return held_[slot]; }
  std::uint64_t pages_total() const noexcept { return total_; }

  // Cuts tokens [token_begin, token_end) of (slot, layer) into host and retained runs, in order.
  SplitCounts split(std::uint32_t slot, std::uint32_t layer, std::uint32_t token_begin, std::uint32_t token_end,
                    std::span<StagedRun> out) noexcept;

  // The context in `slot` finished or was cancelled: its pages go back to headroom.
  void release_context(std::uint32_t slot) noexcept;
  // Pressure: takes up to `pages` pages of headroom back (Headroom::take_back) and drops
  // every retained entry that lived in them. Returns pages withdrawn.
  std::uint32_t take_back_headroom(std::uint32_t pages) noexcept;
  std::uint32_t restore_headroom(std::uint32_t pages) noexcept { return headroom_->restore(pages); }

  const Headroom& headroom() const noexcept { return *headroom_; }
  const RetainedConfig& config() const noexcept { return config_; }
  const RetainedCounters& counters() const noexcept { return counters_; }

  // Every entry names a current headroom page whose owner tag is the entry's key, the
  // per-context counts add up, and headroom's lent pages are exactly the entries.
  const char* check() const noexcept;
  void validate() const noexcept;

 private:
  RetainedHistory() = default;
  std::uint64_t key(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept {
    return (static_cast<std::uint64_t>(slot) * config_.dense_layers + layer) * config_.pages_per_layer_max + logical;
  }
  void drop(std::uint64_t entry_key) noexcept;

  RetainedConfig config_;
  Headroom* headroom_ = nullptr;
  std::vector<HeadroomPage> entries_;      // slots × dense_layers × pages_per_layer_max
  std::vector<std::uint64_t> held_;        // retained pages per slot
  std::vector<Revocation> revoked_;        // scratch for take_back, headroom pages entries
  std::uint64_t total_ = 0;
  RetainedCounters counters_;
};

}  // namespace activekv
