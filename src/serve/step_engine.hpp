// step_engine.hpp — the narrow table the scheduler drives: admit, step, finish.
//
// The scheduler (scheduler.hpp) never sees a model, a backend or a page table.
// It sees this interface: contexts are admitted against the host pool and the
// floors (or refused with the reason), a step feeds a batch of {context,
// tokens} and returns one sampled token for each entry that asks for one,
// and a finished or cancelled context gives back its history and pages at once.
// Two implementations exist: the real engine over the KV runtime
// (engine_step_engine.hpp) and a tiny deterministic model (fake_engine.hpp)
// that the scheduler's tests use, so every scheduling property is checked
// without a model file and in milliseconds.
//
// Everything on the step path (step, budget, counters) must not allocate.
// Tokenisation happens at load time, before warm-up ends (a server tokenizes
// on its HTTP threads: encode and decode touch only the immutable tokenizer and
// may run on any thread, beside a step).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/result.hpp"

namespace activekv::serve {

// Why a context could not be admitted now. Every value but `admitted` keeps
// the request in the FIFO queue; none of them is a refusal.
enum class AdmitOutcome : std::uint8_t {
  admitted,
  no_free_history,     // every host-pool history is owned by a running context
  floor_does_not_fit,  // the device pool cannot hold another context's floor now
  tier_pending,        // the shared KV tier's background lookup of the prompt runs, or its writer
                       // still reads the only histories that could be free (bounded by its timeout)
};

// A context as the engine names it. Generation-checked by the engine.
struct ContextHandle {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;
  friend bool operator==(ContextHandle, ContextHandle) = default;
};

struct Admission {
  AdmitOutcome outcome = AdmitOutcome::no_free_history;
  ContextHandle context{};
  // Leading prompt tokens whose KV the context adopted from a retained history (prefix reuse,
  // docs/PREFIX.md): whole pages, always fewer than the prompt. The caller feeds the prompt from
  // this offset; the outputs are bit-identical to feeding it whole.
  std::uint32_t reused_tokens = 0;
};

// One entry of a step: feed `tokens` (a prefill chunk, or one decode token)
// to `context`; when want_token, sample the next token after the last one fed.
struct BatchEntry {
  ContextHandle context{};
  std::span<const std::int32_t> tokens{};
  bool want_token = false;
};

// How one context chooses its tokens (engine::SamplerSettings without the
// dependency): temperature 0 is greedy, argmax with the lowest id on ties.
struct SamplingSettings {
  std::uint64_t seed = 0;
  float temperature = 0.0f;  // >= 0, finite (validated by whoever accepts it)
  float top_p = 1.0f;        // in (0, 1]
};

// Pages of one context across all its dense layers, as the budgets see them.
struct ContextPages {
  std::uint32_t held = 0;    // device pool pages owned now
  std::uint32_t floor = 0;   // what one step needs resident
  std::uint32_t target = 0;  // held by right
  std::uint32_t burst = 0;   // may borrow up to this while pages are free
  // A hybrid model's recurrent state (0 bytes: none): where it lives and where it came from.
  std::uint64_t state_bytes = 0;
  std::uint32_t recurrent_slot = UINT32_MAX;   // the device slot in the arena's recurrent part
  std::uint32_t state_restored_tokens = 0;     // restored from the checkpoint at this position (0: started empty)
  std::uint32_t state_checkpoints_held = 0;    // checkpoints its history holds on the host
  std::uint32_t state_checkpoint_newest = 0;   // the newest one's position
};

// Monotonic totals since warm-up ended; the scheduler records deltas per step.
struct EngineCounters {
  std::uint64_t bytes_h2d = 0;       // staged history + new rows, host to device
  std::uint64_t bytes_d2h = 0;       // tail rows written back
  std::uint64_t bytes_d2d = 0;       // promotions (tile -> pool page)
  std::uint64_t copies_h2d = 0;
  std::uint64_t copies_d2h = 0;
  std::uint64_t copies_d2d = 0;
  std::uint64_t page_reads_resident = 0;  // pages attention read in place
  std::uint64_t page_reads_staged = 0;    // pages attention read from a staging tile
  std::uint64_t promotions = 0;
  std::uint64_t reclaimed_pages = 0;
  std::uint64_t reclaim_steps = 0;
  std::uint64_t quarantines = 0;
  std::uint64_t device_allocations_after_warmup = 0;
  std::uint64_t host_bytes_in_use = 0;    // histories owned x history bytes (a level, not a total)
  std::uint64_t device_bytes_in_use = 0;  // pool pages owned x page bytes + tiles in use (a level)
  std::uint64_t planning_ns = 0;          // time spent planning residency
  std::uint64_t step_ns = 0;              // time spent in steps, planning included
  // Prefix reuse (docs/PREFIX.md):
  std::uint64_t prefix_reused_tokens = 0; // prompt tokens adopted from retained histories instead of prefilled
  std::uint64_t prefix_adoptions = 0;     // admissions that adopted a retained prefix
  std::uint64_t retained_kept = 0;        // finished histories kept as retained prefixes
  std::uint64_t retained_dropped = 0;     // retained prefixes dropped (admission took the history, cancel)
  std::uint64_t retained_histories = 0;   // a level: histories holding a retained prefix now
  // The shared KV tier (docs/TIER.md); all 0 without one:
  std::uint64_t tier_restored_tokens = 0; // prompt tokens restored from the tier instead of prefilled
  std::uint64_t tier_ring_cuts = 0;       // restores cut back: window rows missing from the blocks
  std::uint64_t tier_state_cuts = 0;      // restores cut back to the last block carrying a state (hybrids)
  std::uint64_t tier_hits = 0;            // blocks read and accepted
  std::uint64_t tier_misses = 0;          // lookups that stopped short (absent, refused or failed)
  std::uint64_t tier_errors = 0;          // connection, timeout and protocol failures
  std::uint64_t tier_refused = 0;         // values read but refused (checksum, version, model, geometry)
  std::uint64_t tier_bytes_read = 0;
  std::uint64_t tier_bytes_written = 0;
  std::uint64_t tier_dropped_writes = 0;  // blocks not written: the queue was full or the store failed
  std::uint64_t tier_kept_writes = 0;     // less complete blocks not written: the key held one (SET NX)
  std::uint64_t retained_device_pages_adopted = 0;    // device pages handed over in place to adopting contexts
  std::uint64_t retained_device_pages_reclaimed = 0;  // retained device pages freed (reclaimed first, dropped)
  std::uint64_t retained_device_pages = 0;            // a level: device pages retained histories hold now
  std::uint64_t prefix_device_pages_copied = 0;       // copy on adopt: prefix pages copied device to device
  std::uint64_t prefix_device_pages_promoted = 0;     // of those, the source's promoted pages (promoted in the adopter)
  std::uint64_t h2d_bytes_adopting = 0;               // h2d bytes moved for contexts that adopted a prefix
  // The host prefix cache (docs/PREFIX.md, "The host prefix cache"); all 0 without one:
  std::uint64_t prefix_cache_bytes = 0;       // a level: bytes of pages the cache holds
  std::uint64_t prefix_cache_pages = 0;       // a level: pages the cache holds
  std::uint64_t prefix_cache_pages_total = 0; // its capacity in pages
  std::uint64_t prefix_cache_lookups = 0;     // admissions that looked in it
  std::uint64_t prefix_cache_hits = 0;        // of them, admissions that copied at least one page from it
  std::uint64_t prefix_cache_hit_tokens = 0;  // prompt tokens copied from it instead of prefilled
  std::uint64_t prefix_cache_evictions = 0;   // pages evicted (least recently used leaves first)
  std::uint64_t prefix_cache_pages_shared = 0;  // pages finished histories found already stored
  std::uint64_t prefix_cache_ring_cuts = 0;     // adoptions cut back: window rows missing (window-layer models)
  std::uint64_t prefix_cache_ring_cut_pages = 0;   // matched pages those cuts prefilled instead
  std::uint64_t prefix_cache_state_cuts = 0;    // adoptions cut back to a cached state checkpoint (hybrids)
  std::uint64_t prefix_cache_state_cut_pages = 0;  // matched pages those cuts prefilled instead
};

// What the memory plan promised; the report sets peaks against it.
struct EnginePlan {
  std::uint32_t max_context_tokens = 0;
  std::uint32_t histories = 0;       // host-pool histories (contexts that fit)
  std::uint32_t concurrency = 0;     // min(max_seqs, histories − retained_histories)
  std::uint32_t retained_histories = 0;  // of the histories, kept only for retained prefixes (never run one)
  std::uint32_t prefix_cache_pages = 0;  // the host prefix cache's pages (0: none)
  std::uint64_t prefix_cache_page_bytes = 0;
  std::uint32_t max_seqs = 0;        // as configured
  std::uint32_t pool_pages = 0;      // device page pool
  std::uint32_t page_tokens = 0;
  std::uint64_t host_pool_bytes = 0;
  std::uint64_t device_arena_bytes = 0;
  std::int32_t eos_token = -1;       // -1: none
  std::uint32_t vocab = 0;           // prompt token ids must be below it (run_job checks the trace); 0: any id
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;

