// forward.cpp — the Llama forward pass (see forward.hpp).
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

Forward::Forward(const Model& model, KvAccess& kv, ThreadPool& pool, Isa isa, ForwardLimits limits)
    : model_(model), cfg_(model.config()), kv_(kv), pool_(pool), isa_(isa), limits_(limits) {
  AK_ASSERT(limits.step_tokens_max >= 1, "Forward: step_tokens_max must be at least 1");
  AK_ASSERT(limits.step_entries_max >= 1, "Forward: step_entries_max must be at least 1");
  AK_ASSERT(isa_available(isa), "Forward: instruction set not available on this CPU");
  const std::size_t n = limits.step_tokens_max;
  const std::size_t qd = std::size_t{cfg_.q_heads} * cfg_.head_dim;
  const std::size_t kvd = std::size_t{cfg_.kv_heads} * cfg_.head_dim;
  x_.assign(n * cfg_.embedding, 0.0f);
  h_.assign(n * std::max<std::size_t>(cfg_.embedding, qd), 0.0f);
  q_.assign(n * qd, 0.0f);
  k_.assign(n * kvd, 0.0f);
  v_.assign(n * kvd, 0.0f);
  attn_.assign(n * qd, 0.0f);
  gate_.assign(n * cfg_.ffn, 0.0f);
  up_.assign(n * cfg_.ffn, 0.0f);
  positions_.assign(n, 0);
  entries_.reserve(limits.step_entries_max);
  logit_rows_.assign(limits.step_entries_max, UINT32_MAX);
  logits_.assign(std::size_t{limits.step_entries_max} * cfg_.vocab, 0.0f);
  scratch_stride_ = std::max({cfg_.embedding, cfg_.ffn, static_cast<std::uint32_t>(qd)});
  scratch_.assign(scratch_stride_ * pool.threads(), 0.0f);
  xq_q_.assign(n * scratch_stride_, 0);
  xq_d_.assign(n * scratch_stride_ / q16_block + 1, 0.0f);
  xq_s_.assign(n * scratch_stride_ / q16_block + 1, 0.0f);

  // RoPE angles, computed in double once: theta_i(pos) = pos × base^(−2i/rope_dims).
  // One row per position the run can reach: the run's context, never more than the model's.
  AK_ASSERT(limits.context_tokens <= cfg_.context_tokens, "Forward: the run's context is past the model's");
  context_tokens_ = limits.context_tokens != 0 ? limits.context_tokens : cfg_.context_tokens;
  const std::size_t pairs = cfg_.rope_dims / 2;
  rope_cos_.assign(std::size_t{context_tokens_} * pairs, 0.0f);
  rope_sin_.assign(std::size_t{context_tokens_} * pairs, 0.0f);
  std::vector<double> freqs(pairs);
  for (std::size_t i = 0; i < pairs; ++i)
    freqs[i] = std::pow(static_cast<double>(cfg_.rope_theta), -2.0 * static_cast<double>(i) / cfg_.rope_dims);
  for (std::size_t pos = 0; pos < context_tokens_; ++pos) {
    for (std::size_t i = 0; i < pairs; ++i) {
      const double angle = static_cast<double>(pos) * freqs[i];
      rope_cos_[pos * pairs + i] = static_cast<float>(std::cos(angle));
      rope_sin_[pos * pairs + i] = static_cast<float>(std::sin(angle));
    }
  }
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
    for (std::uint32_t i = 0; i < in.tokens.size(); ++i) positions_[row + i] = base + i;
    row += static_cast<std::uint32_t>(in.tokens.size());
    entries_.push_back(StepEntry{in.context, static_cast<std::uint32_t>(in.tokens.size())});
    logit_rows_[e] = in.want_logits ? logit_count_++ : UINT32_MAX;
  }
  const std::uint32_t n = row;
  embed(inputs);
  lap.to(times_.other_ns);

  if (Status s = kv_.begin_step(entries_); !s) return s;
  lap.to(times_.planning_ns);
  for (std::uint32_t l = 0; l < cfg_.layers; ++l) {
    if (Status s = layer(l, n); !s) {
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
      dequantize_row(te.type, te.data + std::size_t{t} * te.row_bytes, x_.data() + std::size_t{row} * cfg_.embedding,
                     cfg_.embedding);
      ++row;
    }
  }
}

