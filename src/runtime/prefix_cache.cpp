// prefix_cache.cpp — see prefix_cache.hpp.
#include "runtime/prefix_cache.hpp"

#include <algorithm>
#include <bit>

#include "activekv/assert.hpp"
#include "runtime/prefix_index.hpp"

namespace activekv::runtime {

Result<PrefixCache> PrefixCache::create(const PrefixCacheConfig& config, std::span<std::byte> store) {
  if (config.pages == 0) return make_error(ErrorCode::invalid_argument, "prefix_cache", "a prefix cache holds at least one page");
  if (config.page_tokens == 0) return make_error(ErrorCode::invalid_argument, "--page-tokens", "page tokens must be positive");
  if (config.dense_layers == 0 || config.row_bytes == 0) {
    return make_error(ErrorCode::invalid_argument, "geometry", "a prefix cache needs dense layers and a row size");
  }
  if (config.pages_per_prefix == 0) {
    return make_error(ErrorCode::invalid_argument, "--max-context", "a prefix must hold at least one full page");
  }
  if ((config.states == 0) != (config.state_bytes == 0)) {
    return make_error(ErrorCode::invalid_argument, "prefix_cache", "state checkpoints need both a count and a size");
  }
  const std::uint64_t need = store_bytes(config);
  if (store.size() < need) {
    return make_error(ErrorCode::invalid_argument, "prefix_cache", "the prefix cache's store is smaller than its pages");
  }
  PrefixCache c;
  c.config_ = config;
  c.store_ = store;
  c.layer_bytes_ = std::uint64_t{config.page_tokens} * config.row_bytes;
  c.root_ = prefix_chain_root(config.model_identity);
  c.records_.assign(config.pages, Record{});
  c.tokens_.assign(std::size_t{config.pages} * config.page_tokens, 0);
  const std::uint64_t table_size = std::bit_ceil(std::uint64_t{config.pages} * 2);
  c.table_.assign(table_size, none);
  c.table_mask_ = table_size - 1;
  c.free_.resize(config.pages);
  // Popped from the back: page 0 first.
  for (std::uint32_t i = 0; i < config.pages; ++i) c.free_[i] = config.pages - 1 - i;
  c.free_count_ = config.pages;
  c.chain_.assign(config.pages_per_prefix, none);
  c.states_offset_ = std::uint64_t{config.pages} * page_bytes(config.page_tokens, config.row_bytes, config.dense_layers);
  c.state_free_.resize(config.states);
  for (std::uint32_t i = 0; i < config.states; ++i) c.state_free_[i] = config.states - 1 - i;
  c.state_free_count_ = config.states;
  return c;
}

std::uint32_t PrefixCache::find(std::uint64_t hash, std::uint32_t parent, const std::int32_t* tokens,
                                std::uint32_t depth) const noexcept {
  for (std::uint64_t i = hash & table_mask_;; i = (i + 1) & table_mask_) {
    const std::uint32_t page = table_[i];
    if (page == none) return none;
    const Record& r = records_[page];
    // A 64-bit collision can never adopt the wrong rows: the tokens, the parent and the depth must agree.
    if (r.hash == hash && r.parent == parent && r.depth == depth &&
        std::equal(tokens, tokens + config_.page_tokens, tokens_of(page))) {
      return page;
    }
  }
}

void PrefixCache::table_insert(std::uint32_t page) noexcept {
  std::uint64_t i = records_[page].hash & table_mask_;
  while (table_[i] != none) i = (i + 1) & table_mask_;
  table_[i] = page;
}

// Backward-shift deletion: no tombstones, so a lookup's probe ends at the first empty entry.
void PrefixCache::table_erase(std::uint32_t page) noexcept {
  std::uint64_t i = records_[page].hash & table_mask_;
  while (table_[i] != page) {
    AK_ASSERT(table_[i] != none, "prefix cache: a used page is missing from the hash table");
    i = (i + 1) & table_mask_;
  }
  std::uint64_t hole = i;
  for (std::uint64_t j = (i + 1) & table_mask_; table_[j] != none; j = (j + 1) & table_mask_) {
    const std::uint64_t home = records_[table_[j]].hash & table_mask_;
    // Entry j may move into the hole when its home is not in (hole, j] (cyclically).
    const bool home_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!home_between) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = none;
}

void PrefixCache::lru_unlink(std::uint32_t page) noexcept {
  Record& r = records_[page];
  if (r.prev != none) records_[r.prev].next = r.next; else lru_head_ = r.next;
  if (r.next != none) records_[r.next].prev = r.prev; else lru_tail_ = r.prev;
  r.prev = r.next = none;
}

void PrefixCache::lru_push_front(std::uint32_t page) noexcept {
  Record& r = records_[page];
  r.prev = none;
  r.next = lru_head_;
  if (lru_head_ != none) records_[lru_head_].prev = page; else lru_tail_ = page;
  lru_head_ = page;
}

void PrefixCache::touch_chain(std::uint32_t n) noexcept {
  AK_ASSERT(n <= chain_length_, "prefix cache: touch beyond the chain");
  for (std::uint32_t i = n; i-- > 0;) {
    lru_unlink(chain_[i]);
    lru_push_front(chain_[i]);
  }
}

std::uint32_t PrefixCache::match_partial(std::uint32_t n, std::span<const std::int32_t> tokens) const noexcept {
  AK_ASSERT(n >= 1 && n <= chain_length_, "prefix cache: a partial page below a chain it matched");
  AK_ASSERT(!tokens.empty() && tokens.size() < config_.page_tokens, "prefix cache: a partial page holds 1 to P - 1 tokens");
  const std::uint32_t parent = chain_[n - 1];
  if (records_[parent].children == 0) return none;
  for (std::uint32_t page = 0; page < config_.pages; ++page) {
    const Record& r = records_[page];
    if (!r.used || r.parent != parent || r.depth != n) continue;
    if (std::equal(tokens.begin(), tokens.end(), tokens_of(page))) return page;
  }
  return none;
}

void PrefixCache::touch_below_chain(std::uint32_t page, std::uint32_t n) noexcept {
  AK_ASSERT(n >= 1 && n <= chain_length_ && records_[page].used && records_[page].parent == chain_[n - 1],
            "prefix cache: the page touched lies right below the chain");
  lru_unlink(page);
  lru_push_front(page);
  touch_chain(n);
}

std::uint32_t PrefixCache::take_page(std::uint32_t protect) noexcept {
  if (free_count_ == 0) {
    // The chain being inserted sits at the front of the LRU list; anything else is behind it.
    if (used_ <= protect) return none;
    evict(lru_tail_);
  }
  AK_ASSERT(free_count_ > 0, "prefix cache: an eviction frees a page");
  return free_[--free_count_];
}

void PrefixCache::evict(std::uint32_t page) noexcept {
  Record& r = records_[page];
  AK_ASSERT(r.used, "prefix cache: evicting a free page");
  AK_ASSERT(r.children == 0, "prefix cache: the least recently used page is a leaf (lru invariant)");
  lru_unlink(page);
  table_erase(page);
  if (r.parent != none) {
    Record& parent = records_[r.parent];
    --parent.children;
    // A parent left without children becomes a leaf itself (its count stays 1); otherwise one
    // prefix fewer goes through it and every page above it.
    if (parent.children > 0) {
      for (std::uint32_t up = r.parent; up != none; up = records_[up].parent) --records_[up].leaves;
    }
  }
  if (r.state != none) state_free_[state_free_count_++] = r.state;
  r = Record{};
  --used_;
  free_[free_count_++] = page;
  ++evictions_;
}

void PrefixCache::link(std::uint32_t page, std::uint32_t parent) noexcept {
  Record& r = records_[page];
  r.parent = parent;
  r.children = 0;
  r.leaves = 1;
  if (parent == none) return;
  Record& p = records_[parent];
  // A leaf parent keeps its one prefix (now through this page); a branching one gains one.
  if (p.children++ > 0) {
    for (std::uint32_t up = parent; up != none; up = records_[up].parent) ++records_[up].leaves;
  }
}

std::uint32_t PrefixCache::match(std::span<const std::int32_t> prompt, std::uint32_t pages_max) noexcept {
  const std::uint32_t P = config_.page_tokens;
  std::uint32_t pages = static_cast<std::uint32_t>(std::min<std::size_t>(prompt.size() / P, pages_max));
  pages = std::min(pages, config_.pages_per_prefix);
  std::uint64_t hash = root_;
  std::uint32_t parent = none;
  chain_length_ = 0;
  for (std::uint32_t p = 0; p < pages; ++p) {
    const std::int32_t* page_tokens = prompt.data() + std::size_t{p} * P;
    hash = prefix_chain_page(hash, page_tokens, P);
    const std::uint32_t page = find(hash, parent, page_tokens, p);
    if (page == none) break;
    chain_[chain_length_++] = page;
    parent = page;
  }
  return chain_length_;
}

bool PrefixCache::put_state(std::uint32_t index, const std::byte* state) noexcept {
  AK_ASSERT(index < chain_length_, "prefix cache: a state for a page of the chain");
  Record& r = records_[chain_[index]];
  if (r.state != none) return true;
  if (state_free_count_ == 0) {
    // The least recently used page holding a state gives it up (its rows stay; a prompt adopts up
    // to a page with a state). The chain being stored is the most recent: its states are never taken.
    std::uint32_t from = lru_tail_;
    while (from != none && records_[from].state == none) from = records_[from].prev;
    if (from == none) return false;
    for (std::uint32_t i = 0; i < chain_length_; ++i) {
      if (chain_[i] == from) return false;
    }
    state_free_[state_free_count_++] = records_[from].state;
    records_[from].state = none;
    ++state_evictions_;
  }
  r.state = state_free_[--state_free_count_];
  std::copy(state, state + config_.state_bytes, store_.data() + states_offset_ + std::size_t{r.state} * config_.state_bytes);
  return true;
}

const char* PrefixCache::check() const noexcept {
  if (free_count_ + used_ != config_.pages) return "prefix cache: free + used != pages";
  std::uint32_t listed = 0;
  for (std::uint32_t page = lru_head_, prev = none; page != none; prev = page, page = records_[page].next) {
    if (!records_[page].used) return "prefix cache: a free page in the LRU list";
    if (records_[page].prev != prev) return "prefix cache: the LRU list's back links disagree";
    if (++listed > used_) return "prefix cache: the LRU list holds more pages than are used";
  }
  if (listed != used_) return "prefix cache: the LRU list does not hold every used page";
  std::vector<std::uint32_t> rank(config_.pages, none);  // check() is off the step path: it may allocate
  std::uint32_t position = 0;
  for (std::uint32_t page = lru_head_; page != none; page = records_[page].next) rank[page] = position++;
  std::vector<std::uint32_t> children(config_.pages, 0), leaves(config_.pages, 0);
  for (std::uint32_t page = 0; page < config_.pages; ++page) {
    const Record& r = records_[page];
    if (!r.used) continue;
    if (find(r.hash, r.parent, tokens_of(page), r.depth) != page) return "prefix cache: a used page the hash table cannot find";
    if (r.parent == none) {
      if (r.depth != 0) return "prefix cache: a first page deeper than 0";
      if (r.hash != prefix_chain_page(root_, tokens_of(page), config_.page_tokens)) return "prefix cache: a first page's hash";
      continue;
    }
    const Record& p = records_[r.parent];
    if (!p.used) return "prefix cache: a page whose parent is free";
    if (p.depth + 1 != r.depth) return "prefix cache: a page's depth is not its parent's + 1";
    if (r.hash != prefix_chain_page(p.hash, tokens_of(page), config_.page_tokens)) return "prefix cache: a broken chain";
    if (rank[r.parent] > rank[page]) return "prefix cache: a parent used earlier than its child (lru invariant)";
    ++children[r.parent];
  }
  // Leaves per subtree, deepest first (depth < pages_per_prefix).
  for (std::uint32_t page = 0; page < config_.pages; ++page) {
    if (records_[page].used && children[page] == 0) {
      for (std::uint32_t up = page; up != none; up = records_[up].parent) ++leaves[up];
    }
  }
  std::uint32_t table_used = 0;
  for (const std::uint32_t page : table_) table_used += page != none ? 1 : 0;
  if (table_used != used_) return "prefix cache: the hash table's entries != used pages";
  for (std::uint32_t page = 0; page < config_.pages; ++page) {
    if (!records_[page].used) continue;
    if (children[page] != records_[page].children) return "prefix cache: a page's child count";
    if (leaves[page] != records_[page].leaves) return "prefix cache: a page's prefix (leaf) count";
  }
  if (lru_tail_ != none && records_[lru_tail_].children != 0) return "prefix cache: the LRU tail is not a leaf";
  std::vector<std::uint8_t> owned(config_.states, 0);
  for (std::uint32_t i = 0; i < state_free_count_; ++i) ++owned[state_free_[i]];
  for (std::uint32_t page = 0; page < config_.pages; ++page) {
    if (records_[page].state == none) continue;
    if (!records_[page].used) return "prefix cache: a free page holds a state";
    ++owned[records_[page].state];
  }
  for (const std::uint8_t n : owned) {
    if (n != 1) return "prefix cache: a state slot is not exactly free or held by one page";
  }
  return nullptr;
}

}  // namespace activekv::runtime
