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
// Prefix reuse (prefix_reuse = true), with the runtime's rules (docs/PREFIX.md):
// a finished context's full pages stay retained in its history (the tokens fed
// and the hash state at each page boundary); a prompt that starts with them
// adopts them — in place when the history is free, copied when a running
// context holds them — and its hash resumes from the retained page's state, so
// an adoption of the wrong tokens or a prefill that does not resume at the
// right offset changes the output. A history that holds a retained prefix is
// taken by admission only when no other is free, least recently used first,
// and its prefix is dropped and counted: retained histories never block.
//
// Every table is sized at construction; step() does not allocate.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "serve/clock.hpp"
#include "serve/step_engine.hpp"

namespace activekv::serve {

struct FakeEngineConfig {
  std::uint32_t histories = 4;            // host-pool histories a context may run in
  std::uint32_t retained_histories = 0;   // more histories that only keep retained prefixes (never run one)
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
  bool prefix_reuse = false;              // retain finished histories' full pages; adopt them
  std::uint32_t tier_pending_admits = 0;  // each prompt's first N admit() calls say tier_pending (a KV tier lookup in flight)
};

class FakeEngine final : public StepEngine {
 public:
  explicit FakeEngine(const FakeEngineConfig& config);

  const EnginePlan& plan() const override { return plan_; }
  std::string plan_text() const override;
  std::string plan_json() const override;
  Result<std::vector<std::int32_t>> encode(std::string_view text) override;
  std::string decode(std::span<const std::int32_t> tokens) override;
  Admission admit(std::span<const std::int32_t> prompt, std::uint32_t tokens_max) override;
  void wait_admission(std::uint32_t) override { ++tier_waits_; }
  std::uint32_t tier_waits() const noexcept { return tier_waits_; }  // wait_admission() calls (tests)
  // Prefetch (tests): calls that started one, the most contexts running at such a call, drops.
  bool prefetch(std::span<const std::int32_t>) override {
    ++prefetches_;
    prefetch_running_max_ = std::max(prefetch_running_max_, live_);
    return true;
  }
  void drop_prefetch(std::span<const std::int32_t>) override { ++prefetch_drops_; }
  std::uint32_t prefetches() const noexcept { return prefetches_; }
  std::uint32_t prefetch_running_max() const noexcept { return prefetch_running_max_; }
  std::uint32_t prefetch_drops() const noexcept { return prefetch_drops_; }
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
    std::vector<std::int32_t> fed;          // tokens fed, in order (capacity max context)
    std::vector<std::uint64_t> page_hash;   // hash state after each full page (capacity max context / P)
    std::uint32_t retained_pages = 0;       // full pages indexed as a retained prefix
    std::uint64_t retained_stamp = 0;       // recency of the retained prefix
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
  // The slot with the longest retained prefix of `prompt` (full pages, at most pages_max); pages 0: none.
  std::uint32_t longest_prefix(std::span<const std::int32_t> prompt, std::uint32_t pages_max, std::uint32_t& pages) const;
  std::uint32_t free_slot_for(std::uint32_t preferred) const;
  void drop_retained(Slot& s);

  FakeEngineConfig config_;
  EnginePlan plan_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> order_;  // live slot indices by admission
  std::uint32_t live_ = 0;
  std::uint64_t admissions_ = 0;
  std::uint64_t cancels_ = 0;
  std::uint64_t finishes_ = 0;
  std::uint64_t retain_stamp_ = 0;
  EngineCounters counters_{};
  const std::int32_t* tier_prompt_ = nullptr;  // the prompt tier_left_ counts for
  std::uint32_t tier_left_ = 0;
  std::uint32_t tier_waits_ = 0;
  std::uint32_t prefetches_ = 0, prefetch_running_max_ = 0, prefetch_drops_ = 0;
};

}  // namespace activekv::serve
