// runtime_engine_test.cpp — the engine with its KV in the ActiveKV runtime
// (host backend), on the real model (skipped, saying so, without it):
//
//   - the runtime and the contiguous oracle give the same logits (to fp32
//     rounding, amplified over 30 layers: the backend's kernel rescales in
//     blocks of 64 rows, the oracle row by row; max |Δ| ≤ 0.02 as against the
//     numpy reference) and the same greedy answers;
//   - the host history is authoritative: after the steps, every row the
//     engine wrote is in the host pool, byte for byte as encoded (f16);
//   - zero heap and zero device allocations per decode step after warm-up;
//   - budget invariance (DESIGN.md invariant 8): the logits of every decode
//     step are bit-identical with the device pool holding 100%, 25% and 5% of
//     the context, while the bytes staged differ as the budgets say (none at
//     100%, more at 5% than at 25%). Two forms:
//       * three whole engines, one per budget, 1,024-token prompt + 16 decode
//         steps, logits compared with memcmp at every step;
//       * a 2,048-token prompt + 32 generated tokens at 100/25/10% (ACTIVEKV_LONG=1:
//         the issue's scale, 4,096 + 64 at 100/25/5%, docs/TESTING.md): one
//         forward pass drives three runtimes at once (TeeKv below) and every
//         attention output of every layer of every step must be bit-identical
//         across the three. Logits are a deterministic function of those
//         outputs (everything else in the step is the same computation on the
//         same inputs), so this implies bit-identical logits, checks 30 × more
//         places, and costs one forward pass instead of three.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/memory_plan.hpp"
#include "engine/engine.hpp"
#include "engine/default_model_fixture.hpp"
#include "engine/model_path.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/runtime_kv.hpp"
#include "engine/sampler.hpp"
#include "runtime/element_codec.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

const std::vector<TokenId> kFrance = {504, 3575, 282, 4649, 314};

using testing_model::g_model;
using testing_model::g_pool;

class RuntimeEngine : public testing_model::DefaultModelOnHost {};

// A backend and a runtime sized for one context of `final_length` tokens with
// the page pool holding `fraction` of its pages.
struct RuntimeSetup {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvRuntime> runtime;
  ContextId context;
};

RuntimeSetup make_runtime(const Model& model, double fraction, std::uint32_t length, const ForwardLimits& limits,
                          bool in_place = false) {
  RuntimeSetup s;
  MemorySettings memory;
  const std::uint32_t page_tokens = 16;
  const std::uint32_t final_length = (length + page_tokens - 1) / page_tokens * page_tokens;  // whole pages
  const std::uint32_t tile_tokens = 512;
  const std::uint32_t tiles = 2;
  memory.page_tokens = page_tokens;
  memory.tile_tokens = tile_tokens;
  memory.tiles = tiles;
  memory.max_context_tokens = final_length;
  memory.max_seqs = 1;
  KvRuntimeSettings settings = runtime_settings(model, memory, limits);
  const std::uint64_t row_bytes = settings.memory.geometry.row_bytes();
  const std::uint64_t pages_needed =
      std::uint64_t{model.config().layers} * ((final_length + page_tokens - 1) / page_tokens);
  const auto pages = static_cast<std::uint64_t>(std::ceil(static_cast<double>(pages_needed) * fraction));
  settings.memory.host_pool_bytes = std::uint64_t{model.config().layers} * final_length * row_bytes;
  settings.memory.device_pool_bytes =
      4 * arena_alignment_bytes + std::uint64_t{tiles} * tile_tokens * row_bytes + pages * page_tokens * row_bytes;
  BackendOptions options;
  options.compute_threads = 2;
  Result<std::unique_ptr<Backend>> backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok()) << backend.error().describe();
  s.backend = std::move(backend).value();
  settings.read_in_place = in_place;  // history below the pool read in place in the host pool (docs/IN_PLACE.md)
  Result<std::unique_ptr<KvRuntime>> rt = KvRuntime::create(settings, *s.backend);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
  if (!rt.ok()) return s;
  s.runtime = std::move(rt).value();
  Result<AdmitResult> admitted = s.runtime->open_context(1, final_length);
  EXPECT_TRUE(admitted.ok());
  EXPECT_EQ(admitted->outcome, AdmitOutcome::admitted);
  s.context = admitted->handle;
  return s;
}

