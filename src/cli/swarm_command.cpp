// swarm_command.cpp — `activekv swarm`: the seeded, fault-injecting simulation from the command line.
//
//   activekv swarm --seeds 2000              seeds 1 .. 2000
//   activekv swarm --seeds 100000 --first-seed 500001
//   activekv swarm --seed 4242               one seed, exactly as any run that drew it
//
// Prints the run summary (seeds, faults injected by class, rows verified,
// pages quarantined, recovered, lost, corrupted). A seed that breaks an
// invariant stops the run: the seed, what broke and the one-line replay
// command are printed, and the exit code is 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "cli/command.hpp"
#include "reliability/swarm.hpp"

namespace activekv::cli {
namespace {

struct SwarmOptions {
  std::uint64_t seeds = 2000;
  std::uint64_t first_seed = 1;
  std::uint64_t seed = 0;
  bool keep_going = false;
};

int run_swarm(const SwarmOptions& o) {
  using namespace activekv::reliability;
  const std::uint64_t first = o.seed != 0 ? o.seed : o.first_seed;
  const std::uint64_t count = o.seed != 0 ? 1 : o.seeds;
  if (count == 0) {
    std::fprintf(stderr, "activekv swarm: --seeds must be at least 1\n");
    return 2;
  }
  // Seeds run first .. first + count - 1: bounded, and the end computed without wrapping.
  constexpr std::uint64_t seeds_max = 1'000'000'000;
  if (count > seeds_max || first > UINT64_MAX - count) {
    std::fprintf(stderr, "activekv swarm: --seeds %llu from --first-seed %llu is out of range: give at most %llu seeds, "
                         "ending below 2^64\n",
                 static_cast<unsigned long long>(count), static_cast<unsigned long long>(first),
                 static_cast<unsigned long long>(seeds_max));
    return 2;
  }
  SwarmSummary summary;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  for (std::uint64_t seed = first; seed < first + count; ++seed) {
    const SeedReport report = run_seed(seed);
    summary.add(report);
    if (o.seed != 0) {
      std::printf("seed %llu: %llu steps (%llu failed), trace hash %016llx\n", static_cast<unsigned long long>(seed),
                  static_cast<unsigned long long>(report.steps), static_cast<unsigned long long>(report.steps_failed),
                  static_cast<unsigned long long>(report.trace_hash));
    }
    if (!report.ok()) {
      std::fprintf(stderr, "activekv swarm: seed %llu broke an invariant: %s\nreplay: %s\n",
                   static_cast<unsigned long long>(seed), report.violation.c_str(), replay_command(seed).c_str());
      if (!o.keep_going) break;
    }
    if (count >= 10000 && (seed - first + 1) % 10000 == 0) {
      std::fprintf(stderr, "  %llu seeds, %.0f s\n", static_cast<unsigned long long>(seed - first + 1), elapsed());
    }
  }
  std::printf("%s", format_summary(summary, elapsed()).c_str());
  std::printf("seeds                %llu .. %llu\n", static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(first + summary.seeds - 1));
  return summary.seeds_failed == 0 && summary.corrupted == 0 ? 0 : 1;
}

Action setup_swarm(CLI::App& sub) {
  auto options = std::make_shared<SwarmOptions>();
  sub.add_option("--seeds", options->seeds, "How many seeds to run (default 2000)");
  sub.add_option("--first-seed", options->first_seed, "The first seed of the run (default 1)");
  sub.add_option("--seed", options->seed, "Run this one seed only (replays a failure exactly)");
  sub.add_flag("--keep-going", options->keep_going, "Run every seed even after one fails");
  return [options] { return run_swarm(*options); };
}

static Registration registration{"swarm", "Run the seeded fault-injecting simulation of the step path", 80,
                                 setup_swarm};

}  // namespace
}  // namespace activekv::cli
