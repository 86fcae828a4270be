// generate.hpp — one context from prompt to last token: chunked prefill, then
// greedy or sampled decode, one token per step, until a stop token or the limit.
//
// The loop the `generate` command and the tests share; the scheduler batches
// many contexts itself with Engine::step. Tokens reach the caller through a
// plain function pointer as they are chosen (streaming), so the loop itself
// allocates nothing after its first decode step.
#pragma once

#include <cstdint>
#include <span>

#include "engine/engine.hpp"
#include "engine/sampler.hpp"

namespace activekv::engine {

struct GenerateStats {
  std::uint32_t prompt_tokens = 0;
  std::uint32_t generated_tokens = 0;
  std::uint32_t reused_tokens = 0;  // prompt tokens the context held before the first step (an adopted prefix)
  std::uint64_t prefill_ns = 0;  // wall time of the prefill steps
  std::uint64_t decode_ns = 0;   // wall time of the decode steps
  bool stopped = false;          // a stop token ended it (else the limit did)
};

struct GenerateRequest {
  ContextId context;                     // open: empty, or holding an adopted prefix of the prompt
  std::span<const TokenId> prompt;       // ≥ 1 token
  std::uint32_t max_tokens = 64;         // generated tokens at most
  std::span<const TokenId> stop_tokens;  // generation ends after emitting one (not passed to on_token)
  // Called with each generated token; return false to stop early.
  bool (*on_token)(void* user, TokenId token) = nullptr;
  // Optional: called with the logits each token is sampled from (tests compare them by memcmp).
  void (*on_logits)(void* user, std::span<const float> logits) = nullptr;
  void* user = nullptr;
};

Result<GenerateStats> generate(Engine& engine, Sampler& sampler, const GenerateRequest& request);

}  // namespace activekv::engine
