// blocks.hpp — the shared pieces every architecture's layer is built from.
//
// A layer builder (src/engine/models/) is a short composition of these
// blocks over the step's activation buffers, as llama.cpp's builders compose
// build_norm / build_attn / build_ffn:
//
//   norm(in, weight, out, width, count)     RMS norm of `count` vectors of `width` (rows, or heads)
//   matmul(products)                        y = x · wᵀ for up to three weights sharing x
//   add_bias(y, bias, width)                y[r] += bias for each row
//   rope(vectors, heads, layer)             the layer's RoPE table, the architecture's pair order
//   scale(v, count, s)                      v *= s
//   attention(layer)                        k, v into the KV; attn = softmax(q kᵀ) v, through the KV
//   activate(kind)                          gate = act(gate) ⊙ up (SwiGLU, GELU(tanh)-gated)
//   add(x, y, width)                        x += y for each row (the residual)
//   delta_net(layer)                        a Gated DeltaNet layer, h in, h out (delta_net.cpp)
//
// What it owns: every activation buffer and the RoPE tables, sized at
// construction for step_tokens_max rows (forward.hpp), so no block allocates
// (invariant 7). Each block times itself into the forward pass's PhaseTimes.
// The arithmetic of a row never depends on the other rows of the step or on
// the thread that computes it, so neither does any output bit. Norms and
// activations compute through elementwise.hpp (the same bits on every
// instruction set); in a prefill step they, RoPE, biases and the residual are
// split by rows over the pool, a decode step's single row stays on one thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/arch.hpp"
#include "engine/kv_access.hpp"
#include "engine/matmul.hpp"
#include "engine/matmul_q16.hpp"
#include "engine/matmul_q8.hpp"
#include "engine/matmul_q8_0.hpp"
#include "engine/model.hpp"
#include "engine/thread_pool.hpp"

namespace activekv::engine {

struct PhaseTimes;

class Blocks {
 public:
  struct Product {
    const MatrixView* w;
    const float* x;  // rows × w->cols
    float* y;        // rows × w->rows
  };

  // rope_positions: positions the RoPE tables cover (the run's context). activations: the width the
  // quantised products quantise x to (matmul_q8.hpp).
  Blocks(const Model& model, KvAccess& kv, ThreadPool& pool, Isa isa, Activations activations,
         std::uint32_t rows_max, std::uint32_t rope_positions, PhaseTimes& times);

  const HParams& hp() const noexcept { return hp_; }
  const LayerWeights& weights(std::uint32_t layer) const noexcept { return model_.layer(layer); }
  // The step's token rows and their positions (set by the forward pass before the layers run).
  std::uint32_t rows() const noexcept { return rows_; }
  void set_rows(std::uint32_t rows) noexcept;
  std::uint32_t* positions() noexcept { return positions_.data(); }
  // The step's entries, in row order (set by the forward pass; the recurrent layers read each
  // entry's state through the KV).
  void set_entries(std::span<const StepEntry> entries) noexcept { entries_ = entries; }

  // Buffers, row-major, rows() rows each (widths in elements):
  float* x() noexcept { return x_.data(); }        // embedding: the residual stream
  float* h() noexcept { return h_.data(); }        // max(embedding, q_dim): norm outputs, projections
  float* q() noexcept { return q_.data(); }        // q_dim
  float* k() noexcept { return k_.data(); }        // kv_dim
  float* v() noexcept { return v_.data(); }        // kv_dim
  float* attn() noexcept { return attn_.data(); }  // q_dim: the attention output
  float* gate() noexcept { return gate_.data(); }  // ffn
  float* up() noexcept { return up_.data(); }      // ffn
  // A hybrid's (empty otherwise):
  float* wide() noexcept { return wide_.data(); }  // max(2 q_dim, conv_dim): query and gate, the conv input
  float* aux() noexcept { return aux_.data(); }    // max(q_dim, inner): the attention gate, the DeltaNet's z

