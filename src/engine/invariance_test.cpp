// invariance_test.cpp — every KV row and every logit is independent of how the
// tokens were cut into steps (the guard that prefix reuse stands on).
//
// A follow-up turn that adopts a retained history reads rows that turn 1
// computed one token at a time (decode steps) or in the chunks turn 1's
// prefill happened to use; the same turn prefilled from scratch computes the
// same rows in other chunks, at other boundaries, batched with other requests.
// Reuse is bit-exact only if a row's bits depend on nothing but the tokens
// before it. This test feeds one 160-token sequence
//
//   - as prefill chunks of 1, 7, 128 and 160 tokens (the whole sequence),
//   - as a 150-token prefill followed by 10 decode steps,
//   - as chunks of 7 batched with a second context's chunks of 5,
//
// and compares, bit for bit, every fp32 K and V row the forward pass wrote to
// every layer and the logits of the last token. Any kernel change (matmul,
// attention) must keep this passing. On the real model (skipped without it).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "engine/forward.hpp"
#include "engine/default_model_fixture.hpp"
#include "engine/model_path.hpp"
#include "engine/runtime_kv.hpp"

namespace activekv::engine {
namespace {

constexpr std::uint32_t kLength = 160;
constexpr std::uint32_t kPrefillBeforeDecode = 150;

using testing_model::g_model;
using testing_model::g_pool;

class ChunkInvariance : public testing_model::DefaultModelOnHost {};

std::vector<TokenId> sequence(std::uint32_t n, std::uint64_t seed) {
  std::vector<TokenId> out(n);
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<TokenId>(200 + (x >> 33) % 20000);
  }
  return out;
}

// Passes everything to a RuntimeKv and keeps the fp32 K/V rows one context wrote, per layer.
class RecordingKv final : public KvAccess {
 public:
  RecordingKv(RuntimeKv& kv, ContextId watched, std::uint32_t layers, std::size_t row_floats)
      : kv_(kv), watched_(watched), rows_(layers), row_floats_(row_floats) {}
  std::uint32_t length(ContextId c) const override { return kv_.length(c); }
  Status begin_step(std::span<const StepEntry> entries) override {
    offset_ = 0;
    count_ = 0;
    std::size_t at = 0;
    for (const StepEntry& e : entries) {
      if (e.context == watched_) {
        offset_ = at;
        count_ = e.tokens_new;
      }
      at += e.tokens_new;
    }
    return kv_.begin_step(entries);
  }
  Status write_kv(std::uint32_t layer, const float* k, const float* v) override {
    std::vector<float>& r = rows_[layer];
    r.insert(r.end(), k + offset_ * row_floats_, k + (offset_ + count_) * row_floats_);
    r.insert(r.end(), v + offset_ * row_floats_, v + (offset_ + count_) * row_floats_);
    return kv_.write_kv(layer, k, v);
  }
  Status attend(std::uint32_t layer, const float* q, float* out) override { return kv_.attend(layer, q, out); }
  Status end_step() override { return kv_.end_step(); }

  // Per layer, per step: the step's K rows then its V rows. Re-ordered into
  // position order by rows_in_order() so runs with different steps compare.
  std::vector<float> rows_in_order(std::uint32_t layer, const std::vector<std::uint32_t>& steps) const {
    std::vector<float> k, v;
    const std::vector<float>& r = rows_[layer];
    std::size_t at = 0;
    for (std::uint32_t n : steps) {
      k.insert(k.end(), r.begin() + static_cast<std::ptrdiff_t>(at), r.begin() + static_cast<std::ptrdiff_t>(at + n * row_floats_));
      at += n * row_floats_;
      v.insert(v.end(), r.begin() + static_cast<std::ptrdiff_t>(at), r.begin() + static_cast<std::ptrdiff_t>(at + n * row_floats_));
      at += n * row_floats_;
    }
    k.insert(k.end(), v.begin(), v.end());
    return k;
  }

