// setting_contexts.cpp — see setting_contexts.hpp.
#include "eval/setting_contexts.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "activekv/decision_log.hpp"

namespace activekv::eval {

void SelectionTotals::add(const SelectionTotals& o) noexcept {
  steps += o.steps;
  pages_read += o.pages_read;
  pages_held += o.pages_held;
  recall_sum += o.recall_sum;
  recall_count += o.recall_count;
  moment_estimate_sum += o.moment_estimate_sum;
  moment_estimate_count += o.moment_estimate_count;
  for (std::size_t l = 0; l < recall_layer_sum.size(); ++l) {
    recall_layer_sum[l] += o.recall_layer_sum[l];
    recall_layer_count[l] += o.recall_layer_count[l];
  }
}

SettingContexts::SettingContexts(engine::Forward& forward, KvRuntime& runtime, std::span<const EvalSetting> settings)
    : forward_(forward), runtime_(runtime), settings_(settings.begin(), settings.end()), totals_(settings.size()) {
  AK_ASSERT(!settings_.empty(), "setting contexts: no setting");
  contexts_.reserve(settings_.size());
}

SettingContexts::~SettingContexts() { close(); }

Status SettingContexts::use_setting(std::uint32_t s) {
  if (!in_exact_ && current_ == s) return Status::success();
  if (Status st = runtime_.set_sparse(settings_[s].sparse); !st) return st;
  current_ = s;
  in_exact_ = false;
  return Status::success();
}

Status SettingContexts::prefill(ContextId context, std::span<const engine::TokenId> tokens) {
  if (tokens.empty()) return Status::success();
  if (!in_exact_) {  // prefill is exact whatever the setting; a 1-token remainder would otherwise be a sparse step
    if (Status st = runtime_.set_sparse(SparseSettings{}); !st) return st;
    in_exact_ = true;
  }
  const std::uint32_t chunk = forward_.limits().step_tokens_max;
  for (std::size_t at = 0; at < tokens.size(); at += chunk) {
    const std::size_t n = std::min<std::size_t>(chunk, tokens.size() - at);
    const engine::StepInput input{context, tokens.subspan(at, n), false};
    if (Status st = forward_.step({&input, 1}); !st) return st;
  }
  tokens_prefilled_ += tokens.size();
  return Status::success();
}

Result<ContextId> SettingContexts::admit(std::span<const std::int32_t> prompt, std::uint32_t tokens_max,
                                         std::uint32_t& reused) {
  reused = 0;
  Result<AdmitResult> admitted = prompt.empty() ? runtime_.open_context(next_request_++, tokens_max)
                                                : runtime_.open_context(next_request_++, tokens_max, prompt, reused);
  if (!admitted) return admitted.error();
  if (admitted->outcome != AdmitOutcome::admitted)
    return make_error(ErrorCode::refused, "--device-pool",
                      fmt::format("the pools cannot hold {} contexts of {} tokens at once (one per setting; {}): "
                                  "raise --device-pool or --host-pool, or compare fewer settings",
                                  settings_.size(), tokens_max, reason_text(admitted->reason)));
  return admitted->handle;
}

Status SettingContexts::open(std::span<const engine::TokenId> prefix, std::uint32_t tokens_max) {
  AK_ASSERT(contexts_.empty(), "setting contexts: open() twice without close()");
  prompt_.assign(prefix.begin(), prefix.end());
  const std::uint32_t page_tokens = runtime_.plan().arena.page_tokens;
  std::uint32_t reused = 0;
  // The shared prefix, once: worth it when a full page of it can be adopted.
  if (settings_.size() > 1 && prefix.size() > page_tokens) {
    Result<ContextId> shared = admit({}, tokens_max, reused);
    if (!shared) return shared.error();
    if (Status st = prefill(*shared, prefix); !st) {
      runtime_.finish(*shared);
      return st;
    }
    runtime_.finish_retaining(*shared, prompt_);
  }
  for (std::size_t s = 0; s < settings_.size(); ++s) {
    Result<ContextId> context = admit(prompt_, tokens_max, reused);
    if (!context) return context.error();
    contexts_.push_back(*context);
    tokens_adopted_ += reused;
    if (Status st = prefill(*context, prefix.subspan(reused)); !st) return st;
  }
  return Status::success();
}

Result<std::span<const float>> SettingContexts::decode(std::uint32_t s, engine::TokenId token) {
  AK_ASSERT(s < contexts_.size(), "setting contexts: decode() of a setting not open");
  if (Status st = use_setting(s); !st) return st.error();
  const SparseStats before = runtime_.sparse_stats();
  const engine::StepInput input{contexts_[s], {&token, 1}, true};
  if (Status st = forward_.step({&input, 1}); !st) return st.error();
  const SparseStats& after = runtime_.sparse_stats();

  const MemoryPlan& plan = runtime_.plan();
  const std::uint64_t layers = plan.geometry.dense_layers;
  const std::uint64_t pages = (runtime_.length(contexts_[s]) + plan.arena.page_tokens - 1) / plan.arena.page_tokens;
  SelectionTotals& t = totals_[s];
  ++t.steps;
  const std::uint64_t selections = after.selections - before.selections;
  if (selections == 0) {
    // Exact, or a sparse setting whose budget covered every page this step: every page read, all the mass.
    t.pages_read += layers * pages;
    t.pages_held += layers * pages;
    t.recall_sum += static_cast<double>(layers);
    t.recall_count += layers;
  } else {
    t.pages_read += after.pages_read - before.pages_read;
    t.pages_held += after.pages_context - before.pages_context;
    t.recall_sum += after.recall_sum - before.recall_sum;
    t.recall_count += after.recall_count - before.recall_count;
    t.moment_estimate_sum += after.moment_estimate_sum - before.moment_estimate_sum;
    t.moment_estimate_count += after.moment_estimate_count - before.moment_estimate_count;
    for (std::size_t l = 0; l < t.recall_layer_sum.size(); ++l) {
      t.recall_layer_sum[l] += after.recall_layer_sum[l] - before.recall_layer_sum[l];
      t.recall_layer_count[l] += after.recall_layer_count[l] - before.recall_layer_count[l];
    }
  }
  return forward_.logits(0);
}

void SettingContexts::close() {
  for (ContextId c : contexts_) {
    if (runtime_.running(c)) runtime_.finish(c);
  }
  contexts_.clear();
}

}  // namespace activekv::eval
