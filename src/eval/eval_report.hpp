// eval_report.hpp — what `activekv eval` prints: a table for people, JSON for tools.
//
// JSON (--json), text evaluation:
//   {"mode": "text", "text": FILE, "model": PATH, "context": N, "stride": S, "windows": W,
//    "scored_tokens": per setting, "tokens_prefilled": …, "tokens_adopted": …,
//    "settings": [{"name", "perplexity", "perplexity_ratio" (to exact), "top1_agreement",
//                  "mass_recall", "pages_read_per_step", "pages_held_per_step", "read_share",
//                  "decode_ms_per_step", "mass_recall_by_layer"}, …]}                                     exact first
// passkey:
//   {"mode": "passkey", "context": N, "trials": K, "seed": …, "depths": [...],
//    "settings": [{"name", "accuracy" (all depths), "accuracy_by_depth": [...],
//                  "mass_recall", "pages_read_per_step", "pages_held_per_step"}, …],
//    "trials_log": [{"depth", "key", "answers": [digits per setting], "answer_texts": [decoded],
//                    "answer_top2": per setting, per answer step [id, logit, id, logit]}, …]}
// pages_*_per_step are summed over the model's layers for one context's decode step.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "eval/passkey.hpp"
#include "eval/text_eval.hpp"

namespace activekv::eval {

struct ReportHeader {
  std::string model;
  std::string text;             // the --text file (text mode)
  std::uint32_t context = 0;
  std::uint32_t stride = 0;     // text mode
  std::uint64_t seed = 0;       // passkey mode
  std::uint64_t text_tokens = 0;
};

nlohmann::json text_report_json(const ReportHeader& h, const TextEvalResult& r);
std::string text_report_table(const ReportHeader& h, const TextEvalResult& r);
nlohmann::json passkey_report_json(const ReportHeader& h, const PasskeyResult& r);
std::string passkey_report_table(const ReportHeader& h, const PasskeyResult& r);

}  // namespace activekv::eval
