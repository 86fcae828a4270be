// delta_net_bench.cpp — what exactness costs the Gated DeltaNet: the engine's per-token delta rule
// (delta_rule_token, bits independent of the chunking) against the chunked WY form llama.cpp and
// the GPU kernels use for prefill (sums reordered within chunks of C tokens aligned to the step,
// so its bits follow the chunking).
//
// One value head, S × S state, T tokens of random l2-normalised q and k, v, decays in (0.4, 1),
// β in (0, 1); both forms from the same zero state. Prints ns per token and head for each, and
// the largest |Δ| of their outputs relative to the largest output.
//
//   delta_net_bench [--tokens T] [--state S] [--chunk C] [--repeat R]
//
// The chunked form, per chunk of C tokens with Γ_r = Π_{i≤r} decay_i (S₀ the state, key × value):
//   (I + A) U = diag(β) (V − diag(Γ) K S₀),  A_ri = β_r (Γ_r / Γ_i) k_r·k_i  for i < r
//   o_r = Γ_r S₀ᵀ q_r + Σ_{i≤r} (Γ_r / Γ_i) (k_i·q_r) u_i
//   S   = Γ_C S₀ + Σ_i (Γ_C / Γ_i) k_i u_iᵀ
// (the published WY representation of the gated delta rule, written for this comparison only).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/delta_net.hpp"

