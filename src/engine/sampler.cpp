// sampler.cpp — see sampler.hpp.
#include "engine/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "activekv/assert.hpp"

namespace activekv::engine {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

}  // namespace

Status validate(const SamplerSettings& s) {
  if (!std::isfinite(s.temperature) || s.temperature < 0.0f)
    return make_error(ErrorCode::invalid_argument, "--temperature",
                      fmt::format("temperature must be a finite number ≥ 0 (0 is greedy), not {}", s.temperature));
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
    return make_error(ErrorCode::invalid_argument, "--top-p", fmt::format("top-p must be in (0, 1], not {}", s.top_p));
  return Status::success();
}

Sampler::Sampler(const SamplerSettings& settings, std::uint32_t vocab) : settings_(settings) {
  AK_ASSERT(validate(settings).ok(), "Sampler: settings not validated");
  AK_ASSERT(vocab > 0, "Sampler: empty vocabulary");
  candidates_.resize(vocab);
  reset(settings);
}

void Sampler::reset(const SamplerSettings& settings) noexcept {
  AK_ASSERT(validate(settings).ok(), "Sampler::reset: settings not validated");
  settings_ = settings;
  std::uint64_t seed = settings.seed;
  for (std::uint64_t& word : state_) word = splitmix64(seed);
}

std::uint64_t Sampler::next_u64() noexcept {
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Sampler::next_unit() noexcept { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

std::uint32_t Sampler::argmax(std::span<const float> logits) noexcept {
  AK_ASSERT(!logits.empty(), "Sampler::argmax: no logits");
  std::uint32_t best = 0;
  for (std::uint32_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

std::uint32_t Sampler::sample(std::span<const float> logits) noexcept {
  AK_ASSERT(logits.size() == candidates_.size(), "Sampler::sample: logits are not one vocabulary row");
  if (settings_.temperature == 0.0f) return argmax(logits);
  const float max = logits[argmax(logits)];
  double total = 0.0;
  for (std::uint32_t i = 0; i < logits.size(); ++i) {
    const float p = std::exp((logits[i] - max) / settings_.temperature);
    candidates_[i] = Candidate{p, i};
    total += p;
  }
  std::size_t kept = candidates_.size();
  double kept_mass = total;
  if (settings_.top_p < 1.0f) {
    // Highest probability first, lowest id on ties: a total order, so the nucleus is unique.
    std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
      return a.probability != b.probability ? a.probability > b.probability : a.token < b.token;
    });
    double mass = 0.0;
    kept = 0;
    while (kept < candidates_.size() && mass < settings_.top_p * total) mass += candidates_[kept++].probability;
    kept_mass = mass;
  }
  const double target = next_unit() * kept_mass;
  double mass = 0.0;
  for (std::size_t i = 0; i < kept; ++i) {
    mass += candidates_[i].probability;
    if (target < mass) return candidates_[i].token;
  }
  return candidates_[kept - 1].token;
}

}  // namespace activekv::engine
