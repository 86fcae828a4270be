// prefix_cache.hpp — the host prefix cache: finished histories' full pages, at their real length.
//
// A retained history (prefix_index.hpp) costs a whole max-context history whatever its prompt's
// length, so a few of them are all the host pool keeps. The prefix cache keeps finished
// histories' full pages in a part of the pinned host pool sized in bytes (`prefix_cache`), page
// by page, so a prompt of 600 tokens costs 38 pages of 16 tokens, not 8,192 tokens' worth.
//
// The unit: one cache page = one page index across every dense layer (P rows × dense_layers),
// stored contiguously layer after layer:
//
//   cache page i, layer l:  store + (i × dense_layers + l) × P × row_bytes   (P rows)
//
// so one chained page hash (prefix_chain_page, the same chain the retained index and the tier
// use) names one cache page. A window layer's history is a ring (memory_plan.hpp): when a page is
// offered its rows may be gone from the ring. rows() then gives nullptr for that layer, the page
// is stored without them (window_rows(page) false: those layers' part of the page unused) and an
// adoption that needs them is cut back by the runtime (kv_runtime_prefix_cache.cpp). A later offer
// of the same page that still has them fills them in.
//
// Recurrent state (hybrid models): the state exists at one position only, so a cached prefix is
// adoptable only up to a page boundary where the cache also holds the state. The store's second
// part holds `states` state checkpoints (state_bytes each); put_state() gives one to a chained page
// (the state at the page's end, token (depth + 1) × P), taking a free one or the least recently
// used page's; a page's state goes with the page when it is evicted. The pages form a tree: a page's parent is the page before it in
// its prefix. Pages shared by several prefixes (a common system prompt) are stored once: a
// second prefix finds them by hash and links its own pages below them.
//
// Eviction is least recently used by page, leaves first. Invariant (lru): every page is used
// no earlier than each of its children — every use touches its whole chain leaf first, root
// last — so the least recently used page is always a leaf, and a shared stem outlives every
// branch below it. Eviction pops the LRU tail; it never blocks anything (inserting simply
// stops when only the chain being inserted is left).
//
// Every table is sized in create(): the page records, the hash table (open addressing, linear
// probing, backward-shift deletion, twice the pages rounded to a power of two), the LRU list
// (intrusive, doubly linked by index), the free stack and the query scratch. insert(), match(),
// touch() and evict() allocate nothing. The store itself (bytes) is the caller's: a part of the
// host pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "activekv/result.hpp"
#include "runtime/prefix_index.hpp"

namespace activekv::runtime {

struct PrefixCacheConfig {
  std::uint32_t pages = 0;               // cache pages the store holds
  std::uint32_t page_tokens = 0;         // P
  std::uint32_t dense_layers = 0;
  std::uint64_t row_bytes = 0;
  std::uint32_t pages_per_prefix = 0;    // max_context_tokens / P: the longest chain
  std::uint64_t model_identity = 0;      // seeds the chain (the same root as the retained index)
  std::uint32_t states = 0;              // state checkpoints the store holds after its pages (0: none)
  std::uint64_t state_bytes = 0;         // bytes of one (the geometry's recurrent_state_bytes)
};

// What one insert() did, for the counters and the decision log.
struct PrefixCacheInsert {
  std::uint32_t stored = 0;    // pages written into the store
  std::uint32_t shared = 0;    // pages already stored (by this or another prefix): touched, not copied
  std::uint32_t evicted = 0;   // leaves evicted to make room
  std::uint32_t skipped = 0;   // full pages not stored: only this prefix's own chain was left to evict
  std::uint32_t without_window_rows = 0;  // pages stored (or left) without some layer's rows: a ring no longer held them
  std::uint32_t window_rows_filled = 0;   // shared pages stored without them whose missing rows this offer filled
};

class PrefixCache {
 public:
  static constexpr std::uint32_t none = UINT32_MAX;

  // Refuses a zero field, naming it.
  static Result<PrefixCache> create(const PrefixCacheConfig& config, std::span<std::byte> store);
  // The store's bytes: pages × page_bytes + states × state_bytes.
  static std::uint64_t store_bytes(const PrefixCacheConfig& c) noexcept {
    return std::uint64_t{c.pages} * page_bytes(c.page_tokens, c.row_bytes, c.dense_layers) + std::uint64_t{c.states} * c.state_bytes;
  }

  // The cache page bytes: P × row_bytes × dense_layers.
  static std::uint64_t page_bytes(std::uint32_t page_tokens, std::uint64_t row_bytes, std::uint32_t dense_layers) noexcept {
    return std::uint64_t{page_tokens} * row_bytes * dense_layers;
  }

