// forward.cpp — the forward pass: a step through the architecture's layers (see forward.hpp).
#include "engine/forward.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "activekv/assert.hpp"

namespace activekv::engine {
namespace {

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Adds the time since `start` to `into` and restarts the clock.
struct Lap {
  std::uint64_t start = now_ns();
  void to(std::uint64_t& into) noexcept {
    const std::uint64_t t = now_ns();
    into += t - start;
    start = t;
  }
};

}  // namespace

namespace {
std::uint32_t run_context(const HParams& hp, const ForwardLimits& limits) {
  AK_ASSERT(limits.context_tokens <= hp.context_tokens, "Forward: the run's context is past the model's");
  return limits.context_tokens != 0 ? limits.context_tokens : hp.context_tokens;
}
}  // namespace

Status check_runnable(const Model& model, const ForwardLimits& limits) {
  (void)limits;
  const HParams& hp = model.config();
  if (hp.window_layers() == 0 || hp.layers <= LayerKinds::layers_max) return Status::success();
  return make_error(ErrorCode::unsupported, "block_count",
                    fmt::format("the model has {} layers, {} of them window layers ('{}.attention.sliding_window'); "
                                "the KV's layer-kind table describes at most {} layers",
                                hp.layers, hp.window_layers(), hp.architecture, LayerKinds::layers_max));
}

Forward::Forward(const Model& model, KvAccess& kv, ThreadPool& pool, Isa isa, ForwardLimits limits,
                 Activations activations)
    : model_(model),
      cfg_(model.config()),
      kv_(kv),
      isa_(isa),
      activations_(activations),
      limits_(limits),
      context_tokens_(run_context(model.config(), limits)),
      blocks_(model, kv, pool, isa, activations, std::max<std::uint32_t>(limits.step_tokens_max, 1), context_tokens_,
              times_) {
  AK_ASSERT(limits.step_tokens_max >= 1, "Forward: step_tokens_max must be at least 1");
  AK_ASSERT(limits.step_entries_max >= 1, "Forward: step_entries_max must be at least 1");
  AK_ASSERT(isa_available(isa), "Forward: instruction set not available on this CPU");
  AK_ASSERT(check_runnable(model, limits).ok(), "Forward: more window layers than the KV's layer-kind table holds");
  entries_.reserve(limits.step_entries_max);
  logit_rows_.assign(limits.step_entries_max, UINT32_MAX);
  logits_.assign(std::size_t{limits.step_entries_max} * cfg_.vocab, 0.0f);
}

Status Forward::validate(std::span<const StepInput> inputs) const {
  if (inputs.empty()) return make_error(ErrorCode::invalid_argument, "step", "a step needs at least one entry");
  if (inputs.size() > limits_.step_entries_max) {
    return make_error(ErrorCode::invalid_argument, "step_entries_max",
                      fmt::format("{} entries in one step; the engine was sized for {}", inputs.size(),
                                  limits_.step_entries_max));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (inputs[i].context == inputs[j].context)
        return make_error(ErrorCode::invalid_argument, "step", "a context appears twice in one step");
  std::size_t total = 0;
  for (const StepInput& in : inputs) {
    if (in.tokens.empty()) return make_error(ErrorCode::invalid_argument, "step", "an entry with no tokens");
    total += in.tokens.size();
    for (const TokenId t : in.tokens) {
      if (t >= cfg_.vocab)
        return make_error(ErrorCode::invalid_argument, "tokens",
                          fmt::format("token id {} is outside the vocabulary ({} tokens)", t, cfg_.vocab));
    }
    const std::uint64_t end = std::uint64_t{kv_.length(in.context)} + in.tokens.size();
    if (end > context_tokens_) {
      return make_error(ErrorCode::refused, "--max-context",
                        fmt::format("the context would hold {} tokens; the run's context length is {}", end,
                                    context_tokens_));
    }
  }
  if (total > limits_.step_tokens_max) {
    return make_error(ErrorCode::invalid_argument, "step_tokens_max",
                      fmt::format("{} tokens in one step; the engine was sized for {} (feed prefill in chunks)", total,
                                  limits_.step_tokens_max));
  }
  return Status::success();
}

Status Forward::step(std::span<const StepInput> inputs) {
  if (Status s = validate(inputs); !s) return s;
  Lap lap;
  entries_.clear();
  std::uint32_t row = 0;
  logit_count_ = 0;
  for (std::size_t e = 0; e < inputs.size(); ++e) {
    const StepInput& in = inputs[e];
    const std::uint32_t base = kv_.length(in.context);
    for (std::uint32_t i = 0; i < in.tokens.size(); ++i) blocks_.positions()[row + i] = base + i;
    row += static_cast<std::uint32_t>(in.tokens.size());
    entries_.push_back(StepEntry{in.context, static_cast<std::uint32_t>(in.tokens.size())});
    logit_rows_[e] = in.want_logits ? logit_count_++ : UINT32_MAX;
  }
  const std::uint32_t n = row;
  blocks_.set_rows(n);
  blocks_.set_entries(entries_);
  embed(inputs);
  lap.to(times_.other_ns);

  if (Status s = kv_.begin_step(entries_); !s) return s;
  lap.to(times_.planning_ns);
  const LayerBuilder build_layer = cfg_.arch->build_layer;
  for (std::uint32_t l = 0; l < cfg_.layers; ++l) {
    if (Status s = build_layer(blocks_, l); !s) {
      (void)kv_.end_step();  // close the step; the layer's error is the one reported
      return s;
    }
  }
  lap = Lap{};
  Status ended = kv_.end_step();
  lap.to(times_.copies_ns);
  if (!ended) return ended;
  final_logits(inputs);
  times_.steps += 1;
  times_.tokens += n;
  return Status::success();
}

std::span<const float> Forward::logits(std::uint32_t entry) const noexcept {
  if (entry >= limits_.step_entries_max || logit_rows_[entry] == UINT32_MAX) return {};
  return {logits_.data() + std::size_t{logit_rows_[entry]} * cfg_.vocab, cfg_.vocab};
}

void Forward::embed(std::span<const StepInput> inputs) {
  const MatrixView& te = model_.token_embd();
  std::uint32_t row = 0;
  for (const StepInput& in : inputs) {
    for (const TokenId t : in.tokens) {
      float* x = blocks_.x() + std::size_t{row} * cfg_.embedding;
      dequantize_row(te.type, te.data + std::size_t{t} * te.row_bytes, x, cfg_.embedding);
      if (cfg_.embedding_scale != 1.0f)
        for (std::uint32_t i = 0; i < cfg_.embedding; ++i) x[i] *= cfg_.embedding_scale;
      ++row;
    }
  }
}

void Forward::final_logits(std::span<const StepInput> inputs) {
  if (logit_count_ == 0) return;
  // Gather each wanting entry's last row, normalised, into h (logit_count_ rows).
  const std::uint32_t e = cfg_.embedding;
  std::uint32_t row = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    row += static_cast<std::uint32_t>(inputs[i].tokens.size());
    if (logit_rows_[i] == UINT32_MAX) continue;
    blocks_.norm(blocks_.x() + std::size_t{row - 1} * e, model_.output_norm(),
                 blocks_.h() + std::size_t{logit_rows_[i]} * e, e, 1);
  }
  Lap lap;  // the output product, in matmul_ns (the block's own timing) and in logits_ns
  const Blocks::Product out[] = {{&model_.output(), blocks_.h(), logits_.data()}};
  blocks_.matmul(logit_count_, out);
  lap.to(times_.logits_ns);
}

}  // namespace activekv::engine
