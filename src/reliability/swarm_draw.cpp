// swarm_draw.cpp — the seed's draw: the configuration (geometry, pools, budgets, policy, sparse
// attention, retained histories), the fault rates and the workload (requests, conversations).
//
// Invariant: every value comes from the seed alone, in a fixed order from the seed's generator
// (sparse attention and the retained allowance from their own generators, so that every other
// draw is what it was before they existed); the pools are sized so that the page pool holds
// exactly the pages drawn.
#include "reliability/swarm_seed_run.hpp"

namespace activekv::reliability::detail {

void SeedRun::draw() {
  Geometry& g = settings_.memory.geometry;
  g.dense_layers = uniform(1, 2);
  g.kv_heads = uniform(1, 2);
  g.head_dim = 8u << uniform(0, 1);
  g.dtype = chance(50) ? DType::f16 : DType::bf16;
  MemorySettings& m = settings_.memory;
  m.page_tokens = 2u << uniform(0, 2);
  m.tile_tokens = m.page_tokens * uniform(1, 3);
  m.tiles = uniform(1, 2);
  m.max_context_tokens = 64;
  m.max_seqs = uniform(1, 3);
  m.chunk_tokens = m.page_tokens * uniform(1, 2);
  m.host_pool_bytes = std::uint64_t{m.max_seqs} * g.dense_layers * m.max_context_tokens * g.row_bytes();
  const std::uint64_t floor_pages = std::uint64_t{g.dense_layers} * (1 + pages_spanned_max(m.chunk_tokens, m.page_tokens));
  const std::uint64_t all_pages = std::uint64_t{m.max_seqs} * g.dense_layers * (m.max_context_tokens / m.page_tokens);
  const std::uint64_t pages = floor_pages * m.max_seqs + uniform(0, 60) * (all_pages - floor_pages * m.max_seqs) / 100;
  // Exactly `pages` pool pages: the page pool starts at the tiles' end rounded up to the arena
  // alignment (slack beyond that would become more pages, and every history would fit).
  const std::uint64_t tiles_bytes = std::uint64_t{m.tiles} * m.tile_tokens * g.row_bytes();
  m.device_pool_bytes = (tiles_bytes + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes +
                        pages * m.page_tokens * g.row_bytes();
  settings_.q_heads = g.kv_heads * uniform(1, 2);
  settings_.policy = chance(50) ? ResidencyPolicyKind::exact : ResidencyPolicyKind::hotness;
  settings_.hotness_threshold = 0.02f;

  // Fault rates: each class present in about two seeds of three.
  faults_.failed_copy = chance(67) ? real(0.10) : 0.0;
  faults_.failed_fence = chance(67) ? real(0.02) : 0.0;
  faults_.unknown_fence = chance(67) ? real(0.02) : 0.0;
  faults_.late_fence = chance(67) ? real(0.30) : 0.0;
  faults_.late_ticks = uniform(1, 5000);
  reorder_ = chance(75);
  fault_phase_steps_ = uniform(0, 40);
  lose_device_at_ = chance(20) ? uniform(1, std::max(1u, static_cast<std::uint32_t>(fault_phase_steps_))) : 0;
  lose_device_layer_ = uniform(0, g.dense_layers - 1);
  refuse_warmup_ = chance(10);
  // Sparse attention (docs/SPARSE.md) in about one seed of three, from its own generator so that
  // every other draw of the seed is what it was before sparse existed.
  std::mt19937_64 sparse_rng(report_.seed ^ 0x5BA75E5EEDull);
  auto sparse_pick = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(sparse_rng);
  };
  if (sparse_pick(0, 2) == 0) {
    SparseSettings& sp = settings_.sparse;
    const std::uint32_t mode = sparse_pick(0, 2);
    sp.mode = mode == 0 ? SparseMode::pages : mode == 1 ? SparseMode::fraction : SparseMode::adaptive;
    sp.pages = sparse_pick(3, 6);
    sp.fraction = 0.25f * static_cast<float>(sparse_pick(1, 3));
    sp.floor_pages = sparse_pick(3, 6);
    sp.recent_pages = sparse_pick(1, 2);
    sp.measure = sparse_pick(0, 1) == 1;
    // Staging (docs/SPARSE.md "Staging"): every page, predicted with misses, or after the query.
    const std::uint32_t staging = sparse_pick(0, 3);
    sp.staging = staging == 0 ? SparseStaging::every : staging == 3 ? SparseStaging::selected : SparseStaging::predicted;
  }
  settings_.prefix_reuse = chance(67);
  // A retained-history allowance (docs/PREFIX.md) in about two reuse seeds of three, from its own
  // generator so that every other draw of the seed is what it was before: host histories that
  // never run a context, only keep retained prefixes.
  if (settings_.prefix_reuse) {
    std::mt19937_64 retain_rng(report_.seed ^ 0x2E7A1AEDull);
    m.retained_histories = std::uniform_int_distribution<std::uint32_t>(0, 2)(retain_rng);
    m.host_pool_bytes += std::uint64_t{m.retained_histories} * g.dense_layers * m.max_context_tokens * g.row_bytes();
    // A host prefix cache (docs/PREFIX_CACHE.md) in about half of them, 2 to 48 pages (small: it
    // evicts), from its own generator too; carved off the host pool.
    std::mt19937_64 cache_rng(report_.seed ^ 0xCAC4Eull);
    if (cache_rng() % 2 == 1) {
      const std::uint64_t cache_pages = std::uniform_int_distribution<std::uint64_t>(2, 48)(cache_rng);
      m.prefix_cache_bytes = cache_pages * m.page_tokens * g.row_bytes() * g.dense_layers;
      m.host_pool_bytes += m.prefix_cache_bytes;
    }
  }
  if (settings_.sparse.enabled()) {
    // The summaries' own arena part after the pages, one per history slot (the retained
    // allowance included): the page pool's end rounded up to the alignment, then the part (so
    // the pool keeps at least its `pages`).
    MemorySettings with_summaries = m;
    with_summaries.sparse_summaries = true;
    m.device_pool_bytes += arena_alignment_bytes + summary_part_bytes(with_summaries);
  }

  // The workload.
  const std::uint32_t n = uniform(2, 8);
  requests_.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    Request& r = requests_[i];
    r.id = i + 1;
    r.tokens_max = uniform(4, m.max_context_tokens);
    r.prompt_tokens = uniform(1, r.tokens_max);
    r.cancel_at = chance(15) ? uniform(1, r.tokens_max) : 0;
    r.arrival_step = uniform(0, 30);
    if (i > 0 && chance(40)) {  // a follow-up turn: arrives after its predecessor, extends its history
      r.follows = static_cast<std::int32_t>(uniform(0, i - 1));
      r.arrival_step = requests_[static_cast<std::size_t>(r.follows)].arrival_step + uniform(5, 60);
    }
    r.k.resize(g.dense_layers);
    r.v.resize(g.dense_layers);
    r.sums.resize(g.dense_layers);
  }
  draw_serve_pattern(floor_pages, pages);
  draw_hybrid();
  report_.requests = requests_.size();
  trace(g.dense_layers), trace(g.kv_heads), trace(g.head_dim), trace(m.page_tokens), trace(m.tile_tokens);
  trace(m.max_seqs), trace(m.device_pool_bytes), trace(n);
}

