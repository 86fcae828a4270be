// sim_options.hpp — `activekv sim`'s command line, turned into a validated configuration.
//
// The CLI file declares the options (CLI11) and hands their text here, so every
// refusal is an Error that names the option and is tested like any other input:
// an unknown scenario, a size that does not parse, an automatic --headroom, a
// length above max context, a concurrency of 0, an arena that does not fit the card.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "activekv/result.hpp"
#include "sim/saturation.hpp"
#include "sim/scenario.hpp"
#include "sim/sweep.hpp"

namespace activekv::sim {

struct SimOptions {
  std::string scenario = "hybrid-27b";
  std::string out_dir;              // --out: write index.html, results.json, report.txt there
  bool json = false;                // --json: print JSON instead of tables
  bool quick = false;               // --quick: a reduced sweep and a short saturation run
  bool no_probes = false;           // --no-probes: skip the fine crossover probes
  bool no_saturation = false;       // --no-saturation
  std::string lengths;              // --lengths 1024,4096,32768
  std::string concurrency;          // --concurrency 1,8,32
  std::string steps;                // --steps: measured decode steps per cell
  std::string host_pool, device_pool, headroom;
  std::string saturation_steps, prompt_tokens, output_tokens, prefill_workspace;
};

struct SimConfig {
  Scenario scenario;
  SweepOptions sweep;
  std::optional<SaturationSettings> saturation;
  std::string out_dir;
  bool json = false;
};

Result<SimConfig> make_sim_config(const SimOptions& options);

}  // namespace activekv::sim
