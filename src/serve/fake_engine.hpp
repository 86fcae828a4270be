// fake_engine.hpp — a tiny deterministic model behind the StepEngine table, for tests.
//
// Each context's state is a 64-bit hash of every token fed to it, in order;
// the "sampled" next token is a function of that hash. So a context's output
// depends on its whole sequence and nothing else: if the scheduler dropped,
// repeated, reordered or misrouted a single prefill chunk or decode token, the
// output would differ from the same request run alone. Admission follows the
// design's rules with small numbers: a free history (histories of them) and a
// floor (sink + tail page per dense layer) that fits in the page pool beside
// the other floors. Pages above the floor are handed out to targets and then
// bursts in admission order each step; what is needed but not held counts as
// staged. Costs advance a ManualClock, so latencies are exact in tests.
//
// Every table is sized at construction; step() does not allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "serve/clock.hpp"
#include "serve/step_engine.hpp"

namespace activekv::serve {

struct FakeEngineConfig {
  std::uint32_t histories = 4;            // host-pool histories
  std::uint32_t max_seqs = 8;
  std::uint32_t max_context_tokens = 2048;
  std::uint32_t dense_layers = 4;
  std::uint32_t page_tokens = 16;
  std::uint32_t pool_pages = 256;         // device page pool
  std::uint32_t target_pages = 32;        // per context, all layers
  std::uint32_t burst_pages = 64;
  std::uint32_t row_bytes = 64;
  std::int32_t eos_token = -1;            // -1: never ends early
  ManualClock* clock = nullptr;           // advanced by each step when set
  double step_cost_s = 0.002;
  double token_cost_s = 0.0001;
  double wall_sleep_s = 0;                // real seconds each step sleeps (a server's load test paces with it)
};

class FakeEngine final : public StepEngine {
 public:
  explicit FakeEngine(const FakeEngineConfig& config);

  const EnginePlan& plan() const override { return plan_; }
  std::string plan_text() const override;
  std::string plan_json() const override;
  Result<std::vector<std::int32_t>> encode(std::string_view text) override;
  std::string decode(std::span<const std::int32_t> tokens) override;
  Admission admit(std::uint32_t tokens_max) override;
  // The fake model's token is a function of the sequence's hash: it has no
  // distribution to sample from, so every context stays deterministic.
  void set_sampling(ContextHandle, const SamplingSettings&) override {}
  void finish(ContextHandle context) override;
  void cancel(ContextHandle context) override;
  Status step(std::span<const BatchEntry> batch, std::span<std::int32_t> tokens_out) override;
  ContextPages pages(ContextHandle context) const override;
  EngineCounters counters() const override { return counters_; }
  bool all_returned() const override;

  std::uint32_t live_contexts() const noexcept { return live_; }
  std::uint64_t cancels() const noexcept { return cancels_; }
  std::uint64_t finishes() const noexcept { return finishes_; }

 private:
  struct Slot {
    bool live = false;
    std::uint32_t generation = 0;
    std::uint64_t hash = 0;
    std::uint32_t tokens_fed = 0;
    std::uint32_t tokens_max = 0;
    std::uint32_t held = 0;
    std::uint32_t held_before = 0;  // during rebalance(): held when it began
    std::uint64_t admitted_order = 0;
  };
  Slot& slot(ContextHandle context);
  const Slot& slot(ContextHandle context) const;
  void release(ContextHandle context);
  void rebalance();
  std::uint32_t floor_pages() const noexcept { return 2 * config_.dense_layers; }
  std::uint32_t needed_pages(const Slot& s) const noexcept;

  FakeEngineConfig config_;
  EnginePlan plan_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> order_;  // live slot indices by admission
  std::uint32_t live_ = 0;
  std::uint64_t admissions_ = 0;
  std::uint64_t cancels_ = 0;
  std::uint64_t finishes_ = 0;
  EngineCounters counters_{};
};

}  // namespace activekv::serve
