// arch_test.cpp — every architecture of the table against an independent reference.
//
// For each architecture (llama with and without Llama 3's rope_freqs, linear
// RoPE scaling and a Mistral-style window; qwen2; qwen3; gemma3 with its
// window pattern and a per-layer pattern array) and two or more weight mixes
// (F32, F16, Q8_0/Q4_0), tests/reference/make_arch_model.py writes a small
// random-weight GGUF with the `gguf` package, and tests/reference/
// reference_forward.py computes every position's logits in float64 with numpy
// (full causal attention, the window as a mask; no code shared with the
// engine). The engine then runs the same token ids
//
//   - through the ActiveKV runtime on the host backend (history staged through the tiles), in prefill chunks and
//     decode steps, with the whole history on the device and with half of it
//     (the rest staged): logits NMSE < 1e-4 at every step, and the same bits
//     under both budgets and as one whole-prompt prefill;
//   - through the contiguous oracle (ReferenceKvAccess): NMSE < 1e-4;
//   - decode steps after warm-up allocate nothing (invariant 7).
// The files' windows (kWindow = 20 tokens, not a multiple of the 8-token page) are narrower
// than the 48-token prompt: a window layer's query sees keys in (p − 20, p], so every run skips
// whole pages below the window and masks inside the page its boundary falls in, as the
// reference's mask does (llama.cpp's standard sliding window).
//
// NMSE = Σ(engine − reference)² / Σ reference². The engine computes in fp32
// with 16-bit activation blocks on Q8_0 products; the reference in float64;
// both store K and V as f16. A wrong RoPE order, a missing norm, a window off
// by one token or a wrong base moves NMSE to 1e-2 or more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/state_plan.hpp"
#include "engine/forward.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/runtime_kv.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

constexpr std::uint32_t kPromptTokens = 48;
constexpr std::uint32_t kContext = 64;
constexpr std::uint32_t kPageTokens = 8;
constexpr std::uint32_t kWindow = 20;  // the files' attention.sliding_window: below the prompt
constexpr double kNmseMax = 1e-4;

struct Case {
  const char* arch;
  const char* variant;
  const char* mix;
  std::uint32_t window_layers;  // what the file's hyper-parameters must give
};

std::string name_of(const Case& c) { return std::string(c.arch) + "_" + c.variant + "_" + c.mix; }

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> out;
  float v;
  while (in.read(reinterpret_cast<char*>(&v), sizeof v)) out.push_back(v);
  return out;
}

double nmse(std::span<const float> got, const float* want, std::size_t n) {
  double err = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    ref += static_cast<double>(want[i]) * want[i];
  }
  return err / ref;
}

std::vector<TokenId> prompt_ids(std::uint32_t vocab) {
  std::vector<TokenId> out(kPromptTokens);
  std::uint64_t x = 2024;
  for (std::uint32_t i = 0; i < kPromptTokens; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<TokenId>((x >> 33) % vocab);
  }
  return out;
}

// Prefill of 8, chunks of 5, then single decode tokens: every step wants logits.
std::vector<std::uint32_t> mixed_steps() {
  std::vector<std::uint32_t> steps = {8};
  std::uint32_t fed = 8;
  while (fed + 5 <= kPromptTokens - 8) steps.push_back(5), fed += 5;
  while (fed < kPromptTokens) steps.push_back(1), fed += 1;
  return steps;
}

struct Runtime {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvRuntime> runtime;
  ContextId context{};
};

// A window layer's host ring (window_plan.hpp): whole pages covering the window from any page boundary.
std::uint32_t ring_tokens(const Geometry& g, std::uint32_t context) {
  if (g.window_layers() == 0) return context;
  const std::uint32_t w = g.kinds.window_tokens;
  return std::min(context, ((w + kPageTokens - 1) / kPageTokens + 1) * kPageTokens);
}

// The device pages one context of `context` tokens can use: every page of a full layer, at most
// the sink and the ring's pages of a window layer (Budgets' window cap).
std::uint64_t device_need(const Geometry& g, std::uint32_t context) {
  const std::uint64_t pages = (context + kPageTokens - 1) / kPageTokens;
  const std::uint64_t window_pages = std::min<std::uint64_t>(pages, 1 + (ring_tokens(g, context) + kPageTokens - 1) / kPageTokens);
  return std::uint64_t{g.dense_layers - g.window_layers()} * pages + std::uint64_t{g.window_layers()} * window_pages;
}