// A prompt of n token ids: ordinary vocabulary, deterministic, not a repetition.
std::vector<TokenId> long_prompt(std::uint32_t n) {
  std::vector<TokenId> out(n);
  std::uint64_t x = 12345;
  for (std::uint32_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<TokenId>(200 + (x >> 33) % 20000);
  }
  return out;
}

// Prefill in chunks, then `decode` greedy steps; calls on_logits after the prefill and after every decode step.
template <typename OnLogits>
void run_sequence(Forward& f, ContextId c, const std::vector<TokenId>& prompt, std::uint32_t decode, OnLogits on_logits) {
  const std::uint32_t chunk = f.limits().step_tokens_max;
  for (std::size_t fed = 0; fed < prompt.size(); fed += chunk) {
    const std::size_t n = std::min<std::size_t>(chunk, prompt.size() - fed);
    const StepInput in{c, std::span<const TokenId>(prompt).subspan(fed, n), fed + n == prompt.size()};
    Status s = f.step({&in, 1});
    ASSERT_TRUE(s.ok()) << s.error().describe();
  }
  on_logits(f.logits(0));
  for (std::uint32_t i = 0; i < decode; ++i) {
    const TokenId t = Sampler::argmax(f.logits(0));
    const StepInput in{c, {&t, 1}, true};
    Status s = f.step({&in, 1});
    ASSERT_TRUE(s.ok()) << s.error().describe();
    on_logits(f.logits(0));
  }
}

TEST_F(RuntimeEngine, AgreesWithTheContiguousOracle) {
  const ForwardLimits limits{8, 1};
  RuntimeSetup rs = make_runtime(*g_model, 1.0, 64, limits);
  ASSERT_NE(rs.runtime, nullptr);
  RuntimeKv kv(*rs.runtime);
  ReferenceKvAccess oracle(g_model->geometry(), g_model->config().q_heads, 16);
  const ContextId oc = oracle.open(64);
  Forward on_runtime(*g_model, kv, *g_pool, best_isa(), limits);
  Forward on_oracle(*g_model, oracle, *g_pool, best_isa(), limits);
  std::vector<std::vector<float>> a, b;
  run_sequence(on_runtime, rs.context, kFrance, 8, [&](std::span<const float> l) { a.emplace_back(l.begin(), l.end()); });
  run_sequence(on_oracle, oc, kFrance, 8, [&](std::span<const float> l) { b.emplace_back(l.begin(), l.end()); });
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t s = 0; s < a.size(); ++s) {
    float max_diff = 0.0f;
    for (std::size_t i = 0; i < a[s].size(); ++i) max_diff = std::max(max_diff, std::fabs(a[s][i] - b[s][i]));
    EXPECT_LE(max_diff, 0.02f) << "step " << s;
    EXPECT_EQ(Sampler::argmax(a[s]), Sampler::argmax(b[s])) << "step " << s;
  }
  EXPECT_EQ(g_model->file().item(*g_model->file().find("tokenizer.ggml.tokens"), Sampler::argmax(a[0])).string,
            "\xC4\xA0Paris");
}

// Passes everything to a RuntimeKv and keeps a copy of the K/V rows written to one layer.
class RecordingKv final : public KvAccess {
 public:
  RecordingKv(RuntimeKv& kv, std::uint32_t layer, std::size_t row_floats) : kv_(kv), layer_(layer), row_floats_(row_floats) {}
  std::uint32_t length(ContextId c) const override { return kv_.length(c); }
  Status begin_step(std::span<const StepEntry> entries) override {
    tokens_ = 0;
    for (const StepEntry& e : entries) tokens_ += e.tokens_new;
    return kv_.begin_step(entries);
  }
  Status write_kv(std::uint32_t layer, const float* k, const float* v) override {
    if (layer == layer_) {
      k_.insert(k_.end(), k, k + tokens_ * row_floats_);
      v_.insert(v_.end(), v, v + tokens_ * row_floats_);
    }
    return kv_.write_kv(layer, k, v);
  }
  Status attend(std::uint32_t layer, const float* q, float* out) override { return kv_.attend(layer, q, out); }
  Status end_step() override { return kv_.end_step(); }
  std::vector<float> k_, v_;  // every row written to layer_, in position order (one context)

 private:
  RuntimeKv& kv_;
  std::uint32_t layer_;
  std::size_t row_floats_;
  std::size_t tokens_ = 0;
};

