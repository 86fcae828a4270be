// delta_net.cpp — the Gated DeltaNet layer of a hybrid (Qwen3.5), one of the shared blocks.
//
// Per token t of a context, per value head (S = state_size, the head's state a S × S matrix M,
// row j for value element j, column i for key element i; hparams.hpp SsmHParams):
//
//   c_t   = silu(conv1d(h_t·Wqkvᵀ))          each channel over its last conv_kernel inputs
//   q, k  = l2norm(c_t's key head)           (q also × 1/sqrt(S)); v = c_t's value head
//   decay = exp(softplus(h_t·Wαᵀ + dt_bias) × a)     β = sigmoid(h_t·Wβᵀ)
//   M     = decay × M
//   M    += β (v − M k) kᵀ                    the delta rule: row j gains β (v_j − M_j·k) k
//   o_t   = M q
//   y_t   = rmsnorm(o_t) ⊙ ssm_norm ⊙ silu(h_t·Wzᵀ),  out_t = y_t·Woutᵀ
//
// Exactness: the recurrence runs token by token in position order, and each
// step of it reads only the state and that token's row; the convolution's
// window holds copies of past inputs. So a token's output bits and the state's
// bits depend on the tokens alone, never on how the steps were cut (one chunk,
// chunks of 256, one token at a time), on the other entries of a step, or on
// the thread that ran a head: heads and channels are split over the pool, a
// head's tokens never are. The chunked (WY) form would reorder the sums by
// chunk and lose this (docs/ENGINE.md, "Hybrid models").
//
// The state lives in the KV (kv_access.hpp recurrent_state), fp32, per
// recurrent layer: the convolution window, then the v_heads matrices.
#include <algorithm>
#include <chrono>
#include <cmath>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "activekv/assert.hpp"
#include "engine/blocks.hpp"
#include "engine/delta_net.hpp"
#include "engine/forward.hpp"