// `fraction` of the history's pages with every layer at full length (what make_runtime puts on the device).
std::uint64_t device_pages(const Model& model, double fraction, std::uint32_t context) {
  const std::uint64_t pages_needed = std::uint64_t{model.geometry().dense_layers} * (context / kPageTokens);
  return static_cast<std::uint64_t>(std::ceil(static_cast<double>(pages_needed) * fraction));
}

// The runtime on the host backend with `fraction` of the history's pages on the device.
Runtime make_runtime(const Model& model, double fraction, const ForwardLimits& limits, std::uint32_t context = kContext) {
  Runtime r;
  MemorySettings memory;
  memory.page_tokens = kPageTokens;
  memory.tile_tokens = 64;
  memory.tiles = 2;
  memory.max_context_tokens = context;
  memory.max_seqs = 1;
  KvRuntimeSettings settings = runtime_settings(model, memory, limits);
  const std::uint64_t row_bytes = settings.memory.geometry.row_bytes();
  const std::uint32_t dense = settings.memory.geometry.dense_layers;  // a hybrid's attention layers only
  const std::uint64_t pages = device_pages(model, fraction, context);
  // One history: the attention layers' segments and, for a hybrid, its state checkpoints (state_plan.hpp).
  settings.memory.host_pool_bytes = std::uint64_t{dense} * context * row_bytes + state_bytes_per_history(settings.memory);
  // Each arena part rounded up to its alignment, no more: the pages are the part under test.
  const auto aligned = [](std::uint64_t b) { return (b + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes; };
  settings.memory.device_pool_bytes =
      aligned(std::uint64_t{memory.tiles} * memory.tile_tokens * row_bytes) + aligned(pages * kPageTokens * row_bytes) +
      aligned(settings.memory.geometry.recurrent_state_bytes);  // one context's recurrent slot (hybrids)
  BackendOptions options;
  options.compute_threads = 2;
  Result<std::unique_ptr<Backend>> backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok()) << backend.error().describe();
  if (!backend.ok()) return r;
  r.backend = std::move(backend).value();
  Result<std::unique_ptr<KvRuntime>> rt = KvRuntime::create(settings, *r.backend);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
  if (!rt.ok()) return r;
  r.runtime = std::move(rt).value();
  Result<AdmitResult> admitted = r.runtime->open_context(1, context);
  EXPECT_TRUE(admitted.ok() && admitted->outcome == AdmitOutcome::admitted);
  r.context = admitted->handle;
  return r;
}

// Feeds the prompt in `steps`; returns the logits of every step's last token.
std::vector<std::vector<float>> feed(Forward& f, ContextId c, const std::vector<TokenId>& prompt,
                                     const std::vector<std::uint32_t>& steps) {
  std::vector<std::vector<float>> out;
  std::size_t fed = 0;
  for (std::uint32_t n : steps) {
    const StepInput in{c, std::span<const TokenId>(prompt).subspan(fed, n), true};
    Status s = f.step({&in, 1});
    EXPECT_TRUE(s.ok()) << s.error().describe();
    if (!s.ok()) return out;
    fed += n;
    out.emplace_back(f.logits(0).begin(), f.logits(0).end());
  }
  return out;
}