TEST_F(RuntimeEngine, HostHistoryHoldsEveryRowWritten) {
  const ForwardLimits limits{16, 1};
  RuntimeSetup rs = make_runtime(*g_model, 0.5, 256, limits);
  ASSERT_NE(rs.runtime, nullptr);
  RuntimeKv inner(*rs.runtime);
  const Geometry g = g_model->geometry();
  const std::size_t row_floats = std::size_t{g.kv_heads} * g.head_dim;
  const std::uint32_t layer = g.dense_layers - 1;
  RecordingKv kv(inner, layer, row_floats);
  Forward f(*g_model, kv, *g_pool, best_isa(), limits);
  run_sequence(f, rs.context, long_prompt(40), 20, [](std::span<const float>) {});
  const std::uint32_t length = rs.runtime->length(rs.context);
  ASSERT_EQ(length, 60u);  // 40 prompt tokens + 20 decode steps of one token each
  ASSERT_EQ(kv.k_.size(), length * row_floats);
  std::vector<std::uint16_t> want(2 * row_floats);
  for (std::uint32_t t = 0; t < length; ++t) {
    for (std::size_t i = 0; i < row_floats; ++i) {
      want[i] = runtime::f32_to_f16(kv.k_[t * row_floats + i]);
      want[row_floats + i] = runtime::f32_to_f16(kv.v_[t * row_floats + i]);
    }
    const std::span<const std::byte> host = rs.runtime->host_row(rs.context, layer, t);
    ASSERT_EQ(host.size(), want.size() * sizeof(std::uint16_t));
    ASSERT_EQ(std::memcmp(host.data(), want.data(), host.size()), 0) << "token " << t;
  }
}

TEST_F(RuntimeEngine, DecodeStepsAllocateNothingAfterWarmUp) {
  const ForwardLimits limits{32, 1};
  RuntimeSetup rs = make_runtime(*g_model, 0.25, 256, limits);
  ASSERT_NE(rs.runtime, nullptr);
  RuntimeKv kv(*rs.runtime);
  Forward f(*g_model, kv, *g_pool, best_isa(), limits);
  const std::vector<TokenId> prompt = long_prompt(100);
  run_sequence(f, rs.context, prompt, 2, [](std::span<const float>) {});  // warm-up: prefill + 2 decode steps
  Sampler sampler(SamplerSettings{}, g_model->config().vocab);
  const std::uint64_t heap_before = activekv::testing::heap_allocations();
  const std::uint64_t staged_before = rs.runtime->counters().bytes_staged;
  for (int i = 0; i < 24; ++i) {
    const TokenId t = sampler.sample(f.logits(0));
    const StepInput in{rs.context, {&t, 1}, true};
    ASSERT_TRUE(f.step({&in, 1}).ok());
  }
  EXPECT_EQ(activekv::testing::heap_allocations(), heap_before) << "heap allocations in 24 decode steps";
  EXPECT_EQ(rs.runtime->counters().device_allocations_after_warmup, 0u);
  EXPECT_GT(rs.runtime->counters().bytes_staged, staged_before) << "25% pool: decode must stage history";
}

TEST_F(RuntimeEngine, LogitsAreBitIdenticalForEveryBudget) {
  // Chunks of 16 keep the floor (sink + the pages one step writes = 3 pages per
  // layer) inside 5% of a 1,056-token context (3.3 pages per layer).
  const ForwardLimits limits{16, 1};
  const std::vector<TokenId> prompt = long_prompt(1024);
  const std::uint32_t decode = 16;
  const std::uint32_t final_length = static_cast<std::uint32_t>(prompt.size()) + decode + 1;
  std::vector<std::vector<float>> logits[3];
  std::uint64_t staged[3] = {};
  const double fractions[3] = {1.0, 0.25, 0.05};
  for (int b = 0; b < 3; ++b) {
    RuntimeSetup rs = make_runtime(*g_model, fractions[b], final_length, limits);
    ASSERT_NE(rs.runtime, nullptr);
    RuntimeKv kv(*rs.runtime);
    Forward f(*g_model, kv, *g_pool, best_isa(), limits);
    run_sequence(f, rs.context, prompt, decode, [&](std::span<const float> l) { logits[b].emplace_back(l.begin(), l.end()); });
    staged[b] = rs.runtime->counters().bytes_staged;
    std::printf("pool %3.0f%%: bytes staged %llu\n", fractions[b] * 100, static_cast<unsigned long long>(staged[b]));
  }
  for (int b = 1; b < 3; ++b) {
    ASSERT_EQ(logits[b].size(), logits[0].size());
    for (std::size_t s = 0; s < logits[0].size(); ++s)
      ASSERT_EQ(std::memcmp(logits[b][s].data(), logits[0][s].data(), logits[0][s].size() * sizeof(float)), 0)
          << "pool " << fractions[b] * 100 << "%: step " << s;
  }
  EXPECT_EQ(staged[0], 0u);
  EXPECT_GT(staged[1], 0u);
  EXPECT_GT(staged[2], staged[1]);
}