namespace {

using activekv::engine::delta_rule_token;
using activekv::engine::delta_rule_token_baseline;

struct Inputs {
  std::uint32_t tokens, S;
  std::vector<float> q, k, v, decay, beta;  // q, k, v: tokens × S
};

Inputs make_inputs(std::uint32_t tokens, std::uint32_t S) {
  Inputs in{tokens, S, {}, {}, {}, {}, {}};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const auto unit_rows = [&](std::vector<float>& x, float scale) {
    x.resize(std::size_t{tokens} * S);
    for (float& e : x) e = normal(rng);
    for (std::uint32_t t = 0; t < tokens; ++t) {
      float n = 0.0f;
      for (std::uint32_t i = 0; i < S; ++i) n += x[t * S + i] * x[t * S + i];
      for (std::uint32_t i = 0; i < S; ++i) x[t * S + i] *= scale / std::sqrt(n);
    }
  };
  unit_rows(in.q, 1.0f / std::sqrt(static_cast<float>(S)));
  unit_rows(in.k, 1.0f);
  in.v.resize(std::size_t{tokens} * S);
  for (float& e : in.v) e = normal(rng);
  in.decay.resize(tokens);
  in.beta.resize(tokens);
  for (std::uint32_t t = 0; t < tokens; ++t) {
    in.decay[t] = 0.4f + 0.6f * uniform(rng);
    in.beta[t] = uniform(rng);
  }
  return in;
}

// The engine's form: m is value × key (row j = value element j). baseline: the baseline instruction
// set's copy of the rule rather than the processor's.
void run_exact(const Inputs& in, std::vector<float>& out, bool baseline = false) {
  const std::uint32_t S = in.S;
  std::vector<float> m(std::size_t{S} * S, 0.0f);
  for (std::uint32_t t = 0; t < in.tokens; ++t) {
    const std::size_t r = std::size_t{t} * S;
    (baseline ? delta_rule_token_baseline : delta_rule_token)(m.data(), &in.q[r], &in.k[r], &in.v[r], in.decay[t],
                                                              in.beta[t], &out[r], S);
  }
}

// The chunked WY form: s is key × value (row i = key element i), loops written to vectorise.
void run_chunked(const Inputs& in, std::uint32_t C, std::vector<float>& out) {
  const std::uint32_t S = in.S;
  std::vector<float> s(std::size_t{S} * S, 0.0f), u(std::size_t{C} * S), kk(std::size_t{C} * C), qk(std::size_t{C} * C),
      gamma(C);
  for (std::uint32_t c0 = 0; c0 < in.tokens; c0 += C) {
    const std::uint32_t n = std::min(C, in.tokens - c0);
    const float* K = &in.k[std::size_t{c0} * S];
    const float* Q = &in.q[std::size_t{c0} * S];
    const float* V = &in.v[std::size_t{c0} * S];
    float g = 1.0f;
    for (std::uint32_t r = 0; r < n; ++r) gamma[r] = g *= in.decay[c0 + r];
    for (std::uint32_t r = 0; r < n; ++r) {
      for (std::uint32_t i = 0; i <= r; ++i) {
        float a = 0.0f, b = 0.0f;
        for (std::uint32_t e = 0; e < S; ++e) {
          a += K[r * S + e] * K[i * S + e];
          b += K[i * S + e] * Q[r * S + e];
        }
        kk[r * C + i] = a;
        qk[r * C + i] = b;
      }
    }
    // u_r = β_r (v_r − Γ_r S₀ᵀ k_r − Σ_{i<r} (Γ_r/Γ_i) (k_r·k_i) u_i); o_r from S₀ and the u's.
    for (std::uint32_t r = 0; r < n; ++r) {
      float* ur = &u[std::size_t{r} * S];
      float* o = &out[std::size_t{c0 + r} * S];
      for (std::uint32_t j = 0; j < S; ++j) ur[j] = 0.0f, o[j] = 0.0f;
      for (std::uint32_t e = 0; e < S; ++e) {
        const float ke = K[r * S + e] * gamma[r], qe = Q[r * S + e] * gamma[r];
        const float* se = &s[std::size_t{e} * S];
        for (std::uint32_t j = 0; j < S; ++j) ur[j] += ke * se[j], o[j] += qe * se[j];
      }
      for (std::uint32_t j = 0; j < S; ++j) ur[j] = V[r * S + j] - ur[j];
      for (std::uint32_t i = 0; i < r; ++i) {
        const float a = gamma[r] / gamma[i] * kk[r * C + i];
        const float* ui = &u[std::size_t{i} * S];
        for (std::uint32_t j = 0; j < S; ++j) ur[j] -= a * ui[j];
      }
      for (std::uint32_t j = 0; j < S; ++j) ur[j] *= in.beta[c0 + r];
      for (std::uint32_t i = 0; i <= r; ++i) {
        const float a = gamma[r] / gamma[i] * qk[r * C + i];
        const float* ui = &u[std::size_t{i} * S];
        for (std::uint32_t j = 0; j < S; ++j) o[j] += a * ui[j];
      }
    }
    const float last = gamma[n - 1];
    for (std::uint32_t e = 0; e < S; ++e) {
      float* se = &s[std::size_t{e} * S];
      for (std::uint32_t j = 0; j < S; ++j) se[j] *= last;
      for (std::uint32_t i = 0; i < n; ++i) {
        const float a = last / gamma[i] * K[i * S + e];
        const float* ui = &u[std::size_t{i} * S];
        for (std::uint32_t j = 0; j < S; ++j) se[j] += a * ui[j];
      }
    }
  }
}

double seconds_of(auto&& f, std::uint32_t repeat) {
  double best = 1e30;
  for (std::uint32_t i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t tokens = 4096, S = 128, C = 64, repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const auto v = static_cast<std::uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    if (a == "--tokens") tokens = v;
    else if (a == "--state") S = v;
    else if (a == "--chunk") C = v;
    else if (a == "--repeat") repeat = v;
    else {
      fmt::print(stderr, "unknown option {} (--tokens, --state, --chunk, --repeat)\n", a);
      return 2;
    }
  }
  if (tokens == 0 || S == 0 || C == 0 || repeat == 0) {
    fmt::print(stderr, "every option must be at least 1\n");
    return 2;
  }
  const Inputs in = make_inputs(tokens, S);
  std::vector<float> exact(std::size_t{tokens} * S), chunked(std::size_t{tokens} * S);
  const double te = seconds_of([&] { run_exact(in, exact); }, repeat);
  const double tc = seconds_of([&] { run_chunked(in, C, chunked); }, repeat);
  std::vector<float> baseline(exact.size());
  const double tb = seconds_of([&] { run_exact(in, baseline, true); }, repeat);
  const bool same = std::memcmp(exact.data(), baseline.data(), exact.size() * sizeof(float)) == 0;
  float diff = 0.0f, top = 0.0f;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    diff = std::max(diff, std::fabs(exact[i] - chunked[i]));
    top = std::max(top, std::fabs(exact[i]));
  }
  fmt::print("tokens {} state {}x{} chunk {}: per-token exact {:.0f} ns/token/head, chunked (WY) {:.0f} ns/token/head "
             "(exact / chunked {:.2f}); max |diff| {:.2e} of max |o| {:.2e}\n",
             tokens, S, S, C, te / tokens * 1e9, tc / tokens * 1e9, te / tc, static_cast<double>(diff),
             static_cast<double>(top));
  fmt::print("per-token exact, baseline instruction set: {:.0f} ns/token/head ({:.2f}x the processor's copy); "
             "outputs {}\n", tb / tokens * 1e9, tb / te, same ? "the same bits" : "DIFFERENT BITS");
  return same ? 0 : 1;
}