class ArchReference : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    path_ = ::testing::TempDir() + "arch_" + name_of(c) + ".gguf";
    const std::string logits = ::testing::TempDir() + "arch_" + name_of(c) + ".f32";
    // The file and its reference logits are made once per case and process (four tests read them).
    static std::map<std::string, int> made;  // case → the generator's exit status
    const bool fresh = made.count(name_of(c)) == 0;
    const std::string make = std::string("python3 " ACTIVEKV_REFERENCE_DIR "/make_arch_model.py --arch ") + c.arch +
                             " --variant " + c.variant + " --mix " + c.mix + " --window " + std::to_string(kWindow) +
                             " --out '" + path_ + "'";
    if (fresh) made[name_of(c)] = std::system(make.c_str());
    int rc = made[name_of(c)];
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
    ASSERT_EQ(rc, 0) << make;
    Result<std::unique_ptr<Model>> model = Model::load(path_);
    ASSERT_TRUE(model.ok()) << model.error().describe();
    model_ = std::move(model).value();
    prompt_ = prompt_ids(model_->config().vocab);
    std::string tokens;
    for (TokenId t : prompt_) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
    const std::string reference = "python3 " ACTIVEKV_REFERENCE_DIR "/reference_forward.py --model '" + path_ +
                                  "' --tokens " + tokens + " --positions all --out '" + logits + "' > /dev/null";
    rc = fresh ? std::system(reference.c_str()) : 0;
    ASSERT_EQ(rc, 0) << reference;
    expected_ = read_floats(logits);
    ASSERT_EQ(expected_.size(), std::size_t{kPromptTokens} * model_->config().vocab);
  }

  // Each step's logits against the reference at that step's last position.
  void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::uint32_t>& steps,
                    const char* what) {
    const std::uint32_t vocab = model_->config().vocab;
    ASSERT_EQ(got.size(), steps.size()) << what;
    std::size_t position = 0;
    double worst = 0.0;
    for (std::size_t s = 0; s < steps.size(); ++s) {
      position += steps[s];
      const double e = nmse(got[s], expected_.data() + (position - 1) * vocab, vocab);
      worst = std::max(worst, e);
      EXPECT_LT(e, kNmseMax) << what << ": position " << position - 1;
    }
    std::printf("%-28s %-10s worst NMSE %.2e over %zu steps\n", name_of(GetParam()).c_str(), what, worst, steps.size());
  }

  std::string path_;
  std::unique_ptr<Model> model_;
  std::vector<TokenId> prompt_;
  std::vector<float> expected_;
  ThreadPool pool_{2};
};

TEST_P(ArchReference, HyperParametersGiveTheWindowLayers) {
  EXPECT_EQ(model_->config().window_layers(), GetParam().window_layers);
  EXPECT_EQ(model_->config().architecture, GetParam().arch);
  // The KV masks the window: a run's context may be wider than it.
  EXPECT_TRUE(check_runnable(*model_, ForwardLimits{16, 1, kContext}).ok());
  const Geometry g = model_->geometry();
  EXPECT_EQ(g.window_layers(), GetParam().window_layers);
  for (std::uint32_t l = 0; l < g.dense_layers; ++l)
    EXPECT_EQ(g.kinds.window_of(l), model_->config().layer[l].window) << "layer " << l;
  if (GetParam().window_layers != 0) {
    EXPECT_EQ(g.kinds.window_tokens, kWindow);
  }
}

TEST_P(ArchReference, RuntimeLogitsMatchTheReferenceForEveryBudgetAndChunking) {
  // Steps of at most 8 tokens keep the floor (sink + 2 written pages per layer) inside half the pool.
  const ForwardLimits limits{8, 1, kContext};
  const std::vector<std::uint32_t> steps = mixed_steps();
  std::vector<std::vector<float>> by_budget[2];
  const double fractions[2] = {1.0, 0.5};
  std::uint64_t staged[2] = {};
  for (int b = 0; b < 2; ++b) {
    Runtime rt = make_runtime(*model_, fractions[b], limits);
    ASSERT_NE(rt.runtime, nullptr);
    RuntimeKv kv(*rt.runtime);
    Forward f(*model_, kv, pool_, best_isa(), limits);
    by_budget[b] = feed(f, rt.context, prompt_, steps);
    staged[b] = rt.runtime->counters().bytes_staged;
  }
  expect_close(by_budget[0], steps, "runtime");
  EXPECT_EQ(staged[0], 0u);
  EXPECT_GT(staged[1], 0u) << "half the pages on the device: history must be staged";
  ASSERT_EQ(by_budget[1].size(), by_budget[0].size());
  for (std::size_t s = 0; s < steps.size(); ++s)
    EXPECT_EQ(std::memcmp(by_budget[1][s].data(), by_budget[0][s].data(), by_budget[0][s].size() * sizeof(float)), 0)
        << "50% pool, step " << s;

  // The longest steps the runtime takes: the whole prompt, or for a window model its host ring
  // (a step longer than the ring would overwrite its own rows, and the plan refuses it).
  const std::uint32_t longest = std::min(kPromptTokens, ring_tokens(model_->geometry(), kContext));
  std::vector<std::uint32_t> long_steps;
  for (std::uint32_t fed = 0; fed < kPromptTokens; fed += longest) long_steps.push_back(std::min(longest, kPromptTokens - fed));
  const ForwardLimits whole_limits{longest, 1, kContext};
  Runtime whole_rt = make_runtime(*model_, 1.0, whole_limits);
  ASSERT_NE(whole_rt.runtime, nullptr);
  RuntimeKv kv(*whole_rt.runtime);
  Forward f(*model_, kv, pool_, best_isa(), whole_limits);
  const std::vector<std::vector<float>> whole = feed(f, whole_rt.context, prompt_, long_steps);
  ASSERT_EQ(whole.size(), long_steps.size());
  EXPECT_EQ(std::memcmp(whole.back().data(), by_budget[0].back().data(), whole.back().size() * sizeof(float)), 0)
      << "a prefill in steps of " << longest << " and chunks + decode steps give different last logits";
}