void Forward::quantize(const float* x, std::uint32_t cols, std::uint32_t n) {
  xq_ = Q16Rows{xq_q_.data(), xq_d_.data(), xq_s_.data(), cols, n};
  constexpr std::uint32_t rows_per_chunk = 32;  // below this a region's wake-up costs more than it saves
  if (n < 2 * rows_per_chunk) {
    quantize_rows_q16(isa_, x, cols, xq_, 0, n);
    return;
  }
  struct Ctx {
    Forward* self;
    const float* x;
    std::uint32_t cols;
    std::uint32_t n;
  } ctx{this, x, cols, n};
  // Each row's bytes depend on that row alone, so the split does not change them.
  pool_.run_chunks(
      [](void* c, std::uint32_t index, std::uint32_t count, std::uint32_t) {
        const Ctx& q = *static_cast<const Ctx*>(c);
        const std::size_t begin = std::uint64_t{q.n} * index / count;
        const std::size_t end = std::uint64_t{q.n} * (index + 1) / count;
        quantize_rows_q16(q.self->isa_, q.x, q.cols, q.self->xq_, begin, end);
      },
      &ctx, std::min<std::uint32_t>(n / rows_per_chunk, 4 * pool_.threads()));
}

void Forward::matmul(std::uint32_t n, std::span<const Product> products) {
  bool quantised = true;
  for (const Product& p : products)
    quantised = quantised && q16_supported(p.w->type, p.w->cols) && p.x == products[0].x &&
                p.w->cols == products[0].w->cols;
  if (quantised) quantize(products[0].x, products[0].w->cols, n);
  struct Ctx {
    Forward* self;
    std::span<const Product> products;
    std::uint32_t n;
    std::uint32_t rows_total;
    bool quantised;
  } ctx{this, products, n, 0, quantised};
  for (const Product& p : products) ctx.rows_total += p.w->rows;
  // Chunks of rows claimed by whichever thread is free (a descheduled thread
  // holds up one chunk, not half the product). A row's arithmetic does not
  // depend on its chunk or thread, so neither do the outputs.
  const std::uint32_t chunks = std::min<std::uint32_t>(ctx.rows_total / 64 + 1, 8 * pool_.threads());
  pool_.run_chunks(
      [](void* c, std::uint32_t index, std::uint32_t count, std::uint32_t thread) {
        const Ctx& x = *static_cast<const Ctx*>(c);
        const std::uint32_t begin = static_cast<std::uint32_t>(std::uint64_t{x.rows_total} * index / count);
        const std::uint32_t end = static_cast<std::uint32_t>(std::uint64_t{x.rows_total} * (index + 1) / count);
        float* scratch = x.self->scratch_.data() + thread * x.self->scratch_stride_;
        std::uint32_t offset = 0;  // first row of the current product in the concatenated row space
        for (const Product& p : x.products) {
          const std::uint32_t lo = std::max(begin, offset);
          const std::uint32_t hi = std::min(end, offset + p.w->rows);
          if (lo < hi && x.quantised) {
            matmul_rows_q16(x.self->isa_, *p.w, x.self->xq_, p.y, p.w->rows, lo - offset, hi - offset, scratch);
          } else if (lo < hi) {
            matmul_rows(x.self->isa_, *p.w, p.x, p.w->cols, x.n, p.y, p.w->rows, lo - offset, hi - offset, scratch);
          }
          offset += p.w->rows;
        }
      },
      &ctx, chunks);
}

void Forward::rmsnorm(const float* x, const float* weight, float* out, std::uint32_t n) const noexcept {
  const std::uint32_t e = cfg_.embedding;
  for (std::uint32_t r = 0; r < n; ++r) {
    const float* xr = x + std::size_t{r} * e;
    float* o = out + std::size_t{r} * e;
    float sum = 0.0f;
    for (std::uint32_t i = 0; i < e; ++i) sum += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(e) + cfg_.rms_epsilon);
    for (std::uint32_t i = 0; i < e; ++i) o[i] = xr[i] * scale * weight[i];
  }
}

