// swarm.hpp — a seeded, fault-injecting simulation of the whole step path.
//
// One seed is one run, fixed by that seed alone. The seed draws a workload
// (request arrivals, lengths, cancellations), a configuration (geometry of a
// tiny synthetic model, page and tile sizes, pools, budgets, residency policy)
// (sparse attention in about one seed of three: fixed, fractional or adaptive budgets, with or
// without measure mode) and fault rates (copy errors 0–10%, failed and unknown fences 0–2%, late and
// reordered completions, a refused warm-up, a device loss). It then drives the
// real core, the real KV runtime and the host backend in its deterministic
// mode step by step, with random K/V/q rows, and checks at every step:
//
//   - invariants 1–4 through KvRuntime::check() (pages conserved, floors and
//     bursts kept, lease and ticket tables sound);
//   - invariant 5: every row a good step wrote reads back from the host
//     history equal to the row written (a checksum per row), and every output
//     of a good step equals the reference attention; a step that reports a
//     fault is never used;
//   - invariant 6: when the fault phase ends, the faulty device drains (every
//     page not quarantined and every history come back), and on a fault-free
//     device every surviving request then runs to its full length;
//   - invariant 7: zero device allocations after warm-up and zero heap
//     allocations inside a good step;
//   - the server's pattern (issue 24, in about one seed of two): small targets under a
//     whole-pool burst, serve's step token budget, repeated prompts (copy on adopt),
//     turns sent as their predecessors end, admission only when it can adopt;
//   - conversations (prefix reuse, in two seeds of three): a follow-up turn
//     inherits a completed predecessor's tokens and rows; when its admission
//     adopts a retained history, every adopted row must equal the
//     conversation's row (checksums) and never reach past the inherited part;
//   - recovery: a context whose step failed is cancelled and recovered from
//     its host history (verified row by row against the checksums, then
//     replayed into a fresh context); a device loss quarantines everything
//     outstanding and every context moves, from its host history, to a new
//     device. A history that fails its checksums is reported lost, never used.
//
// Anything else is a violation: the run stops at once and reports the seed,
// the step and what broke. The trace hash folds every event (admissions,
// step outcomes, output and row checksums, counters), so two runs of one seed
// must agree on it bit for bit.
#pragma once

#include <cstdint>
#include <string>

namespace activekv::reliability {

// The faults one seed injected, by class (from the host backend's counters
// and the simulation's own decisions).
struct FaultTally {
  std::uint64_t late = 0;
  std::uint64_t failed_fences = 0;
  std::uint64_t unknown_fences = 0;
  std::uint64_t failed_copies = 0;
  std::uint64_t torn_copies = 0;
  std::uint64_t poisoned = 0;          // commands that waited on a failed fence
  std::uint64_t device_losses = 0;
  std::uint64_t warmup_refusals = 0;   // a pool too small for warm-up: refused, naming the setting
};

struct SeedReport {
  std::uint64_t seed = 0;
  std::uint64_t trace_hash = 0;
  std::uint64_t steps = 0, steps_failed = 0;
  std::uint64_t requests = 0, requests_completed = 0, requests_cancelled = 0;
  std::uint64_t rows_verified = 0;       // host rows compared against their checksums
  std::uint64_t outputs_verified = 0;    // attention outputs compared against the reference
  std::uint64_t sparse_selections_verified = 0;  // sparse decode (context × layer): the output equals the
                                                 //   reference over exactly the pages explain() names
  std::uint64_t pages_quarantined = 0;
  std::uint64_t pages_staged = 0;        // page reads served from the staging tiles (history beyond the pool)
  std::uint64_t sparse_pages_missed = 0;   // sparse, staging predicted: selected pages copied in attend (misses)
  std::uint64_t sparse_pages_skipped = 0;  // sparse: pages not resident that were not copied (no kernel read them)
  std::uint64_t tiles_retired = 0;       // staging tiles out of the planner's rotation after a failed copy
  std::uint64_t histories_retired = 0;   // host histories out of use after a failed copy touched them
  std::uint64_t contexts_recovered = 0;  // moved from their host history into a fresh context
  std::uint64_t contexts_lost = 0;       // reported lost: the host history failed its checksums
  std::uint64_t corrupted = 0;           // a good step read or wrote a wrong row: always a violation
  std::uint64_t follow_ups = 0;          // conversations: requests that inherited a completed predecessor's history
  std::uint64_t adoptions = 0;           // of them, admissions that adopted a retained prefix (rows checked)
  std::uint64_t tokens_reused = 0;
  std::uint64_t device_pages_handed_over = 0;  // retained device pages taken over in place by adopting contexts
  std::uint64_t device_pages_copied = 0;       // prefix pages copied device to device on adopt
  std::uint64_t prefix_cache_hits = 0;         // admissions that copied pages from the host prefix cache (rows checked)
  bool hybrid = false;                         // contexts carry a recurrent state (a toy recurrence, checked)
  std::uint64_t states_verified = 0;           // steps' contexts whose recurrent state equalled the toy state
  std::uint64_t state_restores = 0;            // adoptions whose state came from a host checkpoint
  FaultTally faults;
  std::string violation;                 // empty when every invariant held
  bool ok() const { return violation.empty(); }
};

// Test hooks: deliberate damage that the checks must catch.
struct SwarmHooks {
  // After this good step (1-based; 0 = never), flip one bit of the newest host row.
  std::uint64_t corrupt_host_row_after_step = 0;
};

SeedReport run_seed(std::uint64_t seed, const SwarmHooks& hooks = {});

struct SwarmSummary {
  std::uint64_t seeds = 0, seeds_failed = 0;
  std::uint64_t first_failed_seed = 0;
  std::uint64_t steps = 0, steps_failed = 0, requests = 0, requests_completed = 0, requests_cancelled = 0;
  std::uint64_t rows_verified = 0, outputs_verified = 0, pages_quarantined = 0;
  std::uint64_t sparse_selections_verified = 0, sparse_pages_missed = 0, sparse_pages_skipped = 0;
  std::uint64_t pages_staged = 0, tiles_retired = 0, histories_retired = 0;
  std::uint64_t contexts_recovered = 0, contexts_lost = 0, corrupted = 0;
  std::uint64_t follow_ups = 0, adoptions = 0, tokens_reused = 0, device_pages_handed_over = 0, device_pages_copied = 0;
  std::uint64_t prefix_cache_hits = 0;
  std::uint64_t hybrid_seeds = 0, states_verified = 0, state_restores = 0;
  FaultTally faults;
  std::uint64_t trace_hash = 0;  // all seeds' hashes folded in order

  void add(const SeedReport& report);
};

// The one-line command that replays a seed exactly.
std::string replay_command(std::uint64_t seed);
// A multi-line, human-readable summary.
std::string format_summary(const SwarmSummary& summary, double seconds);

}  // namespace activekv::reliability
