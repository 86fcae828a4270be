// recurrent_state_test.cpp — a hybrid model's recurrent state in the KV runtime (kv_runtime_state.cpp).
//
// No model: a toy recurrence stands in for the recurrent layers. Its state is `state_bytes` bytes of
// 64-bit words, each token t at position p folds into every word (w = mix(w ^ t ^ p ^ i)), so the
// state after n tokens is a function of exactly those n tokens, and any lost, stale or misplaced
// byte shows. The dense layers' rows are a function of the tokens up to theirs, as in
// prefix_reuse_test.cpp. Checked:
//   - the plan: slots per running context, checkpoints per history in the host formula;
//   - recurrent_state(): zero for a fresh context, refused outside a step and without a state;
//   - a state written in a step survives leaving (finish with retention) and comes back byte for
//     byte in the follow-up that adopts the history; its output continues as without reuse;
//   - a property test over seeds: random conversations, chunkings and K, with backend faults in
//     some seeds: every adopted length is a checkpoint (the restored state equals the toy state at
//     that length), check() holds after every operation, no heap allocation in steps, every slot
//     back at the end. ACTIVEKV_STATE_SEEDS sets the number of seeds (default 300);
//   - the same through the host prefix cache with one history: every adoption from it lands on a
//     cached state equal to the toy state of the prompt's tokens there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"

namespace activekv {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr std::uint64_t state_bytes = 96;  // 12 words: a toy recurrent state

void fold(std::span<std::byte> state, std::int32_t token, std::uint32_t position) {
  for (std::size_t i = 0; i < state.size() / 8; ++i) {
    std::uint64_t w;
    std::memcpy(&w, state.data() + 8 * i, 8);
    w = mix(w ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(token)) << 20) ^ position ^ (i << 56));
    std::memcpy(state.data() + 8 * i, &w, 8);
  }
}

std::vector<std::byte> toy_state(const std::vector<std::int32_t>& tokens, std::uint32_t n) {
  std::vector<std::byte> s(state_bytes, std::byte{0});
  for (std::uint32_t p = 0; p < n; ++p) fold(s, tokens[p], p);
  return s;
}

struct Hybrid {
  Geometry g;
  std::uint32_t page_tokens = 4;
  std::uint32_t chunk_tokens = 8;
  std::uint32_t max_context = 64;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvRuntime> rt;
};

KvRuntimeSettings hybrid_settings(const Geometry& g, std::uint32_t histories, std::uint32_t checkpoint_pages,
                                  std::uint64_t prefix_cache_bytes = 0) {
  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = g;
  m.page_tokens = 4;
  m.tile_tokens = 8;
  m.tiles = 2;
  m.max_context_tokens = 64;
  m.max_seqs = histories;
  m.chunk_tokens = 8;
  m.state_checkpoint_pages = checkpoint_pages;
  m.state_checkpoints = true;  // as create() sets it with prefix reuse on
  MemorySettings probe = m;
  m.host_pool_bytes = std::uint64_t{histories} * (std::uint64_t{g.dense_layers} * 64 * g.row_bytes() +
                                                   state_bytes_per_history(probe));
  m.prefix_cache_bytes = prefix_cache_bytes;  // carved off the pool first: half of it states
  m.host_pool_bytes += prefix_cache_bytes;
  const std::uint64_t floor_pages = std::uint64_t{g.dense_layers} * (1 + pages_spanned_max(8, 4));
  m.device_pool_bytes = 8 * arena_alignment_bytes + std::uint64_t{m.tiles} * 8 * g.row_bytes() +
                        (floor_pages * histories + 8) * 4 * g.row_bytes() + std::uint64_t{histories} * g.recurrent_state_bytes;
  settings.q_heads = 2;
  settings.prefix_reuse = true;
  return settings;
}

