// eval_setting_test.cpp — exact first, the default set, names, refusals.
#include "eval/eval_setting.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace activekv::eval {
namespace {

TEST(EvalSettings, DefaultIsExactThenHalvingsAndAdaptive) {
  Result<std::vector<EvalSetting>> s = make_settings({});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 6u);
  EXPECT_EQ((*s)[0].name, "exact");
  EXPECT_FALSE((*s)[0].sparse.enabled());
  EXPECT_EQ((*s)[1].name, "fraction 1/2");
  EXPECT_EQ((*s)[3].name, "fraction 1/8");
  EXPECT_EQ((*s)[3].sparse.mode, SparseMode::fraction);
  EXPECT_FLOAT_EQ((*s)[3].sparse.fraction, 0.125f);
  EXPECT_EQ((*s)[4].name, "fraction 1/16");
  EXPECT_EQ((*s)[5].name, "adaptive");
  for (std::size_t i = 1; i < s->size(); ++i) EXPECT_TRUE((*s)[i].sparse.measure) << (*s)[i].name;
}

TEST(EvalSettings, ExactOnlyIsExactAloneAndRefusesSparseSettings) {
  SettingRequest r;
  r.exact_only = true;
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s) << s.error().describe();
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ((*s)[0].name, "exact");
  EXPECT_FALSE((*s)[0].sparse.enabled());
  r.fractions = {0.5f};
  Result<std::vector<EvalSetting>> both = make_settings(r);
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().describe().find("--exact-only"), std::string::npos) << both.error().describe();
}

TEST(EvalSettings, RequestedInOrder) {
  SettingRequest r;
  r.fractions = {0.3f, 1.0f};
  r.pages = {64};
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[1].name, "fraction 0.3");
  EXPECT_EQ((*s)[2].name, "fraction 1");
  EXPECT_EQ((*s)[3].name, "pages 64");
  EXPECT_EQ((*s)[3].sparse.pages, 64u);
}

TEST(EvalSettings, OneListAndLayerBudgetVariantsFollowEachSetting) {
  SettingRequest r;
  r.fractions = {0.125f};
  r.adaptive = true;
  r.one_list = true;
  r.layer_budget = true;
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 6u);
  EXPECT_EQ((*s)[1].name, "fraction 1/8");
  EXPECT_TRUE((*s)[1].sparse.per_group);
  EXPECT_FALSE((*s)[1].sparse.layer_budget);
  EXPECT_EQ((*s)[2].name, "fraction 1/8 layers");
  EXPECT_TRUE((*s)[2].sparse.layer_budget);
  EXPECT_EQ((*s)[3].name, "fraction 1/8 one list");
  EXPECT_FALSE((*s)[3].sparse.per_group);
  EXPECT_FALSE((*s)[3].sparse.layer_budget);
  EXPECT_EQ((*s)[4].name, "adaptive");  // no layer variant: the adaptive budget has its own rule
  EXPECT_EQ((*s)[5].name, "adaptive one list");
  for (std::size_t i = 1; i < s->size(); ++i) EXPECT_TRUE((*s)[i].sparse.measure) << (*s)[i].name;
}

TEST(EvalSettings, LayerSignalsGiveOneLayeredSettingEachAndAreRefusedAlone) {
  SettingRequest r;
  r.fractions = {0.125f};
  r.layer_budget = true;
  r.scores = {"mixed"};
  r.layer_signals = {"moments", "captured"};
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[1].name, "fraction 1/8 mixed");
  EXPECT_FALSE((*s)[1].sparse.layer_budget);
  EXPECT_EQ((*s)[2].name, "fraction 1/8 mixed layers by moments");
  EXPECT_TRUE((*s)[2].sparse.layer_budget);
  EXPECT_EQ((*s)[2].sparse.layer_signal, LayerSignal::moments);
  EXPECT_EQ((*s)[3].name, "fraction 1/8 mixed layers");
  EXPECT_EQ((*s)[3].sparse.layer_signal, LayerSignal::captured);
  const auto refused = [](SettingRequest q, const char* what) {
    Result<std::vector<EvalSetting>> bad = make_settings(q);
    ASSERT_FALSE(bad.ok()) << what;
    EXPECT_NE(bad.error().describe().find("--sparse-layer-signal"), std::string::npos) << bad.error().describe();
  };
  SettingRequest q = r;
  q.layer_signals = {"kernel"};
  refused(q, "an unknown signal");
  q.layer_signals = {"moments", "moments"};
  refused(q, "a signal twice");
  q.layer_signals = {"moments"};
  q.layer_budget = false;
  refused(q, "a signal without layer budgets");
}

// --sparse-heavy: each fixed budget, layered ones included, is followed by the same keeping the
// heavy hitters; the adaptive budget (which always keeps them) gets no variant.
TEST(EvalSettings, HeavyVariantsFollowEachFixedSetting) {
  SettingRequest r;
  r.fractions = {0.125f};
  r.adaptive = true;
  r.layer_budget = true;
  r.layer_signals = {"moments"};
  r.heavy = true;
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 6u);
  EXPECT_EQ((*s)[1].name, "fraction 1/8");
  EXPECT_FALSE((*s)[1].sparse.heavy_hitters);
  EXPECT_EQ((*s)[2].name, "fraction 1/8 heavy");
  EXPECT_TRUE((*s)[2].sparse.heavy_hitters);
  EXPECT_FALSE((*s)[2].sparse.layer_budget);
  EXPECT_EQ((*s)[3].name, "fraction 1/8 layers by moments");
  EXPECT_FALSE((*s)[3].sparse.heavy_hitters);
  EXPECT_EQ((*s)[4].name, "fraction 1/8 layers by moments heavy");
  EXPECT_TRUE((*s)[4].sparse.heavy_hitters);
  EXPECT_TRUE((*s)[4].sparse.layer_budget);
  EXPECT_EQ((*s)[5].name, "adaptive");
  EXPECT_FALSE((*s)[5].sparse.heavy_hitters);
}

