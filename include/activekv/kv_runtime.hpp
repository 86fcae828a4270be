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
//   begin_step(entries)            the core plans the step; staging copies of
//                                  non-resident history are issued on the h2d
//                                  queue, coalesced and batched
//   for each dense layer l:
//     write_kv(l, k, v)            the new tokens' rows (fp32 in, encoded to the
//                                  geometry's dtype) go into their tail pages on
//                                  the device
//     attend(l, q, out)            attention of every entry's new queries over
//                                  resident pages and staged tiles through the
//                                  backend's paged kernel, which waits on the
//                                  copy fences on the device; fp32 out
//   end_step()                     after attention signalled, only the changed
//                                  tail rows go device-to-host into the host
//                                  segments (the host copy is authoritative);
//                                  staging leases are released once every fence
//                                  that touched them signalled; a failed or
//                                  unknown fence quarantines and is reported
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "activekv/geometry.hpp"
#include "activekv/result.hpp"

namespace activekv {

class Backend;

// What residency policy decides which pages stay on the device (exact mode:
// both are exact; they differ only in which bytes are staged).
enum class ResidencyPolicyKind : std::uint8_t {
  exact,    // sink page + the newest contiguous pages; the rest is staged
  hotness,  // exact, plus promotion of pages below the frontier that turn hot
};

struct KvRuntimeSettings {
  Geometry geometry;                      // the model's KV shape
  std::uint32_t q_heads = 0;              // query heads per layer (a multiple of kv_heads)
  std::uint64_t host_pool_bytes = 0;      // --host-pool: explicit, never automatic
  std::uint64_t device_pool_bytes = 0;    // --device-pool: the arena's page pool, explicit
  std::uint32_t page_tokens = 16;         // P: rows per page
  std::uint32_t tile_tokens = 0;          // T: rows per staging tile (a multiple of P)
  std::uint32_t tiles = 0;                // staging tile slots in the arena
  std::uint32_t max_context_tokens = 0;   // rows per segment (per context and layer)
  std::uint32_t max_seqs = 0;             // contexts the operator allows at once
  std::uint32_t step_tokens_max = 0;      // new tokens in one step, all entries together
  std::uint32_t step_entries_max = 0;     // contexts scheduled in one step
  ResidencyPolicyKind policy = ResidencyPolicyKind::exact;
};

// A context's handle: a slot and the generation it was opened with; a
// finished context's stale handle is refused, never obeyed.
struct ContextId {
  std::uint32_t slot = UINT32_MAX;
  std::uint32_t generation = 0;
  friend bool operator==(ContextId, ContextId) = default;
};

enum class AdmissionOutcome : std::uint8_t {
  admitted,  // a history and its floor are held; the context may be scheduled
  queued,    // waiting (FIFO) for a free history or room for its floor; reason says which
};

struct Admission {
  ContextId context;
  AdmissionOutcome outcome = AdmissionOutcome::queued;
  const char* reason = "";  // static text: why it was queued ("no free host history", ...)
};

struct StepEntry {
  ContextId context;
  std::uint32_t tokens_new = 0;  // 1 for decode, a chunk for prefill
};

// Everything the runtime did, for reports and explain. Monotonic except the
// *_last fields, which describe the last step.
struct KvCounters {
  std::uint64_t steps = 0;
  std::uint64_t h2d_copies = 0, h2d_bytes = 0;   // staging + new rows
  std::uint64_t d2h_copies = 0, d2h_bytes = 0;   // tail write-back
  std::uint64_t d2d_copies = 0, d2d_bytes = 0;   // promotions
  std::uint64_t staged_bytes = 0;                // history staged into tiles
  std::uint64_t pages_resident_last = 0;         // pages read in place, last step
  std::uint64_t pages_staged_last = 0;           // pages read from tiles, last step
  std::uint64_t attention_passes_last = 0;       // passes over the tile slots, last step
  std::uint64_t promotions = 0;
  std::uint64_t pages_reclaimed = 0;
  std::uint64_t reclaim_steps = 0;
  std::uint64_t quarantines = 0;                 // buffers quarantined by failed/unknown fences
  std::uint64_t failed_steps = 0;                // steps whose end_step reported a fault
  std::uint64_t heap_allocations_after_warmup = 0;    // counted where the counter is linked
  std::uint64_t device_allocations_after_warmup = 0;  // from the backend's own counter
};

class KvRuntime {
 public:
  virtual ~KvRuntime() = default;

  // Warm-up: plan, allocate once, reserve. Refusals name the setting to change.
  static Result<std::unique_ptr<KvRuntime>> create(const KvRuntimeSettings& settings, Backend& backend);

  // Admission through the core's budgets. tokens_max bounds the context's
  // length (≤ max_context_tokens, else an error naming --max-context).
  virtual Result<Admission> open_context(std::uint32_t tokens_max) = 0;
  // Contexts that were queued and are admitted now (after finish/cancel freed room).
  virtual bool is_admitted(ContextId context) const = 0;
  // Returns the history and every page. finish() of a context with work in
  // flight is a programming error; cancel() honours outstanding fences.
  virtual void finish(ContextId context) = 0;
  virtual void cancel(ContextId context) = 0;
  virtual std::uint32_t length(ContextId context) const = 0;

  virtual Status begin_step(std::span<const StepEntry> entries) = 0;
  virtual void write_kv(std::uint32_t layer, const float* k, const float* v) = 0;
  virtual void attend(std::uint32_t layer, const float* q, float* out) = 0;
  virtual Status end_step() = 0;

  // The authoritative host copy of one row (row_bytes, K then V in the dtype).
  virtual std::span<const std::byte> host_row(ContextId context, std::uint32_t layer,
                                              std::uint32_t token) const = 0;
  virtual const KvCounters& counters() const = 0;
};

}  // namespace activekv
