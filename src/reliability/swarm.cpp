// swarm.cpp — the swarm's entry points: one seed (run_seed, a SeedRun: swarm_seed_run.hpp and
// its parts), the summary over seeds and its text.
//
// Invariant: the summary is a pure fold of the seeds' reports in order (its trace hash too), so
// two runs over the same seeds print the same summary but for the time.
//
// A seed's run has two phases. In the fault phase the host backend injects the
// seed's faults; a step that reports a fault is discarded, its contexts are
// cancelled and recovered from their host histories (verified against the
// checksums of the rows written) into fresh contexts. The phase ends at a
// drawn step, or at once when the device is lost. Then the faulty runtime must
// drain — every page not quarantined and every history returned — and every
// surviving request moves, from its host history, onto a fault-free device,
// where it must run to its full length (liveness). Every buffer a step touches
// is sized before the first step, so a good step's heap allocation count is
// measured around the runtime's calls alone.
#include "reliability/swarm.hpp"

#include <fmt/format.h>

#include "reliability/swarm_seed_run.hpp"

namespace activekv::reliability {

SeedReport run_seed(std::uint64_t seed, const SwarmHooks& hooks) { return detail::SeedRun(seed, hooks).run(); }

void SwarmSummary::add(const SeedReport& r) {
  ++seeds;
  if (!r.ok()) {
    if (seeds_failed == 0) first_failed_seed = r.seed;
    ++seeds_failed;
  }
  steps += r.steps, steps_failed += r.steps_failed, requests += r.requests;
  requests_completed += r.requests_completed, requests_cancelled += r.requests_cancelled;
  rows_verified += r.rows_verified, outputs_verified += r.outputs_verified, pages_quarantined += r.pages_quarantined;
  sparse_selections_verified += r.sparse_selections_verified;
  sparse_pages_missed += r.sparse_pages_missed, sparse_pages_skipped += r.sparse_pages_skipped;
  pages_staged += r.pages_staged, tiles_retired += r.tiles_retired, histories_retired += r.histories_retired;
  contexts_recovered += r.contexts_recovered, contexts_lost += r.contexts_lost, corrupted += r.corrupted;
  follow_ups += r.follow_ups, adoptions += r.adoptions, tokens_reused += r.tokens_reused;
  device_pages_handed_over += r.device_pages_handed_over, device_pages_copied += r.device_pages_copied;
  prefix_cache_hits += r.prefix_cache_hits;
  hybrid_seeds += r.hybrid ? 1 : 0, states_verified += r.states_verified, state_restores += r.state_restores;
  faults.late += r.faults.late, faults.failed_fences += r.faults.failed_fences;
  faults.unknown_fences += r.faults.unknown_fences, faults.failed_copies += r.faults.failed_copies;
  faults.torn_copies += r.faults.torn_copies, faults.poisoned += r.faults.poisoned;
  faults.device_losses += r.faults.device_losses, faults.warmup_refusals += r.faults.warmup_refusals;
  trace_hash = detail::fnv_u64(trace_hash == 0 ? detail::fnv_basis : trace_hash, r.trace_hash);
}

std::string replay_command(std::uint64_t seed) { return fmt::format("build/release/src/cli/activekv swarm --seed {}", seed); }

std::string format_summary(const SwarmSummary& s, double seconds) {
  std::string out;
  out += fmt::format("seeds run            {} ({} failed) in {:.1f} s\n", s.seeds, s.seeds_failed, seconds);
  out += fmt::format("steps                {} ({} reported a fault and were discarded)\n", s.steps, s.steps_failed);
  out += fmt::format("requests             {} ({} completed, {} cancelled)\n", s.requests, s.requests_completed,
                     s.requests_cancelled);
  out += fmt::format("faults injected      late {}, failed fences {}, unknown fences {}, failed copies {} "
                     "(torn {}), poisoned waits {}, device losses {}, warm-up refusals {}\n",
                     s.faults.late, s.faults.failed_fences, s.faults.unknown_fences, s.faults.failed_copies,
                     s.faults.torn_copies, s.faults.poisoned, s.faults.device_losses, s.faults.warmup_refusals);
  out += fmt::format("rows verified        {}\n", s.rows_verified);
  out += fmt::format("outputs verified     {} tokens\n", s.outputs_verified);
  out += fmt::format("sparse selections    {} (context × layer, output checked over the selected pages)\n",
                     s.sparse_selections_verified);
  out += fmt::format("sparse staging       {} pages not staged (not selected), {} missed and copied before the kernel\n",
                     s.sparse_pages_skipped, s.sparse_pages_missed);
  out += fmt::format("pages staged         {} (read through the tiles)\n", s.pages_staged);
  out += fmt::format("pages quarantined    {}\n", s.pages_quarantined);
  out += fmt::format("retired              {} staging tiles, {} host histories (after failed copies)\n", s.tiles_retired,
                     s.histories_retired);
  out += fmt::format("contexts recovered   {} (from their host histories)\n", s.contexts_recovered);
  out += fmt::format("contexts lost        {} (reported)\n", s.contexts_lost);
  out += fmt::format("conversations        {} follow-ups, {} adopted a retained history ({} tokens, rows checked)\n",
                     s.follow_ups, s.adoptions, s.tokens_reused);
  out += fmt::format("device pages         {} handed over in place, {} copied d2d on adopt (outputs checked)\n",
                     s.device_pages_handed_over, s.device_pages_copied);
  out += fmt::format("prefix cache         {} admissions copied pages from the host prefix cache (rows checked)\n",
                     s.prefix_cache_hits);
  out += fmt::format("hybrid               {} seeds; {} recurrent states checked at a step's start, {} restored from "
                     "a checkpoint on adopt\n",
                     s.hybrid_seeds, s.states_verified, s.state_restores);
  out += fmt::format("corrupted            {}\n", s.corrupted);
  out += fmt::format("trace hash           {:016x}\n", s.trace_hash);
  return out;
}

}  // namespace activekv::reliability
