// eval_model_test.cpp — `activekv eval`'s machinery on the default model, kept to a few
// hundred tokens: exact against exact agrees exactly through the shared-prefix
// contexts, a sparse setting covering every page equals exact, a real sparse
// setting reads fewer pages, the JSON carries the documented keys, and the
// passkey is found at a short context.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/default_model_fixture.hpp"
#include "eval/eval_report.hpp"
#include "eval/eval_rig.hpp"
#include "eval/passkey.hpp"
#include "eval/prompt_dump.hpp"
#include "eval/text_eval.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::eval {
namespace {

using engine::testing_model::g_model;
using engine::testing_model::g_pool;

class EvalOnModel : public engine::testing_model::DefaultModelOnHost {
 protected:
  // The first `n` tokens of the shipped evaluation text.
  static std::vector<engine::TokenId> text_tokens(const tokenizer::Tokenizer& tok, std::size_t n) {
    std::ifstream in(std::string(ACTIVEKV_SOURCE_DIR) + "/data/eval_text.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<tokenizer::TokenId> ids = tok.encode(ss.str().substr(0, 8 * n), tokenizer::Special::plain);
    EXPECT_GE(ids.size(), n);
    return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(n, ids.size()))};
  }

  static std::unique_ptr<EvalRig> rig(std::span<const EvalSetting> settings, std::uint32_t context) {
    RigSettings r;
    r.context_tokens = context;
    r.contexts = static_cast<std::uint32_t>(settings.size());
    r.chunk_tokens = 128;
    r.tile_tokens = 64;
    r.device_pool_bytes = 16ull << 20;  // three floors of a 128-token prefill chunk (30 layers × 10 pages each)
    Result<std::unique_ptr<EvalRig>> made = EvalRig::create(*g_model, *g_pool, settings, r);
    EXPECT_TRUE(made.ok()) << made.error().describe();
    return made.ok() ? std::move(made).value() : nullptr;
  }

  static tokenizer::Tokenizer tokenizer() {
    Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::from_gguf(g_model->file());
    EXPECT_TRUE(tok.ok());
    return std::move(tok).value();
  }
};

EvalSetting named(std::string name, SparseSettings sparse) { return EvalSetting{std::move(name), sparse}; }

TEST_F(EvalOnModel, ExactAgainstExactAgreesExactlyThroughTheSharedPrefix) {
  const tokenizer::Tokenizer tok = tokenizer();
  const std::vector<engine::TokenId> tokens = text_tokens(tok, 120);
  const std::vector<EvalSetting> settings{named("exact", {}), named("exact again", {})};
  std::unique_ptr<EvalRig> r = rig(settings, 96);
  ASSERT_NE(r, nullptr);
  Result<std::vector<Window>> windows = plan_windows(120, 96, 24, 0);
  ASSERT_TRUE(windows.ok());
  ASSERT_EQ(windows->size(), 2u);
  Result<TextEvalResult> result = evaluate_text(*r, settings, tokens, *windows);
  ASSERT_TRUE(result.ok()) << result.error().describe();
  EXPECT_EQ(result->scored_tokens, 48u);
  EXPECT_GT(result->tokens_adopted, 0u) << "the settings' contexts did not adopt the shared prefix";
  const SettingScore& a = result->settings[0];
  const SettingScore& b = result->settings[1];
  EXPECT_EQ(a.tokens, 48u);
  EXPECT_EQ(b.top1_agreement(), 1.0);
  EXPECT_EQ(a.nll_sum, b.nll_sum);  // bit-identical logits: adopted, copied or prefilled KV alike
  EXPECT_EQ(b.selection.mass_recall(), 1.0);
  EXPECT_GT(a.perplexity(), 1.0);  // English prose under a small model: tens, not 1 and not the vocabulary
  EXPECT_LT(a.perplexity(), 200.0);
  // 30 layers × ceil(length/16) pages per step; lengths 72..95 after each step of a 96-token window.
  EXPECT_EQ(a.selection.steps, 48u);
  EXPECT_EQ(a.selection.pages_read, a.selection.pages_held);
  EXPECT_GT(a.selection.pages_read_per_step(), 30.0 * 5);
  EXPECT_LT(a.selection.pages_read_per_step(), 30.0 * 6);
}