  virtual const EnginePlan& plan() const = 0;
  // The memory plan as the operator reads it (formulas with numbers); load time.
  virtual std::string plan_text() const = 0;
  // The same plan as JSON (the real engine: the keys of `activekv plan --json`).
  virtual std::string plan_json() const = 0;

  // Load time only (allocates).
  virtual Result<std::vector<std::int32_t>> encode(std::string_view text) = 0;
  virtual std::string decode(std::span<const std::int32_t> tokens) = 0;

  // Admits a context for `prompt` that will grow to at most tokens_max tokens, or says why not.
  // With prefix reuse the context may adopt a retained history of the prompt's leading tokens
  // (Admission::reused_tokens). Retained histories never make admission wait: one is dropped instead.
  virtual Admission admit(std::span<const std::int32_t> prompt, std::uint32_t tokens_max) = 0;
  // After admit() said tier_pending with nothing else to step: waits up to timeout_ms for the
  // tier's lookup or writer to move on. Engines without a tier never say tier_pending.
  virtual void wait_admission(std::uint32_t timeout_ms) { (void)timeout_ms; }
  // A queued request, before it reaches the head: the engine may start fetching what admission
  // will need (the KV tier's lookup, docs/TIER.md). True when started or nothing to do; false: ask
  // again later. drop_prefetch: the request leaves the queue unadmitted; what was fetched goes.
  virtual bool prefetch(std::span<const std::int32_t> prompt) { (void)prompt; return true; }
  virtual void drop_prefetch(std::span<const std::int32_t> prompt) { (void)prompt; }
  // Sets how an admitted context samples, from its next token on (allocation-free).
  // Contexts start greedy; an engine whose model has no logits (the fake one) ignores it.
  virtual void set_sampling(ContextHandle context, const SamplingSettings& sampling) = 0;
  // Returns the context's history and pages at once (it must not be in a step). With prefix
  // reuse the history's full pages stay as a retained prefix until a later admission needs it.
  virtual void finish(ContextHandle context) = 0;
  // Like finish, at any point: waits for every fence that touched the
  // context's pages and leases before returning them (quarantining on a failed one).
  virtual void cancel(ContextHandle context) = 0;

  // Tokens the context may prefill before the next position where a hybrid's recurrent state is
  // checkpointed for prefix reuse (KvRuntime::tokens_to_checkpoint): the scheduler ends a prefill
  // chunk there, so the checkpoint is taken (outputs do not depend on the cut). UINT32_MAX: none.
  virtual std::uint32_t tokens_to_checkpoint(ContextHandle context) const {
    (void)context;
    return UINT32_MAX;
  }
  // Runs one step; tokens_out[i] is set for every entry with want_token.
  // Must not allocate after warm-up.
  virtual Status step(std::span<const BatchEntry> batch, std::span<std::int32_t> tokens_out) = 0;

  virtual ContextPages pages(ContextHandle context) const = 0;
  virtual EngineCounters counters() const = 0;
  // True when every history and every pool page is free and no lease is held.
  virtual bool all_returned() const = 0;
  // Shutdown, with nothing running: retained histories give back the device pages they still hold
  // (prefix reuse, docs/PREFIX.md "Device side"), through the runtime's fenced path; all_returned()
  // is asked after it. Engines that retain nothing on a device do nothing.
  virtual void release_retained() {}
};

}  // namespace activekv::serve