  void norm(const float* in, const float* weight, float* out, std::uint32_t width, std::uint32_t count);
  // Every product's y = x · wᵀ over `rows` rows, in one parallel region split by output rows.
  // Products of one call share their x. Quantised weights take the 16-bit activation path
  // (matmul_q16.hpp: x quantised once per row, integer dots); with Activations::q8, each product
  // whose format has an 8-bit path takes it: Q4_K, Q5_K and Q6_K matmul_q8.hpp's 256-value blocks,
  // Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 matmul_q8_0.hpp's 32-value blocks, the rest the 16-bit path.
  // x is quantised once per form the call needs. Weights that are not quantised (F32, F16, BF16)
  // take the fp32 path. A product's path depends on its own weights alone, never on the others of
  // its call, so the call's grouping does not change its bits.
  void matmul(std::uint32_t rows, std::span<const Product> products);
  void matmul(std::span<const Product> products) { matmul(rows_, products); }
  void add_bias(float* y, const float* bias, std::uint32_t width);
  void rope(float* vectors, std::uint32_t heads, std::uint32_t layer);
  void scale(float* values, std::size_t count, float s);
  // The layer's attention through the KV: write_kv(k, v), then attend(q) into attn(). The KV's
  // kernel scales scores by 1 / sqrt(head_dim); q is first scaled by hp().query_scale where the
  // model's softmax scale differs. A window layer's range is the KV's (its runtime settings).
  Status attention(std::uint32_t layer);
  void activate(FfnKind kind);
  void add(float* x, const float* y, std::uint32_t width);
  // One Gated DeltaNet layer (delta_net.cpp): h (normed input rows) in, h (the layer's output,
  // embedding wide) out; each entry's state read and updated in place through the KV.
  Status delta_net(std::uint32_t layer);

 private:
  // delta_net's parts (delta_net.cpp).
  void delta_conv(const LayerWeights& w, std::span<float* const> states);
  void delta_recurrence(const LayerWeights& w, std::span<float* const> states);
  void delta_gated_norm(const LayerWeights& w);

  // Which kernel a product of a call computes with (matmul()).
  enum class Path : std::uint8_t { f32, q16, q8_k, q8_0 };
  Path path_of(const MatrixView& w) const noexcept;
  // xq_ (xq8_ for q8_k, xq80_ for q8_0) = x (n rows of `cols`) quantised; split over the pool when n is large.
  void quantize(const float* x, std::uint32_t cols, std::uint32_t n, Path form);
  void build_rope_table(const RopeSpec& spec, std::uint32_t table);
  // fn(begin, end) over items [0, n) of `width` values each: on this thread when the work is small
  // (a decode step), else in chunks over the pool (blocks.cpp). An item's arithmetic never depends
  // on its chunk or thread, so neither does any bit.
  template <typename Fn>
  void for_items(std::uint32_t n, std::size_t width, const Fn& fn);

  const Model& model_;
  const HParams& hp_;
  KvAccess& kv_;
  ThreadPool& pool_;
  Isa isa_;
  Activations activations_;
  PhaseTimes& times_;
  std::uint32_t rows_ = 0;

  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_;
  std::span<const StepEntry> entries_;     // the step's, in row order
  // A hybrid's buffers (delta_net.cpp), rows_max rows each; empty for other models.
  std::vector<float> wide_, aux_, conv_, core_, beta_, alpha_;
  std::vector<float*> states_;             // per entry: its state for the current recurrent layer
  std::vector<std::uint32_t> positions_;   // per token row
  std::vector<float> scratch_;             // per thread: the widest matrix row in fp32
  std::size_t scratch_stride_ = 0;
  std::vector<std::int16_t> xq_q_;         // rows_max × the widest row: activations as 16-bit blocks
  std::vector<float> xq_d_, xq_s_;         // their block scales and d × Σq
  Q16Rows xq_;                             // views of the three above for the current product
  std::vector<std::int8_t> xq8_q_;         // Activations::q8 only: rows_max × the widest row as 8-bit blocks
  std::vector<float> xq8_d_;               // their block scales
  std::vector<std::int16_t> xq8_bsum_;     // and sums per 16 values
  Q8Rows xq8_;                             // views of the three above for the current product
  std::vector<std::int8_t> xq80_q_;        // Activations::q8 only: rows_max × the widest row as 32-value 8-bit blocks
  std::vector<float> xq80_d_, xq80_s_;     // their f16 scales and d × Σq
  Q8_0Rows xq80_;                          // views of the three above for the current product
  std::uint32_t rope_positions_ = 0;
  // Per table (HParams::ropes): rope_positions_ × rope_dims / 2 angles' cosines and sines.
  std::vector<float> rope_cos_[rope_tables_max], rope_sin_[rope_tables_max];
};

}  // namespace activekv::engine