 private:
  RuntimeKv& kv_;
  ContextId watched_;
  std::vector<std::vector<float>> rows_;
  std::size_t row_floats_;
  std::size_t offset_ = 0, count_ = 0;
};

struct Outcome {
  std::vector<std::vector<float>> rows;  // per layer: K rows then V rows, position order
  std::vector<float> logits;             // of the last token
};

// Feeds `tokens` to one context in steps of `steps[i]` tokens; with `companion`, a second
// context is fed its own tokens in chunks of 5 in the same steps (batch composition).
Outcome run(const std::vector<TokenId>& tokens, const std::vector<std::uint32_t>& steps, bool companion) {
  MemorySettings memory;
  memory.page_tokens = 16;
  memory.tile_tokens = 256;
  memory.tiles = 2;
  memory.max_context_tokens = 256;
  memory.max_seqs = 2;
  const ForwardLimits limits{kLength + 8, 2};
  KvRuntimeSettings settings = runtime_settings(*g_model, memory, limits);
  const std::uint64_t row_bytes = settings.memory.geometry.row_bytes();
  const std::uint64_t layers = g_model->config().layers;
  settings.memory.host_pool_bytes = 2 * layers * 256 * row_bytes;
  settings.memory.device_pool_bytes = 4 * arena_alignment_bytes + 2 * 256 * row_bytes + 2 * layers * 256 * row_bytes;
  BackendOptions options;
  options.compute_threads = 2;
  Result<std::unique_ptr<Backend>> backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok());
  Result<std::unique_ptr<KvRuntime>> rt = KvRuntime::create(settings, **backend);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
  if (!rt.ok()) return {};
  KvRuntime& runtime = **rt;
  const ContextId a = runtime.open_context(1, 256)->handle;
  const ContextId b = runtime.open_context(2, 256)->handle;
  RuntimeKv inner(runtime);
  const Geometry g = g_model->geometry();
  const std::size_t row_floats = std::size_t{g.kv_heads} * g.head_dim;
  RecordingKv kv(inner, a, g.dense_layers, row_floats);
  Forward f(*g_model, kv, *g_pool, best_isa(), limits);
  const std::vector<TokenId> other = sequence(kLength, 999);
  Outcome out;
  std::size_t fed = 0, fed_other = 0;
  for (std::uint32_t n : steps) {
    StepInput in[2];
    std::uint32_t entries = 0;
    if (companion && fed_other + 5 <= other.size()) {
      in[entries++] = {b, std::span<const TokenId>(other).subspan(fed_other, 5), true};
      fed_other += 5;
    }
    const bool last = fed + n == tokens.size();
    in[entries++] = {a, std::span<const TokenId>(tokens).subspan(fed, n), last};
    fed += n;
    Status s = f.step({in, entries});
    EXPECT_TRUE(s.ok()) << s.error().describe();
    if (!s.ok()) return {};
    if (last) {
      const std::span<const float> l = f.logits(entries - 1);
      out.logits.assign(l.begin(), l.end());
    }
  }
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) out.rows.push_back(kv.rows_in_order(l, steps));
  return out;
}

std::vector<std::uint32_t> chunks_of(std::uint32_t chunk) {
  std::vector<std::uint32_t> steps;
  for (std::uint32_t fed = 0; fed < kLength; fed += chunk) steps.push_back(std::min(chunk, kLength - fed));
  return steps;
}

void expect_same_bits(const Outcome& want, const Outcome& got, const char* what) {
  ASSERT_EQ(got.rows.size(), want.rows.size()) << what;
  for (std::size_t l = 0; l < want.rows.size(); ++l) {
    ASSERT_EQ(got.rows[l].size(), want.rows[l].size()) << what << ", layer " << l;
    std::size_t first_diff = want.rows[l].size();
    for (std::size_t i = 0; i < want.rows[l].size(); ++i) {
      if (std::memcmp(&want.rows[l][i], &got.rows[l][i], sizeof(float)) != 0) {
        first_diff = i;
        break;
      }
    }
    EXPECT_EQ(first_diff, want.rows[l].size()) << what << ": layer " << l << " differs first at float " << first_diff;
  }
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0)
      << what << ": logits of the last token differ";
}

TEST_F(ChunkInvariance, RowsAndLogitsAreTheSameForEveryChunkingAndBatch) {
  const std::vector<TokenId> tokens = sequence(kLength, 12345);
  const Outcome whole = run(tokens, chunks_of(kLength), false);
  ASSERT_FALSE(whole.logits.empty());
  expect_same_bits(whole, run(tokens, chunks_of(1), false), "chunks of 1");
  expect_same_bits(whole, run(tokens, chunks_of(7), false), "chunks of 7");
  expect_same_bits(whole, run(tokens, chunks_of(128), false), "chunks of 128");
  std::vector<std::uint32_t> decode = {kPrefillBeforeDecode};
  for (std::uint32_t i = kPrefillBeforeDecode; i < kLength; ++i) decode.push_back(1);
  expect_same_bits(whole, run(tokens, decode, false), "prefill then decode steps");
  expect_same_bits(whole, run(tokens, chunks_of(7), true), "chunks of 7 batched with another context");
}

}  // namespace
}  // namespace activekv::engine
