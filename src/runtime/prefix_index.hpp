// prefix_index.hpp — which host histories hold which token prefixes, by chained page hashes.
//
// When a context finishes, its host history is not emptied: its full pages
// stay, immutable, as a retained prefix, and a later prompt that starts with
// the same tokens adopts them instead of prefilling them again (DESIGN.md
// "Spending what it frees"; docs/PREFIX.md). This index is the lookup:
//
//   hash(page 0) = mix(root, tokens of page 0)      root = mix(model identity)
//   hash(page p) = mix(hash(page p − 1), tokens of page p)
//
// so a page's hash names the page AND everything before it (vLLM's prefix
// caching and LMCache's chunk keys do the same). A prompt is hashed page by
// page and compared, per history, with that history's page hashes: the match is
// the longest run of equal leading hashes, then confirmed token by token (a
// 64-bit collision cannot adopt the wrong rows). Only full pages count; the
// caller limits the match so at least one prompt token is left to prefill
// (its logits are needed), so the last partial page is always recomputed.
//
// Per history (slot): the retained page count, the page hashes, the tokens of
// those pages, and a recency stamp. Everything is sized in create(); retain(),
// truncate(), drop() and longest() do not allocate.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "activekv/result.hpp"

namespace activekv::runtime {

// The chain itself, shared with the KV tier (src/tier/), whose block keys are
// the hash of a block's last page: prefix_chain_root(model identity), then
// prefix_chain_page(parent, page) for each page of page_tokens tokens.
std::uint64_t prefix_chain_root(std::uint64_t model_identity) noexcept;
std::uint64_t prefix_chain_page(std::uint64_t parent, const std::int32_t* page, std::uint32_t page_tokens) noexcept;

struct PrefixIndexConfig {
  std::uint32_t slots = 0;               // host histories
  std::uint32_t page_tokens = 0;         // P
  std::uint32_t pages_per_history = 0;   // max_context_tokens / P (full pages a history can hold)
  std::uint64_t model_identity = 0;      // seeds every chain: histories of another model never match
};

struct PrefixMatch {
  std::uint32_t slot = UINT32_MAX;       // the history holding the prefix; UINT32_MAX: none
  std::uint32_t pages = 0;               // full pages matched
};

class PrefixIndex {
 public:
  // Refuses a zero field, naming it.
  static Result<PrefixIndex> create(const PrefixIndexConfig& config);

  // `slot` now holds the full pages of `tokens` (tokens.size() / P of them, at most
  // pages_per_history), replacing what it held; `stamp` orders recency (> 0).
  void retain(std::uint32_t slot, std::span<const std::int32_t> tokens, std::uint64_t stamp) noexcept;
  // Keeps only the first `pages` (a context adopted the history in place and will rewrite the rest).
  void truncate(std::uint32_t slot, std::uint32_t pages) noexcept;
  void drop(std::uint32_t slot) noexcept;
  void touch(std::uint32_t slot, std::uint64_t stamp) noexcept { stamp_[slot] = stamp; }

  // The history with the longest prefix of `prompt` in full pages, at most `pages_max`
  // (ties: the most recent). pages == 0 when nothing matches.
  PrefixMatch longest(std::span<const std::int32_t> prompt, std::uint32_t pages_max) noexcept;

  std::uint32_t pages(std::uint32_t slot) const noexcept { return pages_[slot]; }
  std::uint64_t stamp(std::uint32_t slot) const noexcept { return stamp_[slot]; }
  std::uint32_t histories_held() const noexcept { return held_; }
  const PrefixIndexConfig& config() const noexcept { return config_; }

  // Each slot's hashes are the chain of its tokens and the held count agrees; nullptr when sound.
  const char* check() const noexcept;

 private:
  PrefixIndex() = default;
  std::uint64_t chain(std::uint64_t parent, const std::int32_t* page) const noexcept;

  PrefixIndexConfig config_;
  std::uint64_t root_ = 0;
  std::vector<std::uint32_t> pages_;     // per slot: retained full pages (0: holds nothing)
  std::vector<std::uint64_t> stamp_;     // per slot
  std::vector<std::uint64_t> hashes_;    // slot × pages_per_history
  std::vector<std::int32_t> tokens_;     // slot × pages_per_history × P
  std::vector<std::uint64_t> query_;     // pages_per_history: the prompt's chain (scratch)
  std::uint32_t held_ = 0;               // slots with pages > 0
};

}  // namespace activekv::runtime