// One forward pass, three runtimes: rows go to all, attention runs in all and
// must agree bit for bit; the first runtime's output continues the pass.
class TeeKv final : public KvAccess {
 public:
  TeeKv(std::vector<RuntimeKv*> kvs, std::size_t out_floats) : kvs_(std::move(kvs)), scratch_(out_floats) {}
  std::uint32_t length(ContextId c) const override { return kvs_[0]->length(c); }
  Status begin_step(std::span<const StepEntry> entries) override {
    for (RuntimeKv* kv : kvs_)
      if (Status s = kv->begin_step(entries); !s) return s;
    floats_ = 0;
    for (const StepEntry& e : entries) floats_ += e.tokens_new;
    return Status::success();
  }
  Status write_kv(std::uint32_t layer, const float* k, const float* v) override {
    for (RuntimeKv* kv : kvs_)
      if (Status s = kv->write_kv(layer, k, v); !s) return s;
    return Status::success();
  }
  Status attend(std::uint32_t layer, const float* q, float* out) override {
    if (Status s = kvs_[0]->attend(layer, q, out); !s) return s;
    for (std::size_t i = 1; i < kvs_.size(); ++i) {
      if (Status s = kvs_[i]->attend(layer, q, scratch_.data()); !s) return s;
      ++compared_;
      if (std::memcmp(scratch_.data(), out, floats_ * q_floats_ * sizeof(float)) != 0) ++mismatches_;
    }
    return Status::success();
  }
  Status end_step() override {
    for (RuntimeKv* kv : kvs_)
      if (Status s = kv->end_step(); !s) return s;
    return Status::success();
  }
  void set_query_floats(std::size_t q) { q_floats_ = q; }
  std::uint64_t compared() const { return compared_; }
  std::uint64_t mismatches() const { return mismatches_; }

 private:
  std::vector<RuntimeKv*> kvs_;
  std::vector<float> scratch_;
  std::size_t floats_ = 0;  // tokens this step
  std::size_t q_floats_ = 0;
  std::uint64_t compared_ = 0, mismatches_ = 0;
};

// Runtimes of the same model, one per (device pool fraction, read in place), behind one TeeKv:
// the first drives the forward pass and every attention output of the others is compared with its
// bits. `tee` stays empty when a runtime could not be made or the context handles differ (the tee
// needs the same handle in every runtime).
struct TeeCase {
  double fraction;  // of the context's pages in the device pool
  bool in_place;    // history below the pool read in place in the host pool
};

struct TeedRuntimes {
  std::vector<RuntimeSetup> setups;
  std::vector<std::unique_ptr<RuntimeKv>> kvs;
  std::unique_ptr<TeeKv> tee;
};

TeedRuntimes make_teed(std::span<const TeeCase> cases, std::uint32_t length, const ForwardLimits& limits) {
  TeedRuntimes t;
  std::vector<RuntimeKv*> raw;
  for (const TeeCase& c : cases) {
    t.setups.push_back(make_runtime(*g_model, c.fraction, length, limits, c.in_place));
    if (t.setups.back().runtime == nullptr || !(t.setups.back().context == t.setups.front().context)) return t;
    t.kvs.push_back(std::make_unique<RuntimeKv>(*t.setups.back().runtime));
    raw.push_back(t.kvs.back().get());
  }
  const std::size_t q_floats = std::size_t{g_model->config().q_heads} * g_model->config().head_dim;
  t.tee = std::make_unique<TeeKv>(raw, limits.step_tokens_max * q_floats);
  t.tee->set_query_floats(q_floats);
  return t;
}