TEST_F(EvalOnModel, SparseCoveringEveryPageEqualsExactAndTheJsonCarriesTheKeys) {
  const tokenizer::Tokenizer tok = tokenizer();
  const std::vector<engine::TokenId> tokens = text_tokens(tok, 128);
  SparseSettings all;
  all.mode = SparseMode::fraction;
  all.fraction = 1.0f;
  all.measure = true;
  SparseSettings quarter = all;
  quarter.fraction = 0.25f;
  const std::vector<EvalSetting> settings{named("exact", {}), named("fraction 1", all), named("fraction 1/4", quarter)};
  std::unique_ptr<EvalRig> r = rig(settings, 128);
  ASSERT_NE(r, nullptr);
  Result<std::vector<Window>> windows = plan_windows(128, 128, 24, 0);
  ASSERT_TRUE(windows.ok());
  Result<TextEvalResult> result = evaluate_text(*r, settings, tokens, *windows);
  ASSERT_TRUE(result.ok()) << result.error().describe();
  const SettingScore& exact = result->settings[0];
  const SettingScore& full = result->settings[1];
  const SettingScore& part = result->settings[2];
  EXPECT_EQ(full.nll_sum, exact.nll_sum);
  EXPECT_EQ(full.top1_agreement(), 1.0);
  EXPECT_NEAR(full.selection.mass_recall(), 1.0, 1e-6);
  EXPECT_EQ(full.selection.pages_read, full.selection.pages_held);
  // A quarter of ~7 pages per layer: fewer pages read, recall a share of the mass.
  EXPECT_LT(part.selection.pages_read, part.selection.pages_held);
  EXPECT_GT(part.selection.mass_recall(), 0.0);
  EXPECT_LE(part.selection.mass_recall(), 1.0 + 1e-9);
  EXPECT_GE(part.top1_agreement(), 0.0);
  EXPECT_LE(part.top1_agreement(), 1.0);

  const nlohmann::json j = text_report_json(ReportHeader{}, *result);
  ASSERT_EQ(j.at("settings").size(), 3u);
  for (const nlohmann::json& s : j.at("settings")) {
    for (const char* key : {"name", "perplexity", "top1_agreement", "mass_recall", "pages_read_per_step"})
      EXPECT_TRUE(s.contains(key)) << key;
    EXPECT_TRUE(std::isfinite(s.at("perplexity").get<double>()));
    EXPECT_GT(s.at("perplexity").get<double>(), 1.0);
    EXPECT_GE(s.at("top1_agreement").get<double>(), 0.0);
    EXPECT_LE(s.at("top1_agreement").get<double>(), 1.0);
    EXPECT_GT(s.at("pages_read_per_step").get<double>(), 0.0);
  }
  EXPECT_EQ(j.at("settings")[0].at("top1_agreement").get<double>(), 1.0);
  EXPECT_EQ(j.at("settings")[0].at("mass_recall").get<double>(), 1.0);
}