Hybrid make_hybrid(std::uint32_t histories, std::uint32_t checkpoint_pages, std::uint64_t seed = 1,
                   FaultRates faults = {}, std::uint64_t prefix_cache_bytes = 0) {
  Hybrid h;
  h.g = Geometry{2, 3, 1, 8, DType::f16, state_bytes};
  BackendOptions options;
  options.deterministic = true;
  options.seed = seed;
  options.faults = faults;
  auto backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok());
  h.backend = std::move(backend).value();
  auto rt = KvRuntime::create(hybrid_settings(h.g, histories, checkpoint_pages, prefix_cache_bytes), *h.backend);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
  if (rt.ok()) h.rt = std::move(rt).value();
  return h;
}

// One step of n tokens of `tokens` from `first` for c: rows, attention, and the toy recurrence on
// the runtime's state. Returns the step's status (faults are expected in some seeds).
Status step(Hybrid& h, ContextId c, const std::vector<std::int32_t>& tokens, std::uint32_t first, std::uint32_t n) {
  const StepEntry e{c, n};
  if (Status s = h.rt->begin_step({&e, 1}); !s.ok()) return s;
  Result<std::span<std::byte>> state = h.rt->recurrent_state(c);
  AK_ASSERT(state.ok(), "test: a context in the step has a state");
  AK_ASSERT(state->size() == state_bytes, "test: the state has the geometry's bytes");
  for (std::uint32_t i = 0; i < n; ++i) fold(*state, tokens[first + i], first + i);
  const std::size_t row = std::size_t{h.g.kv_heads} * h.g.head_dim, qe = 2u * h.g.head_dim;
  std::vector<float> k(n * row), v(n * row), q(n * qe, 0.25f), out(n * qe);
  Status result = Status::success();
  for (std::uint32_t l = 0; l < h.g.dense_layers; ++l) {
    for (std::uint32_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < row; ++j) {
        const std::uint64_t x = mix(static_cast<std::uint64_t>(tokens[first + i]) * 31 + (first + i) * 7 + l * 1000 + j);
        k[i * row + j] = static_cast<float>(x % 2001) / 1000.0f - 1.0f;
        v[i * row + j] = static_cast<float>((x >> 20) % 2001) / 1000.0f - 1.0f;
      }
    }
    if (Status s = h.rt->write_kv(l, k.data(), v.data()); !s.ok() && result.ok()) result = s;
    if (Status s = h.rt->attend(l, q.data(), out.data()); !s.ok() && result.ok()) result = s;
  }
  if (Status s = h.rt->end_step(); !s.ok() && result.ok()) result = s;
  return result;
}

// The state a step of c sees at its start; the step (one token at `first`) runs to its end, and
// `ok` says whether it succeeded (faults are injected in some seeds).
std::vector<std::byte> state_at_step_start(Hybrid& h, ContextId c, const std::vector<std::int32_t>& tokens,
                                           std::uint32_t first, bool* ok = nullptr) {
  const StepEntry e{c, 1};
  bool good = h.rt->begin_step({&e, 1}).ok();
  std::vector<std::byte> copy;
  if (good) {
    Result<std::span<std::byte>> state = h.rt->recurrent_state(c);
    copy.assign(state->begin(), state->end());
    fold(*state, tokens[first], first);
    const std::size_t row = std::size_t{h.g.kv_heads} * h.g.head_dim, qe = 2u * h.g.head_dim;
    std::vector<float> k(row, 0.5f), v(row, -0.5f), q(qe, 0.25f), out(qe);
    for (std::uint32_t l = 0; l < h.g.dense_layers; ++l) {
      good = h.rt->write_kv(l, k.data(), v.data()).ok() && good;
      good = h.rt->attend(l, q.data(), out.data()).ok() && good;
    }
    good = h.rt->end_step().ok() && good;
  }
  if (ok != nullptr) *ok = good;
  else EXPECT_TRUE(good);
  return copy;
}

