// eval_setting.cpp — see eval_setting.hpp.
#include "eval/eval_setting.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

namespace activekv::eval {
namespace {

EvalSetting sparse_setting(std::string name, SparseMode mode) {
  EvalSetting s;
  s.name = std::move(name);
  s.sparse.mode = mode;
  s.sparse.measure = true;
  return s;
}

constexpr SparseScore known_scores[] = {SparseScore::bound, SparseScore::moments, SparseScore::mixed,
                                      SparseScore::oracle};

EvalSetting fraction_setting(float fraction) {
  EvalSetting s = sparse_setting("fraction " + fraction_name(fraction), SparseMode::fraction);
  s.sparse.fraction = fraction;
  return s;
}

EvalSetting pages_setting(std::uint32_t pages) {
  EvalSetting s = sparse_setting(fmt::format("pages {}", pages), SparseMode::pages);
  s.sparse.pages = pages;
  return s;
}

}  // namespace

std::string fraction_name(float fraction) {
  if (fraction > 0.0f && fraction <= 1.0f) {
    const double inverse = 1.0 / static_cast<double>(fraction);
    const double whole = std::round(inverse);
    if (std::fabs(inverse - whole) < 1e-4 * whole) return whole == 1.0 ? "1" : fmt::format("1/{}", whole);
  }
  return fmt::format("{}", fraction);
}

Result<std::vector<EvalSetting>> make_settings(const SettingRequest& request) {
  std::vector<EvalSetting> out;
  EvalSetting exact;
  exact.name = "exact";
  out.push_back(exact);
  const bool none = request.fractions.empty() && request.pages.empty() && !request.adaptive;
  if (request.exact_only) {
    if (!none)
      return make_error(ErrorCode::invalid_argument, "--exact-only",
                        "runs exact attention alone: drop --sparse-fraction, --sparse-pages and --sparse-adaptive");
    return out;
  }
  std::vector<SparseScore> scores;
  for (const std::string& name : request.scores) {
    const SparseScore* found = std::find_if(std::begin(known_scores), std::end(known_scores),
                                            [&](SparseScore k) { return name == sparse_score_name(k); });
    if (found == std::end(known_scores)) {
      return make_error(ErrorCode::invalid_argument, "--sparse-score",
                        fmt::format("'{}' is not a page score: give bound, moments, mixed or oracle", name));
    }
    const SparseScore score = *found;
    if (std::find(scores.begin(), scores.end(), score) != scores.end())
      return make_error(ErrorCode::invalid_argument, "--sparse-score", fmt::format("the score '{}' is given twice", name));
    scores.push_back(score);
  }
  if (scores.empty()) scores.push_back(SparseScore::bound);
  for (float w : request.mix_weights) {
    if (!(w > 0.0f && w < 1.0f))
      return make_error(ErrorCode::invalid_argument, "--sparse-mix",
                        fmt::format("{} is not a weight in (0, 1): give the moments' share of the mixed score", w));
  }
  if (!request.mix_weights.empty() && std::find(scores.begin(), scores.end(), SparseScore::mixed) == scores.end())
    return make_error(ErrorCode::invalid_argument, "--sparse-mix", "weighs the mixed score: add --sparse-score mixed");
  std::vector<LayerSignal> signals;
  for (const std::string& name : request.layer_signals) {
    LayerSignal signal = LayerSignal::captured;
    if (name == layer_signal_name(LayerSignal::moments)) {
      signal = LayerSignal::moments;
    } else if (name != layer_signal_name(LayerSignal::captured)) {
      return make_error(ErrorCode::invalid_argument, "--sparse-layer-signal",
                        fmt::format("'{}' is not a layer signal: give captured or moments", name));
    }
    if (std::find(signals.begin(), signals.end(), signal) != signals.end())
      return make_error(ErrorCode::invalid_argument, "--sparse-layer-signal",
                        fmt::format("the layer signal '{}' is given twice", name));
    signals.push_back(signal);
  }
  if (!signals.empty() && !request.layer_budget)
    return make_error(ErrorCode::invalid_argument, "--sparse-layer-signal",
                      "says what moves pages between layers: add --sparse-layer-budget");
  if (signals.empty()) signals.push_back(LayerSignal::captured);
  // --sparse-one-list: after each sparse setting, the same with one page list for all heads.
  // --sparse-layer-budget: after each fixed budget, the same spread over the layers.
  // --sparse-heavy: after each fixed budget, the same keeping the heavy hitters.
  const auto add_heavy = [&](const EvalSetting& s) {
    out.push_back(s);
    if (!request.heavy || s.sparse.mode == SparseMode::adaptive) return;
    EvalSetting heavy = s;
    heavy.name += " heavy";
    heavy.sparse.heavy_hitters = true;
    out.push_back(std::move(heavy));
  };
  const auto add_layered = [&](const EvalSetting& s) {
    add_heavy(s);
    if (request.layer_budget && s.sparse.mode != SparseMode::adaptive) {
      for (LayerSignal signal : signals) {
        EvalSetting layered = s;
        layered.name += signal == LayerSignal::moments ? " layers by moments" : " layers";
        layered.sparse.layer_budget = true;
        layered.sparse.layer_signal = signal;
        add_heavy(layered);
      }
    }
  };
  const auto add_scored = [&](EvalSetting s) {
    add_layered(s);
    if (request.per_head) {  // --sparse-per-head: the same with per-query-head rankings
      EvalSetting heads = s;
      heads.name += " heads";
      heads.sparse.per_head = true;
      add_layered(heads);
    }
    if (!request.one_list) return;
    s.name += " one list";
    s.sparse.per_group = false;
    out.push_back(std::move(s));
  };
  // Each score in turn, named with it unless it is the bound.
  const auto add = [&](const EvalSetting& s) {
    for (SparseScore score : scores) {
      if (score == SparseScore::mixed && !request.mix_weights.empty()) {
        for (float w : request.mix_weights) {
          EvalSetting mixed = s;
          mixed.sparse.score = score;
          mixed.sparse.mix_moments = w;
          mixed.name += fmt::format(" mixed {:g}", w);
          add_scored(std::move(mixed));
        }
        continue;
      }
      EvalSetting scored = s;
      scored.sparse.score = score;
      if (score != SparseScore::bound) scored.name += fmt::format(" {}", sparse_score_name(score));
      add_scored(std::move(scored));
    }
  };
  if (none) {
    for (float f : {0.5f, 0.25f, 0.125f, 0.0625f}) add(fraction_setting(f));
    add(sparse_setting("adaptive", SparseMode::adaptive));
    return out;
  }
  for (float f : request.fractions) {
    if (!(f > 0.0f && f <= 1.0f))
      return make_error(ErrorCode::invalid_argument, "--sparse-fraction",
                        fmt::format("{} is not a share of the pages: give a number in (0, 1], e.g. 0.125", f));
    add(fraction_setting(f));
  }
  for (std::uint32_t p : request.pages) {
    if (p == 0)
      return make_error(ErrorCode::invalid_argument, "--sparse-pages",
                        "0 pages reads nothing: give a page budget of at least 1");
    add(pages_setting(p));
  }
  if (request.adaptive) add(sparse_setting("adaptive", SparseMode::adaptive));
  if (request.recent_pages != 0) {
    if (request.recent_pages > 64)
      return make_error(ErrorCode::invalid_argument, "--sparse-recent",
                        fmt::format("{} newest pages always read: give 1 to 64", request.recent_pages));
    for (std::size_t i = 1; i < out.size(); ++i) {
      out[i].sparse.recent_pages = request.recent_pages;
      out[i].name += fmt::format(" recent {}", request.recent_pages);
    }
  }
  if (out.size() > settings_max)
    return make_error(ErrorCode::invalid_argument, "--sparse-fraction/--sparse-pages",
                      fmt::format("{} settings asked for; at most {} (exact included) run in one evaluation",
                                  out.size(), settings_max));
  for (std::size_t i = 1; i < out.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (out[i].name == out[j].name)
        return make_error(ErrorCode::invalid_argument, out[i].sparse.mode == SparseMode::pages ? "--sparse-pages" : "--sparse-fraction",
                          fmt::format("the setting '{}' is asked for twice", out[i].name));
    }
  }
  return out;
}

}  // namespace activekv::eval