void Forward::rope(float* vectors, std::uint32_t heads, std::uint32_t n) const noexcept {
  const std::uint32_t pairs = cfg_.rope_dims / 2;
  for (std::uint32_t r = 0; r < n; ++r) {
    const float* c = rope_cos_.data() + std::size_t{positions_[r]} * pairs;
    const float* s = rope_sin_.data() + std::size_t{positions_[r]} * pairs;
    for (std::uint32_t h = 0; h < heads; ++h) {
      float* v = vectors + (std::size_t{r} * heads + h) * cfg_.head_dim;
      for (std::uint32_t i = 0; i < pairs; ++i) {
        const float x0 = v[2 * i];
        const float x1 = v[2 * i + 1];
        v[2 * i] = x0 * c[i] - x1 * s[i];
        v[2 * i + 1] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

Status Forward::layer(std::uint32_t l, std::uint32_t n) {
  const LayerWeights& w = model_.layer(l);
  const std::uint32_t e = cfg_.embedding;
  Lap lap;
  rmsnorm(x_.data(), w.attn_norm, h_.data(), n);
  lap.to(times_.other_ns);
  const Product qkv[] = {{&w.q, h_.data(), q_.data()}, {&w.k, h_.data(), k_.data()}, {&w.v, h_.data(), v_.data()}};
  matmul(n, qkv);
  lap.to(times_.matmul_ns);
  rope(q_.data(), cfg_.q_heads, n);
  rope(k_.data(), cfg_.kv_heads, n);
  lap.to(times_.other_ns);
  Status written = kv_.write_kv(l, k_.data(), v_.data());
  lap.to(times_.copies_ns);
  if (!written) return written;
  pool_.park();  // attention runs on the KV backend's threads: the pool's workers sleep meanwhile
  Status attended = kv_.attend(l, q_.data(), attn_.data());
  lap.to(times_.attention_ns);
  if (!attended) return attended;
  const Product o[] = {{&w.o, attn_.data(), h_.data()}};
  matmul(n, o);
  lap.to(times_.matmul_ns);
  for (std::size_t i = 0; i < std::size_t{n} * e; ++i) x_[i] += h_[i];
  rmsnorm(x_.data(), w.ffn_norm, h_.data(), n);
  lap.to(times_.other_ns);
  const Product gate_up[] = {{&w.gate, h_.data(), gate_.data()}, {&w.up, h_.data(), up_.data()}};
  matmul(n, gate_up);
  lap.to(times_.matmul_ns);
  for (std::size_t i = 0; i < std::size_t{n} * cfg_.ffn; ++i) {
    const float g = gate_[i];
    gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];
  }
  lap.to(times_.other_ns);
  const Product down[] = {{&w.down, gate_.data(), h_.data()}};
  matmul(n, down);
  lap.to(times_.matmul_ns);
  for (std::size_t i = 0; i < std::size_t{n} * e; ++i) x_[i] += h_[i];
  lap.to(times_.other_ns);
  return Status::success();
}

void Forward::final_logits(std::span<const StepInput> inputs) {
  if (logit_count_ == 0) return;
  Lap lap;
  // Gather each wanting entry's last row, normalised, into h_ (logit_count_ rows).
  const std::uint32_t e = cfg_.embedding;
  std::uint32_t row = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    row += static_cast<std::uint32_t>(inputs[i].tokens.size());
    if (logit_rows_[i] == UINT32_MAX) continue;
    rmsnorm(x_.data() + std::size_t{row - 1} * e, model_.output_norm(), h_.data() + std::size_t{logit_rows_[i]} * e, 1);
  }
  lap.to(times_.other_ns);
  const Product out[] = {{&model_.output(), h_.data(), logits_.data()}};
  const std::uint64_t before = lap.start;
  matmul(logit_count_, out);
  lap.to(times_.matmul_ns);
  times_.logits_ns += lap.start - before;
}

}  // namespace activekv::engine