std::vector<std::int32_t> tokens_of(std::uint32_t n, std::uint64_t seed) {
  std::vector<std::int32_t> t(n);
  for (std::uint32_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>(mix(seed * 7919 + i) % 30000);
  return t;
}

// Prefill [from, to) in chunks of at most chunk_tokens, each cut at the runtime's next checkpoint.
Status prefill(Hybrid& h, ContextId c, const std::vector<std::int32_t>& tokens, std::uint32_t from, std::uint32_t to,
               std::uint32_t chunk) {
  for (std::uint32_t at = from; at < to;) {
    const std::uint32_t n = std::min({chunk, to - at, h.rt->tokens_to_checkpoint(c)});
    if (Status s = step(h, c, tokens, at, n); !s.ok()) return s;
    at += n;
  }
  return Status::success();
}

TEST(RecurrentStatePlan, SlotsPerRunningContextAndCheckpointsInTheHostFormula) {
  Geometry g{2, 3, 1, 8, DType::f16, state_bytes};
  KvRuntimeSettings s = hybrid_settings(g, 3, 4);
  s.memory.retained_histories = 1;
  s.memory.host_pool_bytes += 2 * g.dense_layers * 64 * g.row_bytes();  // room for more than needed
  Result<MemoryPlan> plan = make_memory_plan(s.memory);
  ASSERT_TRUE(plan.ok()) << plan.error().describe();
  // 64 tokens / (4 pages × 4 tokens) = 4 K-page checkpoints, + newest + prompt.
  EXPECT_EQ(plan->state.checkpoints, 6u);
  EXPECT_EQ(plan->state.bytes_per_history, 6 * state_bytes);
  EXPECT_EQ(plan->arena.recurrent_slots, plan->host.concurrency) << "one slot per running context, not per history";
  EXPECT_EQ(plan->state.histories, plan->host.history_slots);
  EXPECT_LE(plan->host.used_bytes, plan->host.host_pool_bytes);
  EXPECT_EQ(plan->state.offset + plan->state.bytes, plan->host.used_bytes);
  // The state area counts against the histories: a pool one state area short holds one history fewer.
  KvRuntimeSettings tight = hybrid_settings(g, 3, 4);
  tight.memory.host_pool_bytes -= 1;
  Result<MemoryPlan> fewer = make_memory_plan(tight.memory);
  ASSERT_TRUE(fewer.ok());
  EXPECT_EQ(fewer->host.histories, 2u);
  const std::string text = format_memory_plan(*plan);
  EXPECT_NE(text.find("checkpoints"), std::string::npos) << text;
}

TEST(RecurrentState, ZeroForAFreshContextAndRefusedOutsideAStep) {
  Hybrid h = make_hybrid(2, 0);
  ASSERT_TRUE(h.rt);
  Result<AdmitResult> a = h.rt->open_context(1, 64);
  ASSERT_TRUE(a.ok());
  const ContextId c = a->handle;
  EXPECT_FALSE(h.rt->recurrent_state(c).ok()) << "outside a step";
  const std::vector<std::int32_t> t = tokens_of(8, 1);
  const std::vector<std::byte> start = state_at_step_start(h, c, t, 0);
  EXPECT_EQ(start, std::vector<std::byte>(state_bytes, std::byte{0}));
  EXPECT_EQ(h.rt->explain(c).recurrent_slot == UINT32_MAX, false);
  EXPECT_EQ(h.rt->check(), nullptr);
  h.rt->finish(c);
  EXPECT_EQ(h.rt->check(), nullptr);
}

TEST(RecurrentState, RefusedWithoutRecurrentLayers) {
  BackendOptions options;
  options.deterministic = true;
  auto backend = make_backend("host", options);
  ASSERT_TRUE(backend.ok());
  Geometry g{2, 0, 1, 8, DType::f16, 0};
  KvRuntimeSettings s = hybrid_settings(g, 1, 0);
  auto rt = KvRuntime::create(s, **backend);
  ASSERT_TRUE(rt.ok()) << rt.error().describe();
  Result<AdmitResult> a = (*rt)->open_context(1, 64);
  const StepEntry e{a->handle, 1};
  ASSERT_TRUE((*rt)->begin_step({&e, 1}).ok());
  Result<std::span<std::byte>> state = (*rt)->recurrent_state(a->handle);
  ASSERT_FALSE(state.ok());
  EXPECT_NE(state.error().describe().find("no recurrent state"), std::string::npos) << state.error().describe();
  EXPECT_EQ((*rt)->tokens_to_checkpoint(a->handle), UINT32_MAX);
}

TEST(RecurrentState, SurvivesLeavingAndComesBackInTheFollowUp) {
  Hybrid h = make_hybrid(2, 0);
  ASSERT_TRUE(h.rt);
  std::vector<std::int32_t> convo = tokens_of(40, 3);
  const std::vector<std::int32_t> prompt(convo.begin(), convo.begin() + 23);
  std::uint32_t reused = 1;
  Result<AdmitResult> a = h.rt->open_context(1, 64, prompt, reused);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reused, 0u);
  const ContextId c = a->handle;
  // The prompt's checkpoint lies at its last whole page before its last token: 20.
  EXPECT_EQ(h.rt->tokens_to_checkpoint(c), 20u);
  ASSERT_TRUE(prefill(h, c, convo, 0, 23, 8).ok());
  // Decode to 30: page boundaries 24 and 28 are reached by one-token steps.
  for (std::uint32_t p = 23; p < 30; ++p) ASSERT_TRUE(step(h, c, convo, p, 1).ok());
  EXPECT_GE(h.rt->counters().state_checkpoints, 3u) << "prompt (20), 24, 28";
  const Explanation before = h.rt->explain(c);
  EXPECT_EQ(before.state_checkpoint_newest, 28u);
  h.rt->finish_retaining(c, std::span<const std::int32_t>(convo.data(), 30));
  ASSERT_EQ(h.rt->check(), nullptr);

  // The follow-up: the whole conversation so far and more. It adopts up to the newest checkpoint
  // at or before its match (28 of 30 retained tokens) with the state at 28, byte for byte.
  std::uint32_t reused_b = 0;
  const std::vector<std::int32_t> follow(convo.begin(), convo.begin() + 40);
  Result<AdmitResult> b = h.rt->open_context(2, 64, follow, reused_b);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused_b, 28u);
  EXPECT_EQ(h.rt->length(b->handle), 28u);
  EXPECT_EQ(h.rt->counters().state_restores, 1u);
  const Explanation e = h.rt->explain(b->handle);
  EXPECT_EQ(e.state_restored_tokens, 28u);
  EXPECT_NE(explanation_text(e).find("restored from the checkpoint at token 28"), std::string::npos) << explanation_text(e);
  EXPECT_EQ(state_at_step_start(h, b->handle, convo, 28), toy_state(convo, 28));
  // A second follow-up that shares only the prompt's first 22 tokens adopts the prompt's checkpoint (20).
  std::vector<std::int32_t> other(convo.begin(), convo.begin() + 22);
  other.push_back(99999);
  other.push_back(4);
  std::uint32_t reused_c = 0;
  Result<AdmitResult> d = h.rt->open_context(3, 64, other, reused_c);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused_c, 20u) << "copied from the running follow-up's history: its checkpoint at the prompt's page";
  EXPECT_EQ(state_at_step_start(h, d->handle, other, 20), toy_state(other, 20));
  EXPECT_EQ(h.rt->check(), nullptr);
  h.rt->finish(d->handle);
  h.rt->finish(b->handle);
  EXPECT_EQ(h.rt->check(), nullptr);
  EXPECT_EQ(h.rt->counters().heap_allocations_in_steps, 0u);
}