// --sparse-mix: the mixed score once per weight, named with it; refused outside (0, 1) or
// without the mixed score, naming the flag.
TEST(EvalSettings, MixWeightsGiveOneMixedSettingEach) {
  SettingRequest r;
  r.fractions = {0.125f};
  r.scores = {"bound", "mixed"};
  r.mix_weights = {0.25f, 0.75f};
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[1].name, "fraction 1/8");
  EXPECT_EQ((*s)[2].name, "fraction 1/8 mixed 0.25");
  EXPECT_EQ((*s)[2].sparse.score, SparseScore::mixed);
  EXPECT_EQ((*s)[2].sparse.mix_moments, 0.25f);
  EXPECT_EQ((*s)[3].name, "fraction 1/8 mixed 0.75");
  EXPECT_EQ((*s)[3].sparse.mix_moments, 0.75f);
  for (const std::vector<float>& bad : {std::vector<float>{0.0f}, std::vector<float>{1.0f}, std::vector<float>{-0.5f}}) {
    SettingRequest q = r;
    q.mix_weights = bad;
    Result<std::vector<EvalSetting>> refused = make_settings(q);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().describe().find("--sparse-mix"), std::string::npos);
  }
  SettingRequest q = r;
  q.scores = {"bound"};
  Result<std::vector<EvalSetting>> refused = make_settings(q);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().describe().find("--sparse-score mixed"), std::string::npos);
}

// --sparse-recent N: every sparse setting (not exact) reads the newest N pages, named with it;
// refused above 64, naming the flag.
TEST(EvalSettings, RecentPagesApplyToEverySparseSetting) {
  SettingRequest r;
  r.fractions = {0.125f};
  r.layer_budget = true;
  r.recent_pages = 6;
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0].name, "exact");
  EXPECT_EQ((*s)[0].sparse.recent_pages, SparseSettings{}.recent_pages);
  EXPECT_EQ((*s)[1].name, "fraction 1/8 recent 6");
  EXPECT_EQ((*s)[1].sparse.recent_pages, 6u);
  EXPECT_EQ((*s)[2].name, "fraction 1/8 layers recent 6");
  EXPECT_EQ((*s)[2].sparse.recent_pages, 6u);
  r.recent_pages = 65;
  Result<std::vector<EvalSetting>> refused = make_settings(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().describe().find("--sparse-recent"), std::string::npos);
}

TEST(EvalSettings, EachSettingRunsOncePerScoreNamedWithIt) {
  SettingRequest r;
  r.fractions = {0.125f};
  r.scores = {"bound", "oracle", "moments"};
  Result<std::vector<EvalSetting>> s = make_settings(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].sparse.score, SparseScore::bound);
  EXPECT_EQ((*s)[1].name, "fraction 1/8");
  EXPECT_EQ((*s)[1].sparse.score, SparseScore::bound);
  EXPECT_EQ((*s)[2].name, "fraction 1/8 oracle");
  EXPECT_EQ((*s)[2].sparse.score, SparseScore::oracle);
  EXPECT_EQ((*s)[3].name, "fraction 1/8 moments");
  EXPECT_EQ((*s)[3].sparse.score, SparseScore::moments);
  SettingRequest only;
  only.fractions = {0.25f};
  only.scores = {"oracle"};
  s = make_settings(only);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1].name, "fraction 1/4 oracle");
}

TEST(EvalSettings, Refusals) {
  for (const char* bad : {"quest", "", "Oracle"}) {
    SettingRequest r;
    r.scores = {bad};
    Result<std::vector<EvalSetting>> s = make_settings(r);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.error().setting, "--sparse-score");
  }
  SettingRequest score_twice;
  score_twice.scores = {"oracle", "oracle"};
  ASSERT_FALSE(make_settings(score_twice).ok());
  for (float f : {0.0f, -0.5f, 1.5f, std::nanf("")}) {
    SettingRequest r;
    r.fractions = {f};
    Result<std::vector<EvalSetting>> s = make_settings(r);
    ASSERT_FALSE(s.ok()) << f;
    EXPECT_EQ(s.error().setting, "--sparse-fraction");
  }
  SettingRequest zero;
  zero.pages = {0};
  ASSERT_FALSE(make_settings(zero).ok());
  SettingRequest twice;
  twice.fractions = {0.125f, 0.125f};
  ASSERT_FALSE(make_settings(twice).ok());
  SettingRequest many;
  many.pages.resize(settings_max, 1);
  for (std::uint32_t i = 0; i < settings_max; ++i) many.pages[i] = i + 1;
  ASSERT_FALSE(make_settings(many).ok());
}

}  // namespace
}  // namespace activekv::eval
