// sampler.hpp — choosing the next token from a row of logits.
//
// Greedy by default (temperature 0): the highest logit, the lowest id on ties,
// so generation is reproducible bit for bit wherever the logits are. With a
// temperature, tokens are drawn from softmax(logits / temperature) restricted
// to the smallest set whose probability reaches top_p (nucleus sampling),
// using the sampler's own xoshiro256** generator seeded from `seed`: the same
// seed and logits give the same tokens on every platform (no std::
// distribution, whose output the standard leaves to the library).
//
// Allocation: the candidate buffer is sized for the vocabulary at
// construction; sample() allocates nothing.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "activekv/result.hpp"

namespace activekv::engine {

struct SamplerSettings {
  std::uint64_t seed = 0;    // --seed
  float temperature = 0.0f;  // --temperature: 0 = greedy
  float top_p = 1.0f;        // --top-p: in (0, 1]
};

// Refuses a negative or non-finite temperature and a top_p outside (0, 1].
Status validate(const SamplerSettings& settings);

class Sampler {
 public:
  Sampler(const SamplerSettings& settings, std::uint32_t vocab);
  std::uint32_t sample(std::span<const float> logits) noexcept;
  // New settings and a generator reseeded from them, as if just constructed;
  // allocates nothing (a server gives each context slot one sampler at warm-up).
  void reset(const SamplerSettings& settings) noexcept;
  const SamplerSettings& settings() const noexcept { return settings_; }

  static std::uint32_t argmax(std::span<const float> logits) noexcept;

 private:
  std::uint64_t next_u64() noexcept;
  double next_unit() noexcept;  // uniform in [0, 1)

  SamplerSettings settings_;
  std::array<std::uint64_t, 4> state_{};
  struct Candidate {
    float probability;
    std::uint32_t token;
  };
  std::vector<Candidate> candidates_;
};

}  // namespace activekv::engine