std::uint32_t seeds() {
  if (const char* env = std::getenv("ACTIVEKV_STATE_SEEDS")) return static_cast<std::uint32_t>(std::strtoul(env, nullptr, 10));
  return 300;
}

// Random conversations over 3 histories; every adoption lands on a checkpoint whose bytes arrived.
TEST(RecurrentStateProperty, AdoptionAlwaysLandsOnACheckpoint) {
  std::uint64_t adoptions = 0, faulted_runs = 0;
  for (std::uint32_t seed = 1; seed <= seeds(); ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint32_t K = static_cast<std::uint32_t>(rng() % 4);  // 0: newest and prompt only
    FaultRates faults{};
    if (seed % 4 == 0) faults.failed_copy = 0.02, faults.failed_fence = 0.01, faults.late_fence = 0.05;
    Hybrid h = make_hybrid(3, K, seed, faults);
    ASSERT_TRUE(h.rt);
    std::vector<std::vector<std::int32_t>> convos;
    for (std::uint32_t round = 0; round < 12; ++round) {
      std::vector<std::int32_t> t;
      if (!convos.empty() && rng() % 3 != 0) {  // a follow-up or a sibling of an earlier conversation
        const std::vector<std::int32_t>& base = convos[rng() % convos.size()];
        t.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % (base.size() + 1)));
      }
      const std::uint32_t more = 1 + static_cast<std::uint32_t>(rng() % 20);
      for (std::uint32_t i = 0; i < more && t.size() < 50; ++i) t.push_back(static_cast<std::int32_t>(rng() % 500));
      const auto prompt_tokens = static_cast<std::uint32_t>(t.size());
      const std::uint32_t total = std::min<std::uint32_t>(60, prompt_tokens + static_cast<std::uint32_t>(rng() % 10));
      while (t.size() < total) t.push_back(static_cast<std::int32_t>(rng() % 500));
      std::uint32_t reused = 0;
      Result<AdmitResult> a = h.rt->open_context(round + 1, 64, std::span<const std::int32_t>(t.data(), prompt_tokens), reused);
      if (!a.ok()) {  // faults retired every history: admission is refused, naming it
        ASSERT_GT(h.rt->histories_retired(), 0u) << "seed " << seed << ": " << a.error().describe();
        break;
      }
      ASSERT_EQ(a->outcome, AdmitOutcome::admitted) << "seed " << seed;
      const ContextId c = a->handle;
      ASSERT_EQ(h.rt->check(), nullptr) << "seed " << seed;
      ASSERT_EQ(reused % 4, 0u) << "seed " << seed;
      if (h.rt->faulted(c)) {  // the restore's copy failed: the context must be cancelled
        h.rt->cancel(c);
        continue;
      }
      bool ok = true;
      if (reused > 0) {
        ++adoptions;
        // The bytes the step starts from were restored before it: equal whether or not it then failed.
        ASSERT_EQ(state_at_step_start(h, c, t, reused, &ok), toy_state(t, reused)) << "seed " << seed << " reused " << reused;
      }
      const std::uint32_t from = reused > 0 ? reused + 1 : 0;
      const std::uint32_t chunk = 1 + static_cast<std::uint32_t>(rng() % 8);
      ok = ok && prefill(h, c, t, from, prompt_tokens, chunk).ok();
      for (std::uint32_t p = prompt_tokens; ok && p < total; ++p) ok = step(h, c, t, p, 1).ok();
      ASSERT_EQ(h.rt->check(), nullptr) << "seed " << seed;
      if (!ok || h.rt->faulted(c)) {
        ++faulted_runs;
        h.rt->cancel(c);
        continue;
      }
      const std::uint32_t length = h.rt->length(c);
      if (rng() % 4 != 0) {
        h.rt->finish_retaining(c, std::span<const std::int32_t>(t.data(), length));
        convos.push_back(std::vector<std::int32_t>(t.begin(), t.begin() + length));
      } else {
        h.rt->finish(c);
      }
      ASSERT_EQ(h.rt->check(), nullptr) << "seed " << seed;
    }
    h.rt->release_retained();
    ASSERT_EQ(h.rt->check(), nullptr) << "seed " << seed;
    // A fault's report builds its message (allowed on the error path); clean seeds allocate nothing.
    if (seed % 4 != 0) {
      EXPECT_EQ(h.rt->counters().heap_allocations_in_steps, 0u) << "seed " << seed;
    }
  }
  EXPECT_GT(adoptions, seeds()) << "the conversations must exercise adoption";
  RecordProperty("adoptions", std::to_string(adoptions));
  RecordProperty("faulted_runs", std::to_string(faulted_runs));
}

