// prefix_index.cpp — see prefix_index.hpp.
#include "runtime/prefix_index.hpp"

#include <algorithm>
#include <cstring>

#include "activekv/assert.hpp"

namespace activekv::runtime {
namespace {

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::uint64_t prefix_chain_root(std::uint64_t model_identity) noexcept {
  return mix(model_identity ^ 0x70726566697821ull);
}

std::uint64_t prefix_chain_page(std::uint64_t parent, const std::int32_t* page, std::uint32_t page_tokens) noexcept {
  std::uint64_t h = mix(parent);
  for (std::uint32_t i = 0; i < page_tokens; ++i) h = mix(h ^ static_cast<std::uint32_t>(page[i]));
  return h;
}

Result<PrefixIndex> PrefixIndex::create(const PrefixIndexConfig& config) {
  if (config.slots == 0) return make_error(ErrorCode::invalid_argument, "slots", "a prefix index needs at least one history");
  if (config.page_tokens == 0) return make_error(ErrorCode::invalid_argument, "--page-tokens", "page tokens must be positive");
  if (config.pages_per_history == 0) {
    return make_error(ErrorCode::invalid_argument, "--max-context", "a history must hold at least one full page");
  }
  PrefixIndex index;
  index.config_ = config;
  index.root_ = prefix_chain_root(config.model_identity);
  index.pages_.assign(config.slots, 0);
  index.stamp_.assign(config.slots, 0);
  index.hashes_.assign(std::size_t{config.slots} * config.pages_per_history, 0);
  index.tokens_.assign(std::size_t{config.slots} * config.pages_per_history * config.page_tokens, 0);
  index.query_.assign(config.pages_per_history, 0);
  return index;
}

std::uint64_t PrefixIndex::chain(std::uint64_t parent, const std::int32_t* page) const noexcept {
  return prefix_chain_page(parent, page, config_.page_tokens);
}

void PrefixIndex::retain(std::uint32_t slot, std::span<const std::int32_t> tokens, std::uint64_t stamp) noexcept {
  AK_ASSERT(slot < config_.slots, "prefix index: retain of a slot outside the index");
  AK_ASSERT(stamp > 0, "prefix index: a retained history has a recency stamp");
  const std::uint32_t P = config_.page_tokens;
  const std::uint32_t pages = static_cast<std::uint32_t>(
      std::min<std::size_t>(tokens.size() / P, config_.pages_per_history));
  drop(slot);
  if (pages == 0) return;
  std::int32_t* stored = tokens_.data() + std::size_t{slot} * config_.pages_per_history * P;
  std::memcpy(stored, tokens.data(), std::size_t{pages} * P * sizeof(std::int32_t));
  std::uint64_t* h = hashes_.data() + std::size_t{slot} * config_.pages_per_history;
  std::uint64_t parent = root_;
  for (std::uint32_t p = 0; p < pages; ++p) parent = h[p] = chain(parent, stored + std::size_t{p} * P);
  pages_[slot] = pages;
  stamp_[slot] = stamp;
  ++held_;
}

void PrefixIndex::truncate(std::uint32_t slot, std::uint32_t pages) noexcept {
  AK_ASSERT(slot < config_.slots, "prefix index: truncate of a slot outside the index");
  if (pages >= pages_[slot]) return;
  if (pages == 0) {
    drop(slot);
    return;
  }
  pages_[slot] = pages;
}

void PrefixIndex::drop(std::uint32_t slot) noexcept {
  AK_ASSERT(slot < config_.slots, "prefix index: drop of a slot outside the index");
  if (pages_[slot] == 0) return;
  pages_[slot] = 0;
  stamp_[slot] = 0;
  --held_;
}

PrefixMatch PrefixIndex::longest(std::span<const std::int32_t> prompt, std::uint32_t pages_max) noexcept {
  const std::uint32_t P = config_.page_tokens;
  const std::uint32_t query_pages = static_cast<std::uint32_t>(
      std::min<std::size_t>({prompt.size() / P, std::size_t{pages_max}, std::size_t{config_.pages_per_history}}));
  PrefixMatch best;
  if (query_pages == 0 || held_ == 0) return best;
  std::uint64_t parent = root_;
  for (std::uint32_t p = 0; p < query_pages; ++p) parent = query_[p] = chain(parent, prompt.data() + std::size_t{p} * P);
  for (std::uint32_t slot = 0; slot < config_.slots; ++slot) {
    const std::uint32_t n = std::min(pages_[slot], query_pages);
    const std::uint64_t* h = hashes_.data() + std::size_t{slot} * config_.pages_per_history;
    std::uint32_t equal = 0;
    while (equal < n && h[equal] == query_[equal]) ++equal;
    // Confirm by the tokens themselves: a hash names the bytes, the bytes decide.
    const std::int32_t* stored = tokens_.data() + std::size_t{slot} * config_.pages_per_history * P;
    while (equal > 0 && std::memcmp(stored, prompt.data(), std::size_t{equal} * P * sizeof(std::int32_t)) != 0) --equal;
    if (equal == 0) continue;
    if (equal > best.pages || (equal == best.pages && stamp_[slot] > stamp_[best.slot])) best = PrefixMatch{slot, equal};
  }
  return best;
}

const char* PrefixIndex::check() const noexcept {
  std::uint32_t held = 0;
  for (std::uint32_t slot = 0; slot < config_.slots; ++slot) {
    if (pages_[slot] > config_.pages_per_history) return "prefix index: a history holds more pages than fit";
    if (pages_[slot] == 0) continue;
    ++held;
    if (stamp_[slot] == 0) return "prefix index: a retained history without a recency stamp";
    const std::int32_t* stored = tokens_.data() + std::size_t{slot} * config_.pages_per_history * config_.page_tokens;
    const std::uint64_t* h = hashes_.data() + std::size_t{slot} * config_.pages_per_history;
    std::uint64_t parent = root_;
    for (std::uint32_t p = 0; p < pages_[slot]; ++p) {
      parent = chain(parent, stored + std::size_t{p} * config_.page_tokens);
      if (h[p] != parent) return "prefix index: a page hash is not the chain of its tokens";
    }
  }
  if (held != held_) return "prefix index: the held count disagrees with the slots";
  return nullptr;
}

}  // namespace activekv::runtime
