// blocks.cpp — the shared layer blocks (see blocks.hpp).
#include "engine/blocks.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "activekv/assert.hpp"
#include "engine/elementwise.hpp"
#include "engine/forward.hpp"

namespace activekv::engine {
namespace {

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Adds the scope's duration to a PhaseTimes field.
class Timed {
 public:
  explicit Timed(std::uint64_t& into) noexcept : into_(into), start_(now_ns()) {}
  ~Timed() { into_ += now_ns() - start_; }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  std::uint64_t& into_;
  std::uint64_t start_;
};

}  // namespace

Blocks::Blocks(const Model& model, KvAccess& kv, ThreadPool& pool, Isa isa, Activations activations,
               std::uint32_t rows_max, std::uint32_t rope_positions, PhaseTimes& times)
    : model_(model), hp_(model.config()), kv_(kv), pool_(pool), isa_(isa), activations_(activations), times_(times) {
  const std::size_t n = rows_max;
  const std::size_t qd = hp_.q_dim();
  const std::size_t kvd = hp_.kv_dim();
  x_.assign(n * hp_.embedding, 0.0f);
  h_.assign(n * std::max<std::size_t>(hp_.embedding, qd), 0.0f);
  q_.assign(n * qd, 0.0f);
  k_.assign(n * kvd, 0.0f);
  v_.assign(n * kvd, 0.0f);
  attn_.assign(n * qd, 0.0f);
  gate_.assign(n * hp_.ffn, 0.0f);
  up_.assign(n * hp_.ffn, 0.0f);
  positions_.assign(n, 0);
  if (hp_.recurrent_layers > 0 || hp_.arch->gated_delta_net) {
    const SsmHParams& ssm = hp_.ssm;
    wide_.assign(n * std::max<std::size_t>(2 * qd, ssm.conv_dim()), 0.0f);
    aux_.assign(n * std::max<std::size_t>(qd, ssm.inner), 0.0f);
    conv_.assign(n * ssm.conv_dim(), 0.0f);
    core_.assign(n * ssm.inner, 0.0f);
    beta_.assign(n * ssm.v_heads, 0.0f);
    alpha_.assign(n * ssm.v_heads, 0.0f);
    states_.assign(n, nullptr);  // at most one entry per row
  }
  scratch_stride_ = std::max({hp_.embedding, hp_.ffn, static_cast<std::uint32_t>(qd), hp_.ssm.inner});
  scratch_.assign(scratch_stride_ * pool.threads(), 0.0f);
  xq_q_.assign(n * scratch_stride_, 0);
  xq_d_.assign(n * scratch_stride_ / q16_block + 1, 0.0f);
  xq_s_.assign(n * scratch_stride_ / q16_block + 1, 0.0f);
  if (activations_ == Activations::q8) {
    xq8_q_.assign(n * scratch_stride_, 0);
    xq8_d_.assign(n * scratch_stride_ / q8_block + 1, 0.0f);
    xq8_bsum_.assign(n * scratch_stride_ / q8_group + 1, 0);
    xq80_q_.assign(n * scratch_stride_, 0);
    xq80_d_.assign(n * scratch_stride_ / q8_0_block + 1, 0.0f);
    xq80_s_.assign(n * scratch_stride_ / q8_0_block + 1, 0.0f);
  }
  AK_ASSERT(!hp_.ropes.empty() && hp_.ropes.size() <= rope_tables_max, "blocks: 1 or 2 RoPE tables");
  rope_positions_ = rope_positions;
  for (std::uint32_t t = 0; t < hp_.ropes.size(); ++t) build_rope_table(hp_.ropes[t], t);
}

// RoPE angles, computed in double once: angle_i(pos) = pos × freq_scale × base^(−2i/rope_dims) / factor_i.
// One row per position the run can reach: the run's context, never more than the model's.
void Blocks::build_rope_table(const RopeSpec& spec, std::uint32_t table) {
  const std::size_t pairs = hp_.rope_dims / 2;
  std::vector<float>& cos_table = rope_cos_[table];
  std::vector<float>& sin_table = rope_sin_[table];
  cos_table.assign(std::size_t{rope_positions_} * pairs, 0.0f);
  sin_table.assign(std::size_t{rope_positions_} * pairs, 0.0f);
  std::vector<double> freqs(pairs);
  for (std::size_t i = 0; i < pairs; ++i)
    freqs[i] = std::pow(static_cast<double>(spec.theta), -2.0 * static_cast<double>(i) / hp_.rope_dims);
  if (spec.freq_factors) {
    AK_ASSERT(model_.rope_freqs() != nullptr, "blocks: frequency factors without rope_freqs.weight");
    for (std::size_t i = 0; i < pairs; ++i) freqs[i] /= static_cast<double>(model_.rope_freqs()[i]);
  }
  for (std::size_t i = 0; i < pairs; ++i) freqs[i] *= static_cast<double>(spec.freq_scale);
  for (std::size_t pos = 0; pos < rope_positions_; ++pos) {
    for (std::size_t i = 0; i < pairs; ++i) {
      const double angle = static_cast<double>(pos) * freqs[i];
      cos_table[pos * pairs + i] = static_cast<float>(std::cos(angle));
      sin_table[pos * pairs + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void Blocks::set_rows(std::uint32_t rows) noexcept {
  AK_ASSERT(rows <= positions_.size(), "blocks: more rows than the buffers hold");
  rows_ = rows;
}

Blocks::Path Blocks::path_of(const MatrixView& w) const noexcept {
  if (!q16_supported(w.type, w.cols)) return Path::f32;
  if (activations_ == Activations::q8 && q8_supported(w.type, w.cols)) return Path::q8_k;
  if (activations_ == Activations::q8 && q8_0_supported(w.type, w.cols)) return Path::q8_0;
  return Path::q16;
}

void Blocks::quantize(const float* x, std::uint32_t cols, std::uint32_t n, Path form) {
  AK_ASSERT(form != Path::f32, "blocks: quantize called for the fp32 path");
  if (form == Path::q8_k) xq8_ = Q8Rows{xq8_q_.data(), xq8_d_.data(), xq8_bsum_.data(), cols, n};
  else if (form == Path::q8_0) xq80_ = Q8_0Rows{xq80_q_.data(), xq80_d_.data(), xq80_s_.data(), cols, n};
  else xq_ = Q16Rows{xq_q_.data(), xq_d_.data(), xq_s_.data(), cols, n};
  auto rows = [](Blocks* self, const float* xs, std::uint32_t width, Path path, std::size_t begin, std::size_t end) {
    if (path == Path::q8_k) quantize_rows_q8(self->isa_, xs, width, self->xq8_, begin, end);
    else if (path == Path::q8_0) quantize_rows_q8_0(self->isa_, xs, width, self->xq80_, begin, end);
    else quantize_rows_q16(self->isa_, xs, width, self->xq_, begin, end);
  };
  constexpr std::uint32_t rows_per_chunk = 32;  // below this a region's wake-up costs more than it saves
  if (n < 2 * rows_per_chunk) {
    rows(this, x, cols, form, 0, n);
    return;
  }
  struct Ctx {
    Blocks* self;
    const float* x;
    std::uint32_t cols;
    std::uint32_t n;
    Path form;
    decltype(rows) quantize_rows;
  } ctx{this, x, cols, n, form, rows};
  // Each row's bytes depend on that row alone, so the split does not change them.
  pool_.run_chunks(
      [](void* c, std::uint32_t index, std::uint32_t count, std::uint32_t) {
        const Ctx& q = *static_cast<const Ctx*>(c);
        const std::size_t begin = std::uint64_t{q.n} * index / count;
        const std::size_t end = std::uint64_t{q.n} * (index + 1) / count;
        q.quantize_rows(q.self, q.x, q.cols, q.form, begin, end);
      },
      &ctx, std::min<std::uint32_t>(n / rows_per_chunk, 4 * pool_.threads()));
}

void Blocks::matmul(std::uint32_t n, std::span<const Product> products) {
  Timed timed(times_.matmul_ns);
  // A product's path depends on its own matrix alone (an fp32 matrix beside quantised ones, as a
  // DeltaNet's ssm_alpha beside its attn_qkv, leaves theirs quantised), so its bits do not depend
  // on which products share the call. All read products[0].x (asserted): one quantised copy.
  for (const Product& p : products)
    AK_ASSERT(p.x == products[0].x && p.w->cols == products[0].w->cols, "blocks: a matmul call's products share x");
  // Each form of x the call's products read, quantised once (in a fixed order: the bytes do not depend on it).
  bool needed[4] = {};
  for (const Product& p : products) needed[static_cast<int>(path_of(*p.w))] = true;
  for (Path form : {Path::q16, Path::q8_k, Path::q8_0})
    if (needed[static_cast<int>(form)]) quantize(products[0].x, products[0].w->cols, n, form);
  struct Ctx {
    Blocks* self;
    std::span<const Product> products;
    std::uint32_t n;
    std::uint32_t rows_total;
  } ctx{this, products, n, 0};
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
          if (lo < hi) {
            switch (x.self->path_of(*p.w)) {
              case Path::q8_k:
                matmul_rows_q8(x.self->isa_, *p.w, x.self->xq8_, p.y, p.w->rows, lo - offset, hi - offset);
                break;
              case Path::q8_0:
                matmul_rows_q8_0(x.self->isa_, *p.w, x.self->xq80_, p.y, p.w->rows, lo - offset, hi - offset);
                break;
              case Path::q16:
                matmul_rows_q16(x.self->isa_, *p.w, x.self->xq_, p.y, p.w->rows, lo - offset, hi - offset, scratch);
                break;
              case Path::f32:
                matmul_rows(x.self->isa_, *p.w, p.x, p.w->cols, x.n, p.y, p.w->rows, lo - offset, hi - offset,
                            scratch);
                break;
            }
          }
          offset += p.w->rows;
        }
      },
      &ctx, chunks);
}

// Below this many values per chunk a region's wake-up costs about what the split saves.
constexpr std::size_t elementwise_chunk_values_min = 8192;

template <typename Fn>
void Blocks::for_items(std::uint32_t n, std::size_t width, const Fn& fn) {
  const std::size_t by_size = std::size_t{n} * width / elementwise_chunk_values_min;
  const auto chunks = static_cast<std::uint32_t>(std::min<std::size_t>({n, by_size, 4 * pool_.threads()}));
  if (chunks < 2 || pool_.threads() == 1) {
    fn(0, n);
    return;
  }
  struct Ctx {
    const Fn* fn;
    std::uint32_t n;
  } ctx{&fn, n};
  pool_.run_chunks(
      [](void* c, std::uint32_t index, std::uint32_t count, std::uint32_t) {
        const Ctx& x = *static_cast<const Ctx*>(c);
        const auto begin = static_cast<std::uint32_t>(std::uint64_t{x.n} * index / count);
        const auto end = static_cast<std::uint32_t>(std::uint64_t{x.n} * (index + 1) / count);
        if (begin < end) (*x.fn)(begin, end);
      },
      &ctx, chunks);
}

// Each row's bits depend on that row alone (elementwise.hpp: the sum of squares' fixed order).
void Blocks::norm(const float* in, const float* weight, float* out, std::uint32_t width, std::uint32_t count) {
  Timed timed(times_.other_ns);
  for_items(count, width, [&](std::uint32_t begin, std::uint32_t end) {
    const std::size_t offset = std::size_t{begin} * width;
    rms_norm_rows(isa_, in + offset, weight, out + offset, width, end - begin, hp_.rms_epsilon);
  });
}

void Blocks::add_bias(float* y, const float* bias, std::uint32_t width) {
  Timed timed(times_.other_ns);
  for_items(rows_, width, [&](std::uint32_t begin, std::uint32_t end) {
    for (std::uint32_t r = begin; r < end; ++r) {
      float* yr = y + std::size_t{r} * width;
      for (std::uint32_t i = 0; i < width; ++i) yr[i] += bias[i];
    }
  });
}

void Blocks::rope(float* vectors, std::uint32_t heads, std::uint32_t layer) {
  Timed timed(times_.other_ns);
  const std::uint32_t table = hp_.layer[layer].rope;
  const std::uint32_t pairs = hp_.rope_dims / 2;
  // Normal order rotates (2i, 2i+1), NeoX order (i, i + pairs).
  const bool neox = hp_.arch->rope_order == RopeOrder::neox;
  const std::uint32_t step = neox ? 1 : 2;
  const std::uint32_t other = neox ? pairs : 1;
  for_items(rows_, std::size_t{heads} * hp_.head_dim, [&](std::uint32_t begin, std::uint32_t end) {
    for (std::uint32_t r = begin; r < end; ++r) {
      AK_ASSERT(positions_[r] < rope_positions_, "blocks: a position past the RoPE tables");
      const float* c = rope_cos_[table].data() + std::size_t{positions_[r]} * pairs;
      const float* s = rope_sin_[table].data() + std::size_t{positions_[r]} * pairs;
      for (std::uint32_t h = 0; h < heads; ++h) {
        float* v = vectors + (std::size_t{r} * heads + h) * hp_.head_dim;
        for (std::uint32_t i = 0; i < pairs; ++i) {
          const float x0 = v[step * i];
          const float x1 = v[step * i + other];
          v[step * i] = x0 * c[i] - x1 * s[i];
          v[step * i + other] = x0 * s[i] + x1 * c[i];
        }
      }
    }
  });
}

void Blocks::scale(float* values, std::size_t count, float s) {
  Timed timed(times_.other_ns);
  for (std::size_t i = 0; i < count; ++i) values[i] *= s;
}

Status Blocks::attention(std::uint32_t layer) {
  if (hp_.query_scale != 1.0f) scale(q_.data(), std::size_t{rows_} * hp_.q_dim(), hp_.query_scale);
  {
    Timed timed(times_.copies_ns);
    if (Status written = kv_.write_kv(hp_.layer[layer].kv_layer, k_.data(), v_.data()); !written) return written;
  }
  Timed timed(times_.attention_ns);
  // Attention on the KV backend's own threads: the pool's workers sleep meanwhile.
  if (!kv_.attention_borrows_threads()) pool_.park();
  return kv_.attend(hp_.layer[layer].kv_layer, q_.data(), attn_.data());
}

// Each value's bits depend on its gate and up values alone (elementwise.hpp), on every instruction set.
void Blocks::activate(FfnKind kind) {
  Timed timed(times_.other_ns);
  const std::size_t width = hp_.ffn;
  for_items(rows_, width, [&](std::uint32_t begin, std::uint32_t end) {
    const std::size_t offset = std::size_t{begin} * width;
    activate_values(isa_, kind, gate_.data() + offset, up_.data() + offset, std::size_t{end - begin} * width);
  });
}

void Blocks::add(float* x, const float* y, std::uint32_t width) {
  Timed timed(times_.other_ns);
  for_items(rows_, width, [&](std::uint32_t begin, std::uint32_t end) {
    const std::size_t offset = std::size_t{begin} * width;
    const std::size_t count = std::size_t{end - begin} * width;
    for (std::size_t i = 0; i < count; ++i) x[offset + i] += y[offset + i];
  });
}

}  // namespace activekv::engine
