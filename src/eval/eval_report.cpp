// eval_report.cpp — see eval_report.hpp.
#include "eval/eval_report.hpp"

#include <fmt/format.h>

namespace activekv::eval {
namespace {

double ratio(double a, double b) { return b == 0.0 ? 0.0 : a / b; }

double ms_per_step(const SettingScore& s) {
  return s.tokens == 0 ? 0.0 : static_cast<double>(s.decode_ns) * 1e-6 / static_cast<double>(s.tokens);
}

// The measured recall of each dense layer that selected (sparse settings): [] when none did.
nlohmann::json recall_by_layer(const SelectionTotals& t) {
  nlohmann::json out = nlohmann::json::array();
  std::size_t layers = 0;
  for (std::size_t l = 0; l < t.recall_layer_count.size(); ++l) {
    if (t.recall_layer_count[l] > 0) layers = l + 1;
  }
  for (std::size_t l = 0; l < layers; ++l) {
    out.push_back(t.recall_layer_count[l] == 0 ? 1.0 : t.recall_layer_sum[l] / double(t.recall_layer_count[l]));
  }
  return out;
}

}  // namespace

nlohmann::json text_report_json(const ReportHeader& h, const TextEvalResult& r) {
  nlohmann::json settings = nlohmann::json::array();
  const double exact = r.settings.empty() ? 0.0 : r.settings[0].perplexity();
  for (const SettingScore& s : r.settings) {
    settings.push_back({{"name", s.name},
                        {"perplexity", s.perplexity()},
                        {"perplexity_ratio", ratio(s.perplexity(), exact)},
                        {"top1_agreement", s.top1_agreement()},
                        {"mass_recall", s.selection.mass_recall()},
                        {"pages_read_per_step", s.selection.pages_read_per_step()},
                        {"pages_held_per_step", s.selection.pages_held_per_step()},
                        {"read_share", ratio(s.selection.pages_read_per_step(), s.selection.pages_held_per_step())},
                        {"decode_ms_per_step", ms_per_step(s)},
                        {"mass_recall_by_layer", recall_by_layer(s.selection)}});
    // Layer budgets by the moments: their estimate of the recall, beside the measured one.
    if (s.selection.moment_estimate_count > 0) settings.back()["moment_estimate"] = s.selection.moment_estimate();
  }
  return {{"mode", "text"},       {"model", h.model},
          {"text", h.text},       {"text_tokens", h.text_tokens},
          {"context", h.context}, {"stride", h.stride},
          {"windows", r.windows}, {"scored_tokens", r.scored_tokens},
          {"tokens_prefilled", r.tokens_prefilled}, {"tokens_adopted", r.tokens_adopted},
          {"settings", settings}};
}

std::string text_report_table(const ReportHeader& h, const TextEvalResult& r) {
  std::string out = fmt::format(
      "{}: {} tokens; context {}, stride {}: {} windows, {} tokens scored per setting (decode steps, teacher forcing)\n",
      h.text, h.text_tokens, h.context, h.stride, r.windows, r.scored_tokens);
  out += fmt::format("{:<16} {:>11} {:>8} {:>8} {:>8} {:>11} {:>11} {:>7} {:>9}\n", "setting", "perplexity", "vs exact",
                     "top-1", "recall", "pages read", "pages held", "share", "ms/step");
  const double exact = r.settings.empty() ? 0.0 : r.settings[0].perplexity();
  for (const SettingScore& s : r.settings) {
    out += fmt::format("{:<16} {:>11.4f} {:>+7.2f}% {:>8.4f} {:>8.4f} {:>11.1f} {:>11.1f} {:>7.3f} {:>9.1f}\n", s.name,
                       s.perplexity(), (ratio(s.perplexity(), exact) - 1.0) * 100.0, s.top1_agreement(),
                       s.selection.mass_recall(), s.selection.pages_read_per_step(), s.selection.pages_held_per_step(),
                       ratio(s.selection.pages_read_per_step(), s.selection.pages_held_per_step()), ms_per_step(s));
  }
  out += "pages per step: summed over the layers, for one context's decode step; recall: attention mass of the "
         "pages read over all pages (measured); ms/step includes the measuring pass\n";
  return out;
}

nlohmann::json passkey_report_json(const ReportHeader& h, const PasskeyResult& r) {
  nlohmann::json settings = nlohmann::json::array();
  for (std::size_t s = 0; s < r.settings.size(); ++s) {
    nlohmann::json by_depth = nlohmann::json::array();
    std::uint64_t correct = 0;
    for (std::size_t d = 0; d < r.depths.size(); ++d) {
      by_depth.push_back(ratio(r.correct[s][d], r.trials));
      correct += r.correct[s][d];
    }
    const SelectionTotals& sel = r.selection[s];
    settings.push_back({{"name", r.settings[s]},
                        {"accuracy", ratio(static_cast<double>(correct), static_cast<double>(r.trials) * static_cast<double>(r.depths.size()))},
                        {"accuracy_by_depth", by_depth},
                        {"mass_recall", sel.mass_recall()},
                        {"pages_read_per_step", sel.pages_read_per_step()},
                        {"pages_held_per_step", sel.pages_held_per_step()}});
  }
  nlohmann::json log = nlohmann::json::array();
  for (const PasskeyTrial& t : r.log) {
    log.push_back({{"depth", t.depth}, {"key", t.key}, {"answers", t.answers}, {"answer_texts", t.texts}, {"answer_top2", t.top2},
                   {"needle_rank_by_layer", t.needle_ranks}, {"budget_by_layer", t.budgets}});
  }
  return {{"mode", "passkey"}, {"model", h.model},   {"context", h.context}, {"trials", r.trials},
          {"seed", h.seed},    {"depths", r.depths}, {"settings", settings},  {"trials_log", log}};
}

std::string passkey_report_table(const ReportHeader& h, const PasskeyResult& r) {
  std::string out = fmt::format("passkey: context {}, {} trial(s) per depth, seed {}; retrieval accuracy by depth\n",
                                h.context, r.trials, h.seed);
  out += fmt::format("{:<16}", "setting");
  for (double d : r.depths) out += fmt::format(" {:>7}", fmt::format("{:.2f}", d));
  out += fmt::format(" {:>8} {:>8} {:>11}\n", "all", "recall", "pages read");
  for (std::size_t s = 0; s < r.settings.size(); ++s) {
    out += fmt::format("{:<16}", r.settings[s]);
    std::uint64_t correct = 0;
    for (std::size_t d = 0; d < r.depths.size(); ++d) {
      out += fmt::format(" {:>7.2f}", ratio(r.correct[s][d], r.trials));
      correct += r.correct[s][d];
    }
    out += fmt::format(" {:>8.2f} {:>8.4f} {:>11.1f}\n",
                       ratio(static_cast<double>(correct), static_cast<double>(r.trials) * static_cast<double>(r.depths.size())),
                       r.selection[s].mass_recall(), r.selection[s].pages_read_per_step());
  }
  return out;
}

}  // namespace activekv::eval