namespace activekv::engine {
namespace {

// Adds the scope's duration to a PhaseTimes field (as blocks.cpp's).
class Timed {
 public:
  explicit Timed(std::uint64_t& into) noexcept : into_(into), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    into_ += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  std::uint64_t& into_;
  std::chrono::steady_clock::time_point start_;
};

float silu(float x) noexcept { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) noexcept { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) noexcept { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x / sqrt(Σ x² + eps), as llama.cpp's l2 norm of the DeltaNet's q and k.
void l2_normalise(float* x, std::uint32_t n, float eps, float scale) noexcept {
  float sum = 0.0f;
  for (std::uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float s = scale / std::sqrt(sum + eps);
  for (std::uint32_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace

// Sums in 8 lanes (lane l takes i ≡ l mod 8, then the lanes are added in order): a fixed order the
// compiler can vectorise, the same for every chunking and thread.
namespace {
constexpr std::uint32_t kLanes = 8;

[[gnu::always_inline]] inline float lane_sum(const float (&lanes)[kLanes]) noexcept {
  float s = 0.0f;
  for (std::uint32_t l = 0; l < kLanes; ++l) s += lanes[l];
  return s;
}
}  // namespace

namespace {

// The rule itself, inlined into each instruction set's copy below. Only multiplies and adds, lane by
// lane in a fixed order: with no fused multiply-add allowed in either copy (x86-64's baseline has
// none, and the AVX2 copy's target leaves FMA out, so nothing can be contracted), both give the same
// bits; the AVX2 copy does 8 lanes per instruction where the baseline does 4.
[[gnu::always_inline]] inline void delta_rule_body(float* m, const float* q, const float* k, const float* v, float decay,
                                                   float beta, float* o, std::uint32_t S) noexcept {
  // (decay · m_j)·k = decay · (m_j·k): the first pass only reads the row, the second writes it once.
  const std::uint32_t full = S / kLanes * kLanes;
  for (std::uint32_t j = 0; j < S; ++j) {
    float* mj = m + std::size_t{j} * S;
    float mk[kLanes] = {};
    for (std::uint32_t i = 0; i < full; i += kLanes)
      for (std::uint32_t l = 0; l < kLanes; ++l) mk[l] += mj[i + l] * k[i + l];
    for (std::uint32_t i = full; i < S; ++i) mk[i - full] += mj[i] * k[i];
    const float d = beta * (v[j] - decay * lane_sum(mk));
    float mq[kLanes] = {};
    for (std::uint32_t i = 0; i < full; i += kLanes) {
      for (std::uint32_t l = 0; l < kLanes; ++l) {
        mj[i + l] = decay * mj[i + l] + d * k[i + l];
        mq[l] += mj[i + l] * q[i + l];
      }
    }
    for (std::uint32_t i = full; i < S; ++i) {
      mj[i] = decay * mj[i] + d * k[i];
      mq[i - full] += mj[i] * q[i];
    }
    o[j] = lane_sum(mq);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// delta_rule_body written with 8-lane AVX registers: register lane l is the body's lane l, every
// operation the body's own (a rounded multiply, then a rounded add; a + b and b + a are the same
// float), so the bits are the body's. Rows are independent (row j reads and writes m's row j and
// o[j] only), so 4 run side by side: each row's sums are chains of S / 8 dependent adds, and four
// chains keep the adder busy where one waited on its latency. S not a multiple of 8 takes the body.
[[gnu::target("avx2")]] void delta_rule_avx2(float* m, const float* q, const float* k, const float* v, float decay,
                                             float beta, float* o, std::uint32_t S) noexcept {
  if (S % kLanes != 0) return delta_rule_body(m, q, k, v, decay, beta, o, S);
  constexpr std::uint32_t R = 4;  // rows side by side (S is a multiple of 8)
  const __m256 decay8 = _mm256_set1_ps(decay);
  alignas(32) float lanes[kLanes];
  for (std::uint32_t j0 = 0; j0 < S; j0 += R) {
    float* mj[R];
    __m256 mk[R], d8[R], mq[R];
    for (std::uint32_t r = 0; r < R; ++r) {
      mj[r] = m + std::size_t{j0 + r} * S;
      mk[r] = _mm256_setzero_ps();
      mq[r] = _mm256_setzero_ps();
    }
    for (std::uint32_t i = 0; i < S; i += kLanes) {
      const __m256 ki = _mm256_loadu_ps(k + i);
      for (std::uint32_t r = 0; r < R; ++r) mk[r] = _mm256_add_ps(mk[r], _mm256_mul_ps(_mm256_loadu_ps(mj[r] + i), ki));
    }
    for (std::uint32_t r = 0; r < R; ++r) {
      _mm256_store_ps(lanes, mk[r]);
      d8[r] = _mm256_set1_ps(beta * (v[j0 + r] - decay * lane_sum(lanes)));
    }
    for (std::uint32_t i = 0; i < S; i += kLanes) {
      const __m256 ki = _mm256_loadu_ps(k + i), qi = _mm256_loadu_ps(q + i);
      for (std::uint32_t r = 0; r < R; ++r) {
        const __m256 row = _mm256_add_ps(_mm256_mul_ps(decay8, _mm256_loadu_ps(mj[r] + i)), _mm256_mul_ps(d8[r], ki));
        _mm256_storeu_ps(mj[r] + i, row);
        mq[r] = _mm256_add_ps(mq[r], _mm256_mul_ps(row, qi));
      }
    }
    for (std::uint32_t r = 0; r < R; ++r) {
      _mm256_store_ps(lanes, mq[r]);
      o[j0 + r] = lane_sum(lanes);
    }
  }
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2");
#endif

}  // namespace

void delta_rule_token(float* m, const float* q, const float* k, const float* v, float decay, float beta, float* o,
                      std::uint32_t S) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  if (kHasAvx2) return delta_rule_avx2(m, q, k, v, decay, beta, o, S);
#endif
  delta_rule_body(m, q, k, v, decay, beta, o, S);
}

void delta_rule_token_baseline(float* m, const float* q, const float* k, const float* v, float decay, float beta,
                               float* o, std::uint32_t S) noexcept {
  delta_rule_body(m, q, k, v, decay, beta, o, S);
}

Status Blocks::delta_net(std::uint32_t layer) {
  const LayerWeights& w = weights(layer);
  const SsmHParams& ssm = hp_.ssm;
  AK_ASSERT(hp_.layer[layer].recurrent, "delta_net: not a recurrent layer");
  AK_ASSERT(entries_.size() <= states_.size(), "delta_net: more entries than rows");
  // Each entry's state for this layer, through the KV.
  const std::uint64_t layer_bytes = ssm.layer_state_bytes();
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    Result<std::span<std::byte>> state = kv_.recurrent_state(entries_[e].context);
    if (!state) return state.error();
    AK_ASSERT(state->size() == hp_.recurrent_state_bytes(), "delta_net: the KV's state has the wrong size");
    states_[e] = reinterpret_cast<float*>(state->data() + hp_.layer[layer].state_layer * layer_bytes);
  }
  const std::span<float* const> states(states_.data(), entries_.size());
  const Product in[] = {{&w.qkv, h(), wide()}, {&w.z, h(), aux()}, {&w.beta, h(), beta_.data()},
                        {&w.alpha, h(), alpha_.data()}};
  matmul(in);
  delta_conv(w, states);
  delta_recurrence(w, states);
  delta_gated_norm(w);
  const Product out[] = {{&w.ssm_out, core_.data(), h()}};
  matmul(out);
  return Status::success();
}

// conv_ = silu(conv1d(wide_)) per channel, each entry over its own window; then q and k normalised.
void Blocks::delta_conv(const LayerWeights& w, std::span<float* const> states) {
  const SsmHParams& ssm = hp_.ssm;
  struct Ctx {
    Blocks* self;
    const LayerWeights* w;
    std::span<float* const> states;
  } ctx{this, &w, states};
  const std::uint32_t channels = ssm.conv_dim();
  const std::uint32_t chunks = std::min<std::uint32_t>(channels / 64 + 1, 4 * pool_.threads());
  {
    Timed timed(times_.recurrent_ns);
    pool_.run_chunks(
        [](void* c, std::uint32_t index, std::uint32_t count, std::uint32_t) {
          const Ctx& x = *static_cast<const Ctx*>(c);
          Blocks& b = *x.self;
          const SsmHParams& s = b.hp_.ssm;
          const std::uint32_t dim = s.conv_dim();
          const std::uint32_t taps = s.conv_kernel;
          const std::uint32_t begin = static_cast<std::uint32_t>(std::uint64_t{dim} * index / count);
          const std::uint32_t end = static_cast<std::uint32_t>(std::uint64_t{dim} * (index + 1) / count);
          std::uint32_t row = 0;
          for (std::size_t e = 0; e < b.entries_.size(); ++e) {
            const std::uint32_t n = b.entries_[e].tokens_new;
            for (std::uint32_t ch = begin; ch < end; ++ch) {
              const float* tap = x.w->conv + std::size_t{ch} * taps;
              float* window = x.states[e] + std::size_t{ch} * (taps - 1);  // oldest first
              for (std::uint32_t t = 0; t < n; ++t) {
                const float in = b.wide_[std::size_t{row + t} * dim + ch];
                float acc = 0.0f;
                for (std::uint32_t j = 0; j + 1 < taps; ++j) acc += tap[j] * window[j];
                acc += tap[taps - 1] * in;
                for (std::uint32_t j = 0; j + 2 < taps; ++j) window[j] = window[j + 1];
                if (taps > 1) window[taps - 2] = in;
                b.conv_[std::size_t{row + t} * dim + ch] = silu(acc);
              }
            }
            row += n;
          }
        },
        &ctx, chunks);
  }
  Timed timed(times_.recurrent_ns);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(ssm.state_size));
  for (std::uint32_t r = 0; r < rows_; ++r) {
    float* c = conv_.data() + std::size_t{r} * channels;
    for (std::uint32_t hk = 0; hk < ssm.k_heads; ++hk) {
      l2_normalise(c + std::size_t{hk} * ssm.state_size, ssm.state_size, hp_.rms_epsilon, q_scale);
      l2_normalise(c + ssm.key_dim() + std::size_t{hk} * ssm.state_size, ssm.state_size, hp_.rms_epsilon, 1.0f);
    }
  }
}

// core_ = each value head's recurrence, token by token in position order; heads split over the pool.
void Blocks::delta_recurrence(const LayerWeights& w, std::span<float* const> states) {
  Timed timed(times_.recurrent_ns);
  const SsmHParams& ssm = hp_.ssm;
  struct Ctx {
    Blocks* self;
    const LayerWeights* w;
    std::span<float* const> states;
  } ctx{this, &w, states};
  const std::uint32_t units = static_cast<std::uint32_t>(entries_.size()) * ssm.v_heads;  // (entry, head)
  pool_.run_chunks(
      [](void* c, std::uint32_t index, std::uint32_t count, std::uint32_t) {
        const Ctx& x = *static_cast<const Ctx*>(c);
        Blocks& b = *x.self;
        const SsmHParams& s = b.hp_.ssm;
        const std::uint32_t units_all = static_cast<std::uint32_t>(b.entries_.size()) * s.v_heads;
        const std::uint32_t begin = static_cast<std::uint32_t>(std::uint64_t{units_all} * index / count);
        const std::uint32_t end = static_cast<std::uint32_t>(std::uint64_t{units_all} * (index + 1) / count);
        const std::uint32_t S = s.state_size;
        const std::uint32_t dim = s.conv_dim();
        for (std::uint32_t u = begin; u < end; ++u) {
          const std::uint32_t e = u / s.v_heads;
          const std::uint32_t hv = u % s.v_heads;
          const std::uint32_t hk = hv % s.k_heads;  // value head hv reads key head hv mod k_heads
          std::uint32_t row = 0;
          for (std::uint32_t i = 0; i < e; ++i) row += b.entries_[i].tokens_new;
          float* m = x.states[e] + s.conv_floats() + std::size_t{hv} * S * S;
          for (std::uint32_t t = 0; t < b.entries_[e].tokens_new; ++t) {
            const std::size_t r = row + t;
            const float* q = b.conv_.data() + r * dim + std::size_t{hk} * S;
            const float* k = q + s.key_dim();
            const float* v = b.conv_.data() + r * dim + 2 * std::size_t{s.key_dim()} + std::size_t{hv} * S;
            const float decay =
                std::exp(softplus(b.alpha_[r * s.v_heads + hv] + x.w->dt_bias[hv]) * x.w->a[hv]);
            const float beta = sigmoid(b.beta_[r * s.v_heads + hv]);
            float* o = b.core_.data() + r * s.inner + std::size_t{hv} * S;
            delta_rule_token(m, q, k, v, decay, beta, o, S);
          }
        }
      },
      &ctx, std::min<std::uint32_t>(units, 4 * pool_.threads()));
}

// core_ = rmsnorm(core_ per value head) ⊙ ssm_norm ⊙ silu(z).
void Blocks::delta_gated_norm(const LayerWeights& w) {
  const SsmHParams& ssm = hp_.ssm;
  norm(core_.data(), w.ssm_norm, core_.data(), ssm.state_size, rows_ * ssm.v_heads);
  Timed timed(times_.recurrent_ns);
  const std::size_t count = std::size_t{rows_} * ssm.inner;
  for (std::size_t i = 0; i < count; ++i) core_[i] *= silu(aux_[i]);
}

}  // namespace activekv::engine