  // Stores the full pages of `tokens` (at most pages_per_prefix). rows(layer, page) gives the
  // P rows of logical page `page` of `layer` in the finished history (P × row_bytes bytes), or
  // nullptr when the history no longer holds them (a window layer's ring moved past the page).
  // Pages already stored are touched (and given their missing rows when this offer has them); new
  // ones take free pages, then evicted leaves.
  template <class Rows>
  PrefixCacheInsert insert(std::span<const std::int32_t> tokens, Rows&& rows) noexcept;

  // The longest chain of full pages of `prompt`, at most pages_max, confirmed token by token
  // and by parent link; its cache pages are in chain()[0 .. n). Touches nothing.
  std::uint32_t match(std::span<const std::int32_t> prompt, std::uint32_t pages_max) noexcept;
  std::span<const std::uint32_t> chain() const noexcept { return {chain_.data(), chain_length_}; }
  // Marks chain()[0 .. n) used now (leaf first, root last: the lru invariant).
  void touch_chain(std::uint32_t n) noexcept;

  // A prompt's last, partial page: the stored page at depth n below chain()[n − 1] (n ≥ 1, n ≤ the
  // chain's length) whose first tokens are `tokens` (1 to P − 1 of them); none when none is. A
  // finished prompt's answer filled that page, and a row depends only on the tokens before it, so
  // the page's first rows are the rows this prompt needs. One scan of the records (O(pages)), at
  // admission only, allocating nothing. Touches nothing.
  std::uint32_t match_partial(std::uint32_t n, std::span<const std::int32_t> tokens) const noexcept;
  // Marks `page` (a child of chain()[n − 1]) and then chain()[0 .. n) used now: leaf first.
  void touch_below_chain(std::uint32_t page, std::uint32_t n) noexcept;

  // Stores `state` (state_bytes) as the state at the end of chain()[index] (token (index + 1) × P),
  // unless that page holds one already (a state depends only on the tokens before it: the same
  // bytes). Takes a free state slot, else the least recently used page's when that page is not in
  // chain(). False when none was free and the least recently used state is the chain's.
  bool put_state(std::uint32_t index, const std::byte* state) noexcept;
  bool has_state(std::uint32_t page) const noexcept { return records_[page].state != none; }
  // The state at the end of `page` (has_state(page)): state_bytes bytes.
  const std::byte* state(std::uint32_t page) const noexcept {
    return store_.data() + states_offset_ + std::size_t{records_[page].state} * config_.state_bytes;
  }
  std::uint32_t states_used() const noexcept { return config_.states - state_free_count_; }
  std::uint64_t state_evictions() const noexcept { return state_evictions_; }

  // Rows of cache page `page`, layer `layer`: P × row_bytes bytes.
  const std::byte* rows(std::uint32_t page, std::uint32_t layer) const noexcept {
    return store_.data() + (std::size_t{page} * config_.dense_layers + layer) * layer_bytes_;
  }
  // Whether every layer's rows of `page` are stored (false: some layer's rows were gone when it was
  // offered — a window layer's ring — and that part of the page is unused).
  bool window_rows(std::uint32_t page) const noexcept { return records_[page].window_rows; }
  // Prefixes (leaves of the tree) that go through `page`: how many prompts share it.
  std::uint32_t prefixes_through(std::uint32_t page) const noexcept { return records_[page].leaves; }

  std::uint32_t pages_used() const noexcept { return used_; }
  std::uint32_t pages_total() const noexcept { return config_.pages; }
  std::uint64_t bytes_used() const noexcept { return std::uint64_t{used_} * layer_bytes_ * config_.dense_layers; }
  std::uint64_t evictions() const noexcept { return evictions_; }
  const PrefixCacheConfig& config() const noexcept { return config_; }

  // Walks every structure: the hash table finds each used page, free + used = pages, the LRU list
  // holds exactly the used pages, children and leaf counts agree with the parent links, and the
  // lru invariant holds. nullptr when sound. O(pages); for tests and debug.
  const char* check() const noexcept;

 private:
  struct Record {
    std::uint64_t hash = 0;
    std::uint32_t parent = none;     // the page before it in its prefixes (none: the first page)
    std::uint32_t children = 0;      // stored pages whose parent it is
    std::uint32_t leaves = 0;        // leaves at or below it: the prefixes that share it
    std::uint32_t prev = none;       // LRU list: towards the most recent
    std::uint32_t next = none;       // LRU list: towards the least recent
    std::uint32_t depth = 0;         // its page index in its prefixes
    bool used = false;
    bool window_rows = false;        // every layer's rows stored (else a ring had lost some: unused part)
    std::uint32_t state = none;      // state slot holding the state at the page's end (none: no state)
  };