// The suite's size halves the prompt and the decode steps; its smallest pool is 10% of the context,
// the same pages per layer (13) as 5% at the issue's scale, above the floor of 128-token chunks
// (10 pages per layer). ACTIVEKV_LONG=1 runs the issue's own 4,096 + 64 with 5%.
TEST_F(RuntimeEngine, LongPromptIsBudgetInvariant) {
  const bool issue_scale = std::getenv("ACTIVEKV_LONG") != nullptr;
  const ForwardLimits limits{128, 1};
  const std::vector<TokenId> prompt = long_prompt(issue_scale ? 4096 : 2048);
  const std::uint32_t decode = issue_scale ? 64 : 32;
  const std::uint32_t final_length = static_cast<std::uint32_t>(prompt.size()) + decode + 1;
  const TeeCase cases[3] = {{1.0, false}, {0.25, false}, {issue_scale ? 0.05 : 0.10, false}};
  TeedRuntimes t = make_teed(cases, final_length, limits);
  ASSERT_NE(t.tee, nullptr) << "every runtime made, with the same context handle";
  const std::vector<RuntimeSetup>& rs = t.setups;
  TeeKv& tee = *t.tee;
  Forward f(*g_model, tee, *g_pool, best_isa(), limits);
  std::uint32_t steps_with_logits = 0;
  run_sequence(f, rs[0].context, prompt, decode, [&](std::span<const float>) { ++steps_with_logits; });
  EXPECT_EQ(steps_with_logits, decode + 1);
  EXPECT_EQ(tee.mismatches(), 0u) << "attention outputs that differed between budgets";
  const std::uint64_t layers = g_model->config().layers;
  const std::uint64_t steps = (prompt.size() + limits.step_tokens_max - 1) / limits.step_tokens_max + decode;
  EXPECT_EQ(tee.compared(), 2 * layers * steps);
  std::uint64_t staged[3];
  for (int b = 0; b < 3; ++b) {
    staged[b] = rs[b].runtime->counters().bytes_staged;
    std::printf("pool %3.0f%%: bytes staged %llu, pages resident/staged (last step) %llu/%llu\n", cases[b].fraction * 100,
                static_cast<unsigned long long>(staged[b]),
                static_cast<unsigned long long>(rs[b].runtime->counters().pages_resident_last),
                static_cast<unsigned long long>(rs[b].runtime->counters().pages_staged_last));
  }
  EXPECT_EQ(staged[0], 0u);
  EXPECT_GT(staged[1], 0u);
  EXPECT_GT(staged[2], staged[1]);
}

// Read in place (the engine's path on the host backend, docs/IN_PLACE.md): one forward pass over a
// 1,024-token prompt and 16 decode steps, attention in five runtimes — 100% staged (driving the
// pass), 25% and 5% read in place, 25% and 5% staged — every attention output the same bits.
TEST_F(RuntimeEngine, ReadInPlaceIsBudgetInvariant) {
  const ForwardLimits limits{16, 1};  // the 5% pool's floor, as in LogitsAreBitIdenticalForEveryBudget
  const std::vector<TokenId> prompt = long_prompt(1024);
  const std::uint32_t decode = 16;
  const std::uint32_t final_length = static_cast<std::uint32_t>(prompt.size()) + decode + 1;
  const TeeCase cases[5] = {{1.0, false}, {0.25, true}, {0.05, true}, {0.25, false}, {0.05, false}};
  TeedRuntimes t = make_teed(cases, final_length, limits);
  ASSERT_NE(t.tee, nullptr) << "every runtime made, with the same context handle";
  const std::vector<RuntimeSetup>& rs = t.setups;
  TeeKv& tee = *t.tee;
  Forward f(*g_model, tee, *g_pool, best_isa(), limits);
  run_sequence(f, rs[0].context, prompt, decode, [](std::span<const float>) {});
  EXPECT_EQ(tee.mismatches(), 0u) << "attention outputs that differed between budgets or paths";
  EXPECT_GT(tee.compared(), 0u);
  for (int b = 1; b < 5; ++b) {
    const KvCounters& c = rs[b].runtime->counters();
    EXPECT_GT(c.pages_staged, 0u) << "pool " << cases[b].fraction * 100 << "%: the history must outgrow the pool";
    EXPECT_EQ(c.pages_in_place, cases[b].in_place ? c.pages_staged : 0u);
    EXPECT_EQ(c.bytes_staged == 0, cases[b].in_place);
    EXPECT_EQ(c.heap_allocations_in_steps, 0u) << "invariant 7";
    EXPECT_EQ(c.device_allocations_after_warmup, 0u);
  }
}

}  // namespace
}  // namespace activekv::engine
