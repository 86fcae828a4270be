// reference_test.cpp — the engine's logits against an independent reference.
//
// tests/reference/reference_forward.py computes the same model in float64
// with numpy, dequantising through the Python `gguf` package: no code shared
// with the engine. This test feeds a fixed prompt to both (the engine in
// prefill chunks of 3, then decode steps, so chunking and the decode path are
// both on the line) and compares every logit.
//
// Tolerance, and why: the engine computes in fp32 (weights dequantised exactly,
// activations of the Q4_1/Q8_0 products rounded to 16-bit blocks, engine/matmul_q16.hpp)
// and the reference in float64; both store K and V as f16. Over 30 layers this
// leaves differences of order 1e-2 on logits whose spread is ~20 (0.0026–0.0057
// with fp32 activations, 0.0067–0.0152 with 16-bit ones; 8-bit blocks gave 0.7–1.1
// and were refused), so we require max |Δ| ≤ 0.02 and the same argmax.
// A wrong RoPE convention, head mapping or norm moves logits by whole units.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/model_path.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/sampler.hpp"

namespace activekv::engine {
namespace {

// "<|im_start|>user\nWhat is the capital of France?" in the model's vocabulary
// would need the tokenizer; these ids are plain words: "The capital of France is".
const std::vector<TokenId> kPrompt = {504, 3575, 282, 4649, 314};
constexpr float kTolerance = 0.02f;
constexpr float kRelativeTolerance = 1e-3f;  // of the largest logit: EveryWeightFormatMatchesTheIndependentPythonForward

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> out;
  float v;
  while (in.read(reinterpret_cast<char*>(&v), sizeof v)) out.push_back(v);
  return out;
}

// The engine on the file at `path` (prefill chunk of 3, then 2 decode steps) against reference_forward.py.
// Each position's max |engine − reference| must be within the tolerance; the argmax must agree where the
// reference's top two are further apart than twice the tolerance (a nearer tie may flip either way).
// relative: the tolerance is a fraction of the position's largest |logit| instead of an absolute bound.
void compare_with_reference(const std::string& path, const std::vector<TokenId>& prompt, float tolerance_given,
                            bool relative) {
  const std::string out = ::testing::TempDir() + "reference_logits.f32";
  std::string tokens;
  for (TokenId t : prompt) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
  const std::string cmd = "python3 " ACTIVEKV_REFERENCE_DIR "/reference_forward.py --model '" + path +
                          "' --tokens " + tokens + " --positions all --out '" + out + "'";
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
  ASSERT_EQ(rc, 0) << cmd;
  const std::vector<float> expected = read_floats(out);

  Result<std::unique_ptr<Model>> model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error().describe();
  const std::uint32_t vocab = (*model)->config().vocab;
  ASSERT_EQ(expected.size(), prompt.size() * vocab);
  auto kv = std::make_unique<ReferenceKvAccess>((*model)->geometry(), (*model)->config().q_heads, 16);
  const ContextId context = kv->open(64);
  EngineSettings settings;
  settings.limits = ForwardLimits{8, 2};
  Result<std::unique_ptr<Engine>> engine = Engine::create(std::move(*model), std::move(kv), settings);
  ASSERT_TRUE(engine.ok()) << engine.error().describe();

  // Positions 0..2 as one prefill chunk, then 3 and 4 as decode steps: logits at 2, 3, 4.
  std::size_t fed = 0;
  for (std::size_t chunk : {3u, 1u, 1u}) {
    const StepInput in{context, std::span<const TokenId>(prompt).subspan(fed, chunk), true};
    ASSERT_TRUE((*engine)->step({&in, 1}).ok());
    fed += chunk;
    const std::span<const float> got = (*engine)->logits(0);
    const float* want = expected.data() + (fed - 1) * vocab;
    float max_diff = 0.0f, spread = 0.0f;
    for (std::uint32_t i = 0; i < vocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
      spread = std::max(spread, std::fabs(want[i]));
    }
    std::uint32_t top = 0, second = 1;
    if (want[second] > want[top]) std::swap(top, second);
    for (std::uint32_t i = 2; i < vocab; ++i) {
      if (want[i] > want[top]) {
        second = top;
        top = i;
      } else if (want[i] > want[second]) {
        second = i;
      }
    }
    const float tolerance = relative ? tolerance_given * spread : tolerance_given;
    EXPECT_LE(max_diff, tolerance) << "position " << fed - 1;
    if (want[top] - want[second] > 2 * tolerance) {
      EXPECT_EQ(Sampler::argmax(got), top) << "position " << fed - 1;
    }
    std::printf("position %zu: max |engine - reference| = %.6f (max |logit| %.3f), argmax %u\n", fed - 1, max_diff,
                spread, top);
  }
}

TEST(Reference, LogitsMatchTheIndependentPythonForward) {
  Result<std::string> path = find_default_model();
  if (!path) GTEST_SKIP() << path.error().describe();
  compare_with_reference(*path, kPrompt, kTolerance, false);
}

// Every weight format on a real forward pass: a random-weight Llama (2 layers, 256 wide, the hostile suite's
// tiny vocabulary) per quantisation mix, written by make_random_llama.py, against the same reference. The
// tolerance is the default model's, relative: 0.02 on logits of about 20 is 1e-3 of the largest logit.
// Measured (the inputs are fixed, so the figures are too): 9.1e-4 of it at worst (Q4_K_M, position 4),
// 4.7e-4 Q8_0, 4.1e-4 Q3_K, 3.5e-4 Q5_K_M, the others below 2e-4; a format read wrongly moves logits by
// whole units.
TEST(Reference, EveryWeightFormatMatchesTheIndependentPythonForward) {
  const std::string vocab = ::testing::TempDir() + "tiny_vocab.gguf";
  const std::string write_vocab = "python3 " ACTIVEKV_REFERENCE_DIR "/../hostile/tiny_model.py '" + vocab + "' > /dev/null";
  const int vocab_rc = std::system(write_vocab.c_str());
  if (WIFEXITED(vocab_rc) && WEXITSTATUS(vocab_rc) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
  ASSERT_EQ(vocab_rc, 0) << write_vocab;
  const std::vector<TokenId> prompt = {7, 100, 31, 250, 64};
  for (const char* mix : {"Q4_K_M", "Q5_K_M", "Q3_K", "Q2_K", "Q4_0", "Q5_0", "Q5_1", "Q8_0"}) {
    SCOPED_TRACE(mix);
    const std::string path = ::testing::TempDir() + "random_" + mix + ".gguf";
    const std::string cmd = "python3 " ACTIVEKV_REFERENCE_DIR "/make_random_llama.py '" + path + "' --mix " + mix +
                            " --layers 2 --embedding 256 --ffn 512 --heads 4 --kv-heads 2 --context 256 --vocab-from '" +
                            vocab + "' > /dev/null";
    const int rc = std::system(cmd.c_str());
    ASSERT_EQ(rc, 0) << cmd;
    compare_with_reference(path, prompt, kRelativeTolerance, true);
  }
}

}  // namespace
}  // namespace activekv::engine