  PrefixCache() = default;
  std::uint32_t find(std::uint64_t hash, std::uint32_t parent, const std::int32_t* tokens, std::uint32_t depth) const noexcept;
  void table_insert(std::uint32_t page) noexcept;
  void table_erase(std::uint32_t page) noexcept;
  void lru_unlink(std::uint32_t page) noexcept;
  void lru_push_front(std::uint32_t page) noexcept;
  // A free page, evicting the LRU leaf if none is free; none when the tail is in the chain being
  // inserted (chain_[0 .. protect)).
  std::uint32_t take_page(std::uint32_t protect) noexcept;
  void evict(std::uint32_t page) noexcept;
  // Link `page` under `parent` and fix the leaf counts on the path up.
  void link(std::uint32_t page, std::uint32_t parent) noexcept;
  std::int32_t* tokens_of(std::uint32_t page) noexcept { return tokens_.data() + std::size_t{page} * config_.page_tokens; }
  const std::int32_t* tokens_of(std::uint32_t page) const noexcept {
    return tokens_.data() + std::size_t{page} * config_.page_tokens;
  }
  // Copies logical page `p`'s rows of every layer rows() still holds into cache page `page`;
  // whether every layer's were there.
  template <class Rows>
  bool copy_rows(std::uint32_t page, std::uint32_t p, Rows& rows) noexcept {
    bool all = true;
    for (std::uint32_t l = 0; l < config_.dense_layers; ++l) {
      const std::byte* src = rows(l, p);
      if (src == nullptr) {
        all = false;
        continue;
      }
      std::copy(src, src + layer_bytes_, rows_mut(page, l));
    }
    return all;
  }
  std::byte* rows_mut(std::uint32_t page, std::uint32_t layer) noexcept {
    return store_.data() + (std::size_t{page} * config_.dense_layers + layer) * layer_bytes_;
  }

  PrefixCacheConfig config_;
  std::span<std::byte> store_;
  std::uint64_t layer_bytes_ = 0;        // P × row_bytes
  std::uint64_t root_ = 0;
  std::vector<Record> records_;          // [pages]
  std::vector<std::int32_t> tokens_;     // [pages × P]
  std::vector<std::uint32_t> table_;     // [table size]: page index or none
  std::uint64_t table_mask_ = 0;
  std::vector<std::uint32_t> free_;      // [pages]: a stack of free page indices
  std::uint32_t free_count_ = 0;
  std::uint32_t used_ = 0;
  std::uint32_t lru_head_ = none;        // the most recently used page
  std::uint32_t lru_tail_ = none;        // the least recently used page (a leaf)
  std::vector<std::uint32_t> state_free_;  // [states]: a stack of free state slots
  std::uint32_t state_free_count_ = 0;
  std::uint64_t states_offset_ = 0;      // pages × page bytes: where the state slots start in the store
  std::uint64_t state_evictions_ = 0;    // states taken from an older page for a newer one
  std::vector<std::uint32_t> chain_;     // [pages_per_prefix]: match's and insert's chain (scratch)
  std::uint32_t chain_length_ = 0;
  std::uint64_t evictions_ = 0;
};

template <class Rows>
PrefixCacheInsert PrefixCache::insert(std::span<const std::int32_t> tokens, Rows&& rows) noexcept {
  PrefixCacheInsert out;
  const std::uint32_t P = config_.page_tokens;
  const std::uint64_t evicted_before = evictions_;
  std::uint32_t pages = static_cast<std::uint32_t>(tokens.size() / P);
  if (pages > config_.pages_per_prefix) pages = config_.pages_per_prefix;
  std::uint64_t hash = root_;
  std::uint32_t parent = none;
  chain_length_ = 0;
  for (std::uint32_t p = 0; p < pages; ++p) {
    const std::int32_t* page_tokens = tokens.data() + std::size_t{p} * P;
    hash = prefix_chain_page(hash, page_tokens, P);
    std::uint32_t page = find(hash, parent, page_tokens, p);
    if (page != none) {
      ++out.shared;
      if (!records_[page].window_rows) {
        // Stored while a ring had lost some of its rows: this offer may still hold them.
        records_[page].window_rows = copy_rows(page, p, rows);
        out.window_rows_filled += records_[page].window_rows ? 1u : 0u;
        out.without_window_rows += records_[page].window_rows ? 0u : 1u;
      }
      lru_unlink(page);     // to the front now; the chain is re-touched leaf first at the end
      lru_push_front(page);
    } else {
      page = take_page(chain_length_);
      if (page == none) {
        out.skipped = pages - p;
        break;
      }
      Record& r = records_[page];
      r.hash = hash;
      r.depth = p;
      r.used = true;
      std::copy(page_tokens, page_tokens + P, tokens_of(page));
      r.window_rows = copy_rows(page, p, rows);
      out.without_window_rows += r.window_rows ? 0u : 1u;
      link(page, parent);
      table_insert(page);
      lru_push_front(page);
      ++used_;
      ++out.stored;
    }
    chain_[chain_length_++] = page;
    parent = page;
  }
  touch_chain(chain_length_);
  out.evicted = static_cast<std::uint32_t>(evictions_ - evicted_before);
  return out;
}

}  // namespace activekv::runtime