TEST_F(EvalOnModel, PasskeyPromptPlacesTheNeedleAndExactRetrievesIt) {
  const tokenizer::Tokenizer tok = tokenizer();
  Result<PasskeyPrompt> p = make_passkey_prompt(tok, 256, 0.5, 48213);
  ASSERT_TRUE(p.ok()) << p.error().describe();
  EXPECT_LE(p->prefix.size() + p->question.size() + passkey_answer_tokens_max, 256u);
  EXPECT_GT(p->prefix.size() + p->question.size() + passkey_answer_tokens_max, 256u - 30);  // filled to a unit
  const std::vector<tokenizer::TokenId> ids(p->prefix.begin(), p->prefix.end());
  const std::string text = tok.decode(ids);
  EXPECT_NE(text.find("The pass key is 48213."), std::string::npos);
  const double at = static_cast<double>(p->needle_token) / static_cast<double>(p->prefix.size());
  EXPECT_GT(at, 0.35);
  EXPECT_LT(at, 0.65);
  EXPECT_FALSE(make_passkey_prompt(tok, 40, 0.5, 48213).ok());

  const std::vector<EvalSetting> settings{named("exact", {})};
  std::unique_ptr<EvalRig> r = rig(settings, 160);
  ASSERT_NE(r, nullptr);
  PasskeyRequest request{160, {0.0, 1.0}, 1, 7};
  Result<PasskeyResult> result = evaluate_passkey(*r, tok, settings, request);
  ASSERT_TRUE(result.ok()) << result.error().describe();
  ASSERT_EQ(result->log.size(), 2u);
  for (const PasskeyTrial& t : result->log) {
    EXPECT_EQ(t.key.size(), 5u);
    EXPECT_EQ(t.answers.at(0), t.key) << "depth " << t.depth;
    ASSERT_EQ(t.top2.size(), 1u);
    EXPECT_GE(t.top2[0].size(), t.key.size());  // a step per token, at least one per digit here
    for (const std::array<float, 4>& step : t.top2[0]) {
      EXPECT_NE(step[0], step[2]);
      EXPECT_GE(step[1], step[3]);  // the greedy choice first
    }
  }
  EXPECT_EQ(leading_digits(" 48213."), "48213");
  EXPECT_EQ(leading_digits("no"), "");

  // --dump-prompt writes the prompts this run fed: the same keys in the same order.
  Result<std::vector<PasskeyCase>> cases = make_passkey_prompts(tok, request);
  ASSERT_TRUE(cases.ok()) << cases.error().describe();
  ASSERT_EQ(cases->size(), result->log.size());
  for (std::size_t i = 0; i < cases->size(); ++i) {
    EXPECT_EQ((*cases)[i].prompt.key, result->log[i].key);
    EXPECT_EQ((*cases)[i].depth, result->log[i].depth);
  }
}

TEST_F(EvalOnModel, PromptDumpHoldsTheIdsFedAndTheirText) {
  const tokenizer::Tokenizer tok = tokenizer();
  PasskeyRequest request{200, {0.0, 0.5}, 2, 3, PasskeyFormat::chat};
  Result<std::vector<PasskeyCase>> cases = make_passkey_prompts(tok, request);
  ASSERT_TRUE(cases.ok()) << cases.error().describe();
  ASSERT_EQ(cases->size(), 4u);
  EXPECT_NE((*cases)[0].prompt.key, (*cases)[1].prompt.key);  // one key per trial
  // The same request draws the same prompts (the keys' generator is the standard's).
  Result<std::vector<PasskeyCase>> again = make_passkey_prompts(tok, request);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[3].prompt.prefix, (*cases)[3].prompt.prefix);

  ReportHeader h;
  h.context = 200;
  h.seed = 3;
  const nlohmann::json j = passkey_prompts_json(h, "chat", tok, *cases);
  ASSERT_EQ(j.at("prompts").size(), 4u);
  for (std::size_t i = 0; i < cases->size(); ++i) {
    const PasskeyPrompt& p = (*cases)[i].prompt;
    const nlohmann::json& d = j.at("prompts")[i];
    std::vector<engine::TokenId> fed = p.prefix;
    fed.insert(fed.end(), p.question.begin(), p.question.end());
    EXPECT_EQ(d.at("tokens").get<std::vector<engine::TokenId>>(), fed);
    EXPECT_EQ(d.at("question_token").get<std::size_t>(), p.prefix.size());
    EXPECT_EQ(d.at("key").get<std::string>(), p.key);
    const std::string text = d.at("text").get<std::string>();
    EXPECT_EQ(text.rfind("<|im_start|>user\n", 0), 0u) << "control tokens are spelled out";
    EXPECT_NE(text.find(fmt::format("The pass key is {}.", p.key)), std::string::npos);
    const std::vector<tokenizer::TokenId> ids(fed.begin(), fed.end());
    EXPECT_EQ(text, tok.decode(ids, false));
  }

  const std::vector<engine::TokenId> tokens = text_tokens(tok, 100);
  const std::vector<Window> windows{{0, 60, 100}};
  h.stride = 40;
  const nlohmann::json t = text_tokens_json(h, tok, tokens, windows);
  EXPECT_EQ(t.at("tokens").get<std::vector<engine::TokenId>>(), tokens);
  EXPECT_EQ(t.at("windows"), nlohmann::json::parse("[[0, 60, 100]]"));
}

}  // namespace
}  // namespace activekv::eval
