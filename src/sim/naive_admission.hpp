// naive_admission.hpp — the baseline ActiveKV is compared with under a saturating workload.
//
// "Admit while pages are free, evict and recompute on overflow": the policy of
// a server whose KV lives only on the device (vLLM's default recompute
// preemption). The memory-constrained serving model in related-research.txt
// (Ao, Dong, Luo et al.) shows why it misbehaves: admission looks at today's
// free pages, but every admitted request grows by a page every P tokens, so
// the pool overflows later and the server evicts requests it already paid to
// prefill; with a homogeneous workload the system settles into a limit cycle
// of admission bursts and eviction bursts rather than the eviction-free
// equilibrium.
//
// One step of the model, in order:
//   1. admit from the waiting queue (FIFO; evicted requests go back to its
//      head) while running < max_seqs and the request's pages (prompt plus any
//      tokens it had generated, all recomputed) plus its recurrent state fit
//      in the free pages;
//   2. every running request decodes one token; one that needs a new page when
//      none is free evicts the most recently admitted running request (maybe
//      itself), which frees its pages and returns to the queue head;
//   3. requests that produced output_tokens finish and free their pages.
// Counted per step: running, admitted, evicted, decoded tokens and prefill
// tokens (first prefills and recomputations separately).
//
// Plain arithmetic on integers, no randomness: the same settings give the same
// trace. Tables are reserved at construction; step() allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace activekv::sim {

struct NaiveSettings {
  std::uint64_t capacity_pages = 0;        // device KV pages (all dense layers of P tokens each)
  std::uint32_t page_tokens = 0;           // P
  std::uint64_t recurrent_pages = 0;       // per running request, in the same page units (rounded up)
  std::uint32_t max_seqs = 0;              // running requests at most (vLLM max_num_seqs)
  std::uint32_t prompt_tokens = 0;
  std::uint32_t output_tokens = 0;
};

struct NaiveStep {
  std::uint32_t running = 0;               // after the step
  std::uint32_t admitted = 0;
  std::uint32_t evicted = 0;
  std::uint32_t finished = 0;
  std::uint64_t decoded_tokens = 0;        // tokens produced this step (kept across evictions)
  std::uint64_t prefill_tokens = 0;        // first-time prompt prefill
  std::uint64_t recompute_tokens = 0;      // prompt + generated tokens prefilled again after an eviction
  std::uint64_t pages_used = 0;
  std::uint64_t kv_tokens_resident = 0;    // sum of running lengths (attention reads)
};

struct NaiveTotals {
  std::uint64_t steps = 0;
  std::uint64_t admitted = 0;
  std::uint64_t evicted = 0;
  std::uint64_t finished = 0;
  std::uint64_t decoded_tokens = 0;
  std::uint64_t prefill_tokens = 0;
  std::uint64_t recompute_tokens = 0;
};

class NaiveAdmission {
 public:
  explicit NaiveAdmission(const NaiveSettings& settings);

  NaiveStep step() noexcept;
  const NaiveTotals& totals() const noexcept { return totals_; }
  std::uint64_t pages_free() const noexcept { return settings_.capacity_pages - pages_used_; }

 private:
  struct Request {
    std::uint32_t generated = 0;           // output tokens produced so far (kept across eviction)
    std::uint64_t pages = 0;               // KV pages held (0 while waiting)
  };
  std::uint64_t kv_pages(std::uint64_t tokens) const noexcept {
    return (tokens + settings_.page_tokens - 1) / settings_.page_tokens;
  }
  void admit(NaiveStep& out) noexcept;
  void evict_newest(NaiveStep& out) noexcept;

  NaiveSettings settings_;
  // Requests live in a fixed table; the waiting queue is a ring of their indices with
  // evicted requests pushed at its head. Fresh requests come from an endless supply.
  std::vector<Request> table_;
  std::vector<std::uint32_t> free_entries_;
  std::vector<std::uint32_t> running_;     // indices, admission order
  std::uint32_t running_count_ = 0;
  std::vector<std::uint32_t> waiting_;     // ring of evicted requests (fresh ones are implicit)
  std::uint32_t waiting_head_ = 0;
  std::uint32_t waiting_count_ = 0;
  std::uint64_t pages_used_ = 0;
  NaiveTotals totals_;
};

}  // namespace activekv::sim