// The server's pattern (issue 24) in about one seed of two, from its own generator so that every
// other draw of the seed is what it was before: the operator's budget shape that lets a long history
// borrow most of the pool (a target near the floor, the burst the whole pool), a step token budget
// (one decode per context and up to a chunk of prefill, like serve's step_tokens), and repeated
// prompts — requests that share a drawn part of an earlier request's history and then diverge, so
// their admission copies the retained prefix's pages (or, sharing all of it, adopts them in place).
void SeedRun::draw_serve_pattern(std::uint64_t floor_pages, std::uint64_t pages) {
  std::mt19937_64 serve_rng(report_.seed ^ 0x15C0A7E24ull);
  auto pick = [&](std::uint32_t lo, std::uint32_t hi) { return std::uniform_int_distribution<std::uint32_t>(lo, hi)(serve_rng); };
  if (pick(0, 1) != 0) return;
  serve_pattern_ = true;
  MemorySettings& m = settings_.memory;
  const std::uint64_t usable = std::uint64_t{m.geometry.dense_layers} * (m.max_context_tokens / m.page_tokens);
  m.target_pages = std::min({floor_pages + pick(0, static_cast<std::uint32_t>(floor_pages) * 4), pages, usable});
  step_tokens_ = m.max_seqs + pick(1, m.chunk_tokens);
  const std::uint32_t first_repeat = static_cast<std::uint32_t>(requests_.size());
  const std::uint32_t repeats = pick(2, 6);
  for (std::uint32_t i = 0; i < repeats; ++i) {
    Request r;
    r.id = requests_.size() + 1;
    r.tokens_max = pick(4, m.max_context_tokens);
    r.prompt_tokens = pick(1, r.tokens_max);
    r.cancel_at = pick(0, 4) == 0 ? pick(1, r.tokens_max) : 0;  // mid-prefill as often as mid-decode
    r.follows = static_cast<std::int32_t>(pick(0, first_repeat + i - 1));
    r.repeats = pick(0, 2) != 0;
    r.arrival_step = requests_[static_cast<std::size_t>(r.follows)].arrival_step + pick(3, 40);
    r.k.resize(m.geometry.dense_layers);
    r.v.resize(m.geometry.dense_layers);
    r.sums.resize(m.geometry.dense_layers);
    requests_.push_back(std::move(r));
  }
}

// Hybrid contexts (docs/RUNTIME.md "Recurrent state") in about one seed of three, from their own
// generator so that every other draw of the seed is what it was before: a recurrent state of 16 to
// 96 bytes per context (a toy recurrence, swarm_seed_run.hpp), one device slot per context that may
// run after the page pool (so the pool keeps exactly its pages), and with prefix reuse the host
// checkpoints of every history slot, one every K pages for a drawn K (0 to 3).
void SeedRun::draw_hybrid() {
  std::mt19937_64 hybrid_rng(report_.seed ^ 0x4B7B41Dull);
  if (hybrid_rng() % 3 != 0) return;
  report_.hybrid = true;
  MemorySettings& m = settings_.memory;
  m.geometry.recurrent_state_bytes = 8 * (2 + hybrid_rng() % 11);
  m.state_checkpoint_pages = static_cast<std::uint32_t>(hybrid_rng() % 4);
  m.state_checkpoints = settings_.prefix_reuse;  // as KvRuntime::create() sets it
  m.host_pool_bytes += std::uint64_t{m.max_seqs + m.retained_histories} * state_bytes_per_history(m);
  const std::uint64_t slots = std::uint64_t{m.max_seqs} * m.geometry.recurrent_state_bytes;
  m.device_pool_bytes += (slots + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes;
}

}  // namespace activekv::reliability::detail