TEST_P(ArchReference, OracleLogitsMatchTheReference) {
  const ForwardLimits limits{kPromptTokens, 1, kContext};
  const std::vector<std::uint32_t> steps = mixed_steps();
  ReferenceKvAccess oracle(model_->geometry(), model_->config().q_heads, kPageTokens);
  const ContextId c = oracle.open(kContext);
  Forward f(*model_, oracle, pool_, best_isa(), limits);
  expect_close(feed(f, c, prompt_, steps), steps, "oracle");
}

TEST_P(ArchReference, DecodeStepsAllocateNothingAfterWarmUp) {
  const ForwardLimits limits{8, 1, kContext};
  Runtime rt = make_runtime(*model_, 0.5, limits);
  ASSERT_NE(rt.runtime, nullptr);
  RuntimeKv kv(*rt.runtime);
  Forward f(*model_, kv, pool_, best_isa(), limits);
  const std::vector<std::uint32_t> warm = {8, 8, 8, 8, 1};
  feed(f, rt.context, prompt_, warm);
  const std::uint64_t before = activekv::testing::heap_allocations();
  for (std::uint32_t i = 33; i < kPromptTokens; ++i) {
    const StepInput in{rt.context, std::span<const TokenId>(prompt_).subspan(i, 1), true};
    ASSERT_TRUE(f.step({&in, 1}).ok());
  }
  EXPECT_EQ(activekv::testing::heap_allocations(), before) << "heap allocations in decode steps";
  EXPECT_EQ(rt.runtime->counters().device_allocations_after_warmup, 0u);
}

// A window model far past its window (20 tokens; 400-token sequences, 64 pages per layer):
// the logits of every step are the same bits with 100%, 25% and 5% of the pages on the device,
// and the last step's are the same bits whether the sequence came in chunks of 8, in chunks of
// 3 and 5, or as chunks of 8 then single decode tokens (DESIGN.md invariant 8).
TEST_P(ArchReference, AWindowModelIsTheSameBitsForEveryBudgetAndChunking) {
  if (GetParam().window_layers == 0) GTEST_SKIP() << "no window layers in this file";
  constexpr std::uint32_t kLongContext = 512, kLong = 400;
  std::vector<TokenId> sequence(kLong);
  for (std::uint32_t i = 0; i < kLong; ++i) sequence[i] = prompt_[i % kPromptTokens] ^ static_cast<TokenId>(i / kPromptTokens);
  for (TokenId& t : sequence) t %= model_->config().vocab;
  const ForwardLimits limits{8, 1, kLongContext};
  const std::vector<std::uint32_t> eights(kLong / 8, 8);
  const double fractions[3] = {1.0, 0.25, 0.05};
  std::vector<std::vector<float>> by_budget[3];
  std::uint64_t staged[3] = {};
  for (int b = 0; b < 3; ++b) {
    Runtime rt = make_runtime(*model_, fractions[b], limits, kLongContext);
    ASSERT_NE(rt.runtime, nullptr);
    RuntimeKv kv(*rt.runtime);
    Forward f(*model_, kv, pool_, best_isa(), limits);
    by_budget[b] = feed(f, rt.context, sequence, eights);
    staged[b] = rt.runtime->counters().bytes_staged;
    ASSERT_EQ(by_budget[b].size(), eights.size());
    EXPECT_EQ(rt.runtime->check(), nullptr);
  }
  for (int b = 1; b < 3; ++b)
    for (std::size_t s = 0; s < eights.size(); ++s)
      ASSERT_EQ(std::memcmp(by_budget[b][s].data(), by_budget[0][s].data(), by_budget[0][s].size() * sizeof(float)), 0)
          << "pool " << fractions[b] * 100 << "%, step " << s;
  // A window layer holds at most its ring's pages and the sink on the device, so a fraction of the
  // full-history pages may already hold what the context can use: staging is required only where
  // the pool is short of that (the arena's 4 KiB alignment may add a page or two to those asked for).
  EXPECT_EQ(staged[0], 0u);
  const std::uint64_t need = device_need(model_->geometry(), kLongContext);
  for (int b = 1; b < 3; ++b) {
    const std::uint64_t pages = device_pages(*model_, fractions[b], kLongContext);
    if (pages + 2 < need) {
      EXPECT_GT(staged[b], 0u) << "pool " << fractions[b] * 100 << "% is short of " << need << " pages";
    }
  }
  EXPECT_GT(staged[2], 0u) << "5% of the pages must stage";
  EXPECT_GE(staged[2], staged[1]);
  std::vector<std::uint32_t> threes_fives, then_decode;
  for (std::uint32_t fed = 0; fed < kLong;) {
    const std::uint32_t n = std::min<std::uint32_t>(kLong - fed, threes_fives.size() % 2 == 0 ? 3 : 5);
    threes_fives.push_back(n), fed += n;
  }
  for (std::uint32_t fed = 0; fed < kLong;) {
    const std::uint32_t n = fed < 360 ? 8 : 1;
    then_decode.push_back(n), fed += n;
  }
  for (const std::vector<std::uint32_t>* steps : {&threes_fives, &then_decode}) {
    Runtime rt = make_runtime(*model_, 0.25, limits, kLongContext);
    ASSERT_NE(rt.runtime, nullptr);
    RuntimeKv kv(*rt.runtime);
    Forward f(*model_, kv, pool_, best_isa(), limits);
    const std::vector<std::vector<float>> got = feed(f, rt.context, sequence, *steps);
    ASSERT_EQ(got.size(), steps->size());
    EXPECT_EQ(std::memcmp(got.back().data(), by_budget[0].back().data(), got.back().size() * sizeof(float)), 0)
        << "chunks of " << (steps == &threes_fives ? "3 and 5" : "8 then decode") << ": other last logits";
  }
}