// The host prefix cache with one history (docs/PREFIX_CACHE.md, "Recurrent state"): strangers take
// the history, so follow-ups and siblings adopt from the cache, 4 KiB of it: 21 states and 8 pages,
// evicted as they fill. Every adoption lands on a position whose cached state equals the toy state
// of the prompt's tokens there, byte for byte; check() after every operation; no allocation in steps.
TEST(RecurrentStateProperty, AdoptionFromThePrefixCacheLandsOnACachedState) {
  std::uint64_t adoptions = 0, cuts = 0, states_stored = 0, hits = 0;
  for (std::uint32_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint32_t K = static_cast<std::uint32_t>(rng() % 4);
    Hybrid h = make_hybrid(1, K, seed, FaultRates{}, 4096);
    ASSERT_TRUE(h.rt);
    ASSERT_EQ(h.rt->plan().host.prefix_cache_states, 21u);
    ASSERT_EQ(h.rt->plan().host.prefix_cache_pages, 8u);
    std::vector<std::vector<std::int32_t>> convos;
    for (std::uint32_t round = 0; round < 12; ++round) {
      std::vector<std::int32_t> t;
      if (!convos.empty() && rng() % 3 != 0) {
        const std::vector<std::int32_t>& base = convos[rng() % convos.size()];
        t.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % (base.size() + 1)));
      }
      const std::uint32_t more = 1 + static_cast<std::uint32_t>(rng() % 12);
      for (std::uint32_t i = 0; i < more && t.size() < 40; ++i) t.push_back(static_cast<std::int32_t>(rng() % 500));
      const auto prompt_tokens = static_cast<std::uint32_t>(t.size());
      const std::uint32_t total = std::min<std::uint32_t>(48, prompt_tokens + static_cast<std::uint32_t>(rng() % 10));
      while (t.size() < total) t.push_back(static_cast<std::int32_t>(rng() % 500));
      std::uint32_t reused = 0;
      Result<AdmitResult> a = h.rt->open_context(round + 1, 64, std::span<const std::int32_t>(t.data(), prompt_tokens), reused);
      ASSERT_TRUE(a.ok()) << "seed " << seed;
      ASSERT_EQ(a->outcome, AdmitOutcome::admitted) << "seed " << seed;
      const ContextId c = a->handle;
      ASSERT_EQ(h.rt->check(), nullptr) << "seed " << seed;
      ASSERT_FALSE(h.rt->faulted(c)) << "seed " << seed;
      if (reused > 0) {
        ++adoptions;
        ASSERT_EQ(state_at_step_start(h, c, t, reused), toy_state(t, reused)) << "seed " << seed << " reused " << reused;
      }
      const std::uint32_t from = reused > 0 ? reused + 1 : 0;
      ASSERT_TRUE(prefill(h, c, t, from, prompt_tokens, 1 + static_cast<std::uint32_t>(rng() % 8)).ok());
      for (std::uint32_t p = prompt_tokens; p < total; ++p) ASSERT_TRUE(step(h, c, t, p, 1).ok());
      const std::uint32_t length = h.rt->length(c);
      if (rng() % 4 != 0) {
        h.rt->finish_retaining(c, std::span<const std::int32_t>(t.data(), length));
        convos.push_back(std::vector<std::int32_t>(t.begin(), t.begin() + length));
      } else {
        h.rt->finish(c);
      }
      ASSERT_EQ(h.rt->check(), nullptr) << "seed " << seed;
    }
    cuts += h.rt->counters().prefix_cache_state_cuts;
    states_stored += h.rt->counters().prefix_cache_states_stored;
    hits += h.rt->counters().prefix_cache_hits;
    EXPECT_GT(h.rt->counters().prefix_cache_lookups, 0u);
    h.rt->release_retained();
    EXPECT_EQ(h.rt->counters().heap_allocations_in_steps, 0u) << "seed " << seed;
  }
  std::printf("hybrid, prefix cache: %llu adoptions (%llu from the cache), %llu states stored, %llu adoptions cut to a "
              "cached state\n",
              static_cast<unsigned long long>(adoptions), static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(states_stored), static_cast<unsigned long long>(cuts));
  EXPECT_GT(adoptions, 100u);
  EXPECT_GT(hits, 50u);
  EXPECT_GT(cuts, 10u);
}

}  // namespace
}  // namespace activekv
