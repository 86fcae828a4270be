// eval_setting.hpp — the attention settings `activekv eval` compares, and their names.
//
// An evaluation always runs exact attention first (the baseline every other
// setting is compared with), then each sparse setting the command line asked
// for, in the order given: fixed page budgets (--sparse-pages N), fixed shares
// of the context's pages (--sparse-fraction F) and the adaptive budget
// (--sparse-adaptive). With none asked for, the default comparison is exact
// against 1/2, 1/4, 1/8 and 1/16 of the pages and adaptive. Sparse settings use
// per-KV-head page lists where the backend reads them; --sparse-one-list adds,
// after each, the same setting with one list for all heads (the comparison).
//
// Every sparse setting runs in the runtime's measure mode: the kernel also
// reads every page so that the attention-mass recall of the selection is exact
// rather than estimated (SparseSettings::measure). Measuring costs time, never
// changes the selection or the output.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "activekv/kv_runtime.hpp"
#include "activekv/result.hpp"

namespace activekv::eval {

inline constexpr std::uint32_t settings_max = 16;  // settings in one evaluation, exact included

struct EvalSetting {
  std::string name;        // "exact", "fraction 1/8", "fraction 0.3", "pages 64", "adaptive"
  SparseSettings sparse;   // mode exact for the baseline; measure on for every sparse one
};

// What the command line asked for (each list in the order given).
struct SettingRequest {
  std::vector<float> fractions;       // --sparse-fraction, each in (0, 1]
  std::vector<std::uint32_t> pages;   // --sparse-pages, each ≥ 1
  bool adaptive = false;              // --sparse-adaptive
  bool one_list = false;              // --sparse-one-list: each sparse setting also with one page list
                                      //   per (context, layer) for all KV heads ("… one list")
  bool layer_budget = false;          // --sparse-layer-budget: each fixed budget also spread over the
                                      //   layers by their missed mass ("… layers")
  // --sparse-score: each sparse setting runs once per score named here, in the order given
  // ("bound", "moments", "mixed", "oracle"; empty: the bound only). A setting with a score other than the
  // bound is named with it ("fraction 1/8 oracle"). "oracle" is an analysis setting (the true
  // attention mass from an exact pass), not a policy.
  std::vector<std::string> scores;
  // --sparse-layer-signal (with --sparse-layer-budget): each fixed budget gets one layered setting
  // per signal named here, in the order given ("captured": the measured recall in eval, named
  // "… layers"; "moments": the moments' estimate, deployable, named "… layers by moments");
  // empty: captured only.
  std::vector<std::string> layer_signals;
  // --sparse-per-head: each sparse setting (and its layered ones) also with per-query-head
  // rankings (SparseSettings::per_head, named "… heads").
  bool per_head = false;
  // --sparse-heavy: each fixed-budget setting (and its layered ones) also with the heavy hitters
  // kept (SparseSettings::heavy_hitters, named "… heavy").
  bool heavy = false;
  // --sparse-mix: the mixed score once per moments' weight named here, in (0, 1), in the order given
  // (named "… mixed 0.7"); empty: ½ only (named "… mixed").
  std::vector<float> mix_weights;
  // --sparse-recent N: every sparse setting always reads the newest N pages (SparseSettings::
  // recent_pages, in [1, 64]) instead of the default 2, named "… recent N"; 0: the default.
  std::uint32_t recent_pages = 0;
  // --exact-only: exact alone, no sparse setting (a model with sliding-window layers, whose rings
  // sparse selection does not cover, or a perplexity against another implementation).
  bool exact_only = false;
};

// Exact first, then the requested settings (the default set when none was
// requested). Refused, naming the flag: a fraction outside (0, 1] or not a
// number, a page budget of 0, more than settings_max settings, a setting asked
// twice, a score that is not bound, moments, mixed or oracle, a layer signal that is not captured
// or moments or given twice, or given without --sparse-layer-budget; --exact-only with a sparse setting.
Result<std::vector<EvalSetting>> make_settings(const SettingRequest& request);

// "1/8" for a fraction that is the inverse of a whole number, else the decimal.
std::string fraction_name(float fraction);

}  // namespace activekv::eval