const Case kCases[] = {
    {"llama", "plain", "f16", 0},      {"llama", "plain", "q8", 0},    {"llama", "rope_freqs", "q4", 0},
    {"llama", "rope_freqs", "f32", 0}, {"llama", "linear", "q8", 0},   {"llama", "window", "f16", 2},
    {"llama", "window", "q8", 2},      {"qwen2", "plain", "f16", 0},   {"qwen2", "plain", "q8", 0},
    {"qwen3", "plain", "q4", 0},       {"qwen3", "plain", "f16", 0},   {"gemma3", "plain", "q8", 5},
    {"gemma3", "plain", "f16", 5},     {"gemma3", "pattern", "q4", 4},
    // The Qwen3.5 hybrid: Gated DeltaNet and gated attention layers (no window layers).
    {"qwen35", "plain", "f32", 0},     {"qwen35", "plain", "q8", 0},   {"qwen35", "flags", "f16", 0},
};

// A malformed hybrid file is refused in one line naming the key or the tensor.
TEST(HybridRefusals, MalformedFilesNameTheKeyOrTensor) {
  struct Broken {
    const char* kind;
    const char* named;  // what the message must name
  };
  for (const Broken& b : {Broken{"interval0", "qwen35.full_attention_interval"},
                          Broken{"state", "blk.0.attn_qkv.weight"},
                          Broken{"missing", "blk.0.ssm_a"}}) {
    const std::string path = ::testing::TempDir() + "arch_qwen35_" + b.kind + ".gguf";
    const std::string make = std::string("python3 " ACTIVEKV_REFERENCE_DIR "/make_arch_model.py --arch qwen35 --mix f16 "
                                         "--malformed ") + b.kind + " --out '" + path + "'";
    const int rc = std::system(make.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
    ASSERT_EQ(rc, 0) << make;
    Result<std::unique_ptr<Model>> model = Model::load(path);
    ASSERT_FALSE(model.ok()) << b.kind << " loaded";
    const std::string message = model.error().describe();
    std::printf("%-10s %s\n", b.kind, message.c_str());
    EXPECT_NE(message.find(b.named), std::string::npos) << b.kind << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << b.kind << ": one line";
  }
}

INSTANTIATE_TEST_SUITE_P(Files, ArchReference, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param) { return name_of(param.param); });

}  // namespace
}  // namespace activekv::engine
