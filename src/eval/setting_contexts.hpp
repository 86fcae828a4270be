// setting_contexts.hpp — one context per setting over one exact prefix, stepped as decode.
//
// Comparing settings fairly means each one continues from the same KV. The
// prefix (everything before the first token fed as decode) is prefilled once,
// exactly, and kept as a retained prefix; then every setting's context is
// opened with that prefix as its prompt and adopts it (in place for the first,
// a host-row copy for the rest: docs/PREFIX.md). Only the few tokens past the
// last full page are prefilled again per context, exactly. Rows do not depend
// on chunking or batching (engine_invariance_test), so every setting starts
// from bit-identical KV, and the prefill a long window needs is paid once.
//
// Then the caller feeds tokens one at a time to a setting's context (teacher
// forcing or greedy decode): each is a decode step, so sparse selection
// applies, under that setting (the runtime is switched between steps with
// set_sparse). Each step's selection statistics are the delta of the
// runtime's cumulative SparseStats around it, added to the setting's totals.
//
// Invariant: between open() and close() every setting's context is running,
// and the runtime is in the setting of the last context stepped.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "activekv/kv_runtime.hpp"
#include "engine/forward.hpp"
#include "eval/eval_setting.hpp"

namespace activekv::eval {

// What one setting's decode steps read, summed over its steps.
struct SelectionTotals {
  std::uint64_t steps = 0;         // decode steps
  std::uint64_t pages_read = 0;    // pages the kernel read, all layers (exact: every page held)
  std::uint64_t pages_held = 0;    // pages the context held, all layers (what exact reads)
  double recall_sum = 0.0;         // Σ over (step, layer) selections of the measured mass recall
  std::uint64_t recall_count = 0;  // selections measured (exact: each layer counts 1.0)
  // The measured recall per dense layer (sparse settings; layers below SparseStats::recall_layers_max).
  std::array<double, SparseStats::recall_layers_max> recall_layer_sum{};
  std::array<std::uint64_t, SparseStats::recall_layers_max> recall_layer_count{};
  // Layer budgets by the moments: Σ and count of the moments' estimate of the captured mass.
  double moment_estimate_sum = 0.0;
  std::uint64_t moment_estimate_count = 0;

  double pages_read_per_step() const noexcept { return steps == 0 ? 0.0 : double(pages_read) / double(steps); }
  double pages_held_per_step() const noexcept { return steps == 0 ? 0.0 : double(pages_held) / double(steps); }
  double mass_recall() const noexcept { return recall_count == 0 ? 0.0 : recall_sum / double(recall_count); }
  double moment_estimate() const noexcept {
    return moment_estimate_count == 0 ? 0.0 : moment_estimate_sum / double(moment_estimate_count);
  }
  void add(const SelectionTotals& o) noexcept;
};

class SettingContexts {
 public:
  // The forward pass runs over `runtime` (an EvalRig's); neither is owned.
  SettingContexts(engine::Forward& forward, KvRuntime& runtime, std::span<const EvalSetting> settings);
  ~SettingContexts();
  SettingContexts(const SettingContexts&) = delete;
  SettingContexts& operator=(const SettingContexts&) = delete;

  // Opens one context per setting of at most tokens_max tokens, each holding the
  // exact KV of `prefix` (which may be empty). Refused when the pools cannot
  // hold every setting's context at once (naming --device-pool / --host-pool).
  Status open(std::span<const engine::TokenId> prefix, std::uint32_t tokens_max);
  // One decode step of setting s: `token` appended to its context; the logits
  // that follow it (vocab floats, valid until the next step).
  Result<std::span<const float>> decode(std::uint32_t s, engine::TokenId token);
  // Finishes every open context (the runtime keeps no retained prefix of ours).
  void close();

  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(settings_.size()); }
  ContextId context(std::uint32_t s) const { return contexts_.at(s); }  // setting s's open context
  const SelectionTotals& totals(std::uint32_t s) const { return totals_.at(s); }
  // Prompt tokens prefilled, and adopted from the shared prefix, over every open().
  std::uint64_t tokens_prefilled() const noexcept { return tokens_prefilled_; }
  std::uint64_t tokens_adopted() const noexcept { return tokens_adopted_; }

 private:
  Status use_setting(std::uint32_t s);
  Status prefill(ContextId context, std::span<const engine::TokenId> tokens);
  Result<ContextId> admit(std::span<const std::int32_t> prompt, std::uint32_t tokens_max, std::uint32_t& reused);

  engine::Forward& forward_;
  KvRuntime& runtime_;
  std::vector<EvalSetting> settings_;
  std::vector<ContextId> contexts_;
  std::vector<SelectionTotals> totals_;
  std::vector<std::int32_t> prompt_;   // the prefix as the runtime's prefix index takes it
  std::uint32_t current_ = 0;          // the setting the runtime is in
  bool in_exact_ = true;               // the runtime is in exact mode (prefill)
  std::uint64_t next_request_ = 1;
  std::uint64_t tokens_prefilled_ = 0;
  std::uint64_t tokens_adopted_ = 0;
};

}  // namespace activekv::eval
