// fake_engine.cpp — the deterministic test model (see fake_engine.hpp).
#include "serve/fake_engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace activekv::serve {

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr std::int32_t vocab = 256;  // byte tokens

}  // namespace

FakeEngine::FakeEngine(const FakeEngineConfig& config) : config_(config) {
  AK_ASSERT(config.histories > 0, "FakeEngine: at least one history");
  AK_ASSERT(config.target_pages <= config.burst_pages, "FakeEngine: target must not exceed burst");
  plan_.max_context_tokens = config.max_context_tokens;
  plan_.histories = config.histories + config.retained_histories;
  plan_.max_seqs = config.max_seqs;
  plan_.concurrency = std::min(config.max_seqs, config.histories);
  plan_.retained_histories = config.retained_histories;
  plan_.pool_pages = config.pool_pages;
  plan_.page_tokens = config.page_tokens;
  plan_.host_pool_bytes = std::uint64_t{config.histories + config.retained_histories} * config.dense_layers *
                          config.max_context_tokens * config.row_bytes;
  plan_.device_arena_bytes = std::uint64_t{config.pool_pages} * config.page_tokens * config.row_bytes;
  plan_.eos_token = config.eos_token;
  slots_.resize(std::size_t{config.histories} + config.retained_histories);
  for (Slot& s : slots_) {
    s.fed.reserve(config.max_context_tokens);
    s.page_hash.reserve(config.max_context_tokens / config.page_tokens + 1);
  }
  order_.reserve(slots_.size());
}

std::string FakeEngine::plan_text() const {
  return fmt::format("fake engine: {} histories, max_seqs {} -> concurrency {}; {} pool pages of {} tokens; floor {} pages\n",
                     plan_.histories, plan_.max_seqs, plan_.concurrency, plan_.pool_pages, plan_.page_tokens, floor_pages());
}

std::string FakeEngine::plan_json() const {
  return fmt::format(
      "{{\"engine\": \"fake\", \"histories\": {}, \"max_seqs\": {}, \"concurrency\": {}, \"pool_pages\": {}, "
      "\"page_tokens\": {}, \"floor_pages\": {}, \"max_context_tokens\": {}}}",
      plan_.histories, plan_.max_seqs, plan_.concurrency, plan_.pool_pages, plan_.page_tokens, floor_pages(),
      plan_.max_context_tokens);
}

Result<std::vector<std::int32_t>> FakeEngine::encode(std::string_view text) {
  std::vector<std::int32_t> tokens;
  tokens.reserve(text.size());
  for (const char c : text) tokens.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(c)));
  return tokens;
}

std::string FakeEngine::decode(std::span<const std::int32_t> tokens) {
  std::string text;
  for (const std::int32_t t : tokens) text.push_back(static_cast<char>(t));
  return text;
}

FakeEngine::Slot& FakeEngine::slot(ContextHandle context) {
  AK_ASSERT(context.index < slots_.size(), "FakeEngine: context index out of range");
  Slot& s = slots_[context.index];
  AK_ASSERT(s.live, "FakeEngine: the context is not live");
  AK_ASSERT(s.generation == context.generation, "FakeEngine: stale context handle");
  return s;
}

const FakeEngine::Slot& FakeEngine::slot(ContextHandle context) const {
  return const_cast<FakeEngine*>(this)->slot(context);
}

std::uint32_t FakeEngine::needed_pages(const Slot& s) const noexcept {
  const std::uint32_t per_layer = std::max(1u, (s.tokens_fed + config_.page_tokens - 1) / config_.page_tokens);
  return per_layer * config_.dense_layers;
}

std::uint32_t FakeEngine::longest_prefix(std::span<const std::int32_t> prompt, std::uint32_t pages_max,
                                         std::uint32_t& pages) const {
  const std::uint32_t P = config_.page_tokens;
  std::uint32_t best = UINT32_MAX;
  pages = 0;
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    std::uint32_t n = 0;
    const std::uint32_t limit = std::min(s.retained_pages, pages_max);
    while (n < limit && std::equal(prompt.begin() + std::size_t{n} * P, prompt.begin() + std::size_t{n + 1} * P,
                                   s.fed.begin() + std::size_t{n} * P)) {
      ++n;
    }
    if (n > pages || (n == pages && n > 0 && s.retained_stamp > slots_[best].retained_stamp)) {
      best = i;
      pages = n;
    }
  }
  return best;
}

std::uint32_t FakeEngine::free_slot_for(std::uint32_t preferred) const {
  if (preferred != UINT32_MAX && !slots_[preferred].live) return preferred;
  std::uint32_t lru = UINT32_MAX;
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].live) continue;
    if (slots_[i].retained_pages == 0) return i;
    if (lru == UINT32_MAX || slots_[i].retained_stamp < slots_[lru].retained_stamp) lru = i;
  }
  return lru;
}

void FakeEngine::drop_retained(Slot& s) {
  if (s.retained_pages == 0) return;
  s.retained_pages = 0;
  s.retained_stamp = 0;
  ++counters_.retained_dropped;
  --counters_.retained_histories;
}

Admission FakeEngine::admit(std::span<const std::int32_t> prompt, std::uint32_t tokens_max) {
  AK_ASSERT(tokens_max <= config_.max_context_tokens, "FakeEngine::admit: longer than max context");
  if (config_.tier_pending_admits > 0) {  // as the real engine with a KV tier: its lookup runs first
    if (prompt.data() != tier_prompt_) {
      tier_prompt_ = prompt.data();
      tier_left_ = config_.tier_pending_admits;
    }
    if (tier_left_ > 0) {
      --tier_left_;
      return {AdmitOutcome::tier_pending, {}, 0};
    }
  }
  if (live_ >= plan_.concurrency) return {AdmitOutcome::no_free_history, {}, 0};
  if (std::uint64_t{live_ + 1} * floor_pages() > config_.pool_pages) return {AdmitOutcome::floor_does_not_fit, {}, 0};
  const std::uint32_t P = config_.page_tokens;
  std::uint32_t pages = 0;
  std::uint32_t source = UINT32_MAX;
  if (config_.prefix_reuse && prompt.size() > P) {
    source = longest_prefix(prompt, static_cast<std::uint32_t>((prompt.size() - 1) / P), pages);
  }
  // In place only when the prompt takes the source's whole retained prefix (the runtime's rule).
  const bool whole = pages > 0 && pages == slots_[source].retained_pages;
  const std::uint32_t index = free_slot_for(whole ? source : UINT32_MAX);
  AK_ASSERT(index != UINT32_MAX, "FakeEngine::admit: below concurrency a history is free");
  Slot& s = slots_[index];
  s.live = true;
  ++s.generation;
  s.hash = mix(0x5eed);
  s.tokens_fed = 0;
  if (pages > 0 && index == source) {
    // In place: the rest is rewritten; a longer prefix given up counts as dropped (the runtime's rule).
    if (s.retained_pages > pages) ++counters_.retained_dropped;
    s.retained_pages = pages;
  } else {
    drop_retained(s);
    s.fed.clear();
    s.page_hash.clear();
    if (pages > 0) {  // copy on adopt from the history that holds the prefix (running, or retained and longer)
      const Slot& from = slots_[source];
      s.fed.assign(from.fed.begin(), from.fed.begin() + std::size_t{pages} * P);
      s.page_hash.assign(from.page_hash.begin(), from.page_hash.begin() + pages);
    }
  }
  const std::uint32_t reused = pages * P;
  if (pages > 0) {
    s.fed.resize(reused);
    s.page_hash.resize(pages);
    s.hash = s.page_hash[pages - 1];
    s.tokens_fed = reused;
    slots_[source].retained_stamp = ++retain_stamp_;
    ++counters_.prefix_adoptions;
    counters_.prefix_reused_tokens += reused;
  }
  s.tokens_max = tokens_max;
  s.held = floor_pages();
  s.admitted_order = admissions_++;
  order_.push_back(index);
  ++live_;
  counters_.host_bytes_in_use = std::uint64_t{live_} * plan_.host_pool_bytes / slots_.size();
  return {AdmitOutcome::admitted, ContextHandle{index, s.generation}, reused};
}

void FakeEngine::release(ContextHandle context) {
  Slot& s = slot(context);
  s.live = false;
  s.held = 0;
  order_.erase(std::find(order_.begin(), order_.end(), context.index));  // no allocation
  --live_;
  counters_.host_bytes_in_use = std::uint64_t{live_} * plan_.host_pool_bytes / slots_.size();
}

void FakeEngine::finish(ContextHandle context) {
  Slot& s = slot(context);
  release(context);
  ++finishes_;
  if (!config_.prefix_reuse) return;
  const std::uint32_t pages = s.tokens_fed / config_.page_tokens;
  if (s.retained_pages == 0 && pages > 0) ++counters_.retained_histories;
  if (s.retained_pages > 0 && pages == 0) --counters_.retained_histories;
  s.retained_pages = pages;
  s.retained_stamp = pages > 0 ? ++retain_stamp_ : 0;
  counters_.retained_kept += pages > 0 ? 1 : 0;
}

void FakeEngine::cancel(ContextHandle context) {
  Slot& s = slot(context);
  release(context);
  ++cancels_;
  drop_retained(s);
}

void FakeEngine::rebalance() {
  // Floors first (always granted), then targets, then bursts from what is left, in admission order.
  std::uint32_t free = config_.pool_pages - live_ * floor_pages();
  std::uint64_t held_total = 0;
  for (const std::uint32_t index : order_) {
    Slot& s = slots_[index];
    s.held_before = s.held;
    const std::uint32_t want = std::max(floor_pages(), std::min(needed_pages(s), config_.target_pages));
    const std::uint32_t more = std::min(want - floor_pages(), free);
    s.held = floor_pages() + more;
    free -= more;
  }
  for (const std::uint32_t index : order_) {
    Slot& s = slots_[index];
    const std::uint32_t need = std::min(needed_pages(s), config_.burst_pages);
    if (need <= s.held) continue;
    const std::uint32_t more = std::min(need - s.held, free);
    s.held += more;
    free -= more;
  }
  for (const std::uint32_t index : order_) {
    const Slot& s = slots_[index];
    held_total += s.held;
    if (s.held < s.held_before) {
      counters_.reclaimed_pages += s.held_before - s.held;
      ++counters_.reclaim_steps;
    }
  }
  counters_.device_bytes_in_use = held_total * config_.page_tokens * config_.row_bytes;
}

Status FakeEngine::step(std::span<const BatchEntry> batch, std::span<std::int32_t> tokens_out) {
  AK_ASSERT(tokens_out.size() >= batch.size(), "FakeEngine::step: tokens_out shorter than the batch");
  if (config_.wall_sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(config_.wall_sleep_s));
  std::uint64_t tokens = 0;
  for (std::size_t e = 0; e < batch.size(); ++e) {
    Slot& s = slot(batch[e].context);
    for (std::size_t j = e + 1; j < batch.size(); ++j) {
      AK_ASSERT(!(batch[j].context == batch[e].context), "FakeEngine::step: a context appears twice in one batch");
    }
    AK_ASSERT(!batch[e].tokens.empty(), "FakeEngine::step: an entry feeds no tokens");
    AK_ASSERT(s.tokens_fed + batch[e].tokens.size() <= s.tokens_max, "FakeEngine::step: context grows past its admission");
    for (const std::int32_t t : batch[e].tokens) {
      s.hash = mix(s.hash ^ static_cast<std::uint64_t>(t));
      s.fed.push_back(t);  // capacity reserved: no allocation
      if (++s.tokens_fed % config_.page_tokens == 0) s.page_hash.push_back(s.hash);
    }
    tokens += batch[e].tokens.size();
    if (batch[e].want_token) tokens_out[e] = static_cast<std::int32_t>(mix(s.hash) % vocab);
  }
  rebalance();
  for (const std::uint32_t index : order_) {
    const Slot& s = slots_[index];
    const std::uint32_t staged = needed_pages(s) - std::min(needed_pages(s), s.held);
    counters_.page_reads_resident += std::min(needed_pages(s), s.held);
    counters_.page_reads_staged += staged;
    counters_.bytes_h2d += std::uint64_t{staged} * config_.page_tokens * config_.row_bytes;
    counters_.copies_h2d += staged > 0 ? config_.dense_layers : 0;
  }
  counters_.bytes_d2h += tokens * config_.dense_layers * config_.row_bytes;
  counters_.copies_d2h += batch.size() * config_.dense_layers;
  const double cost_s = config_.step_cost_s + config_.token_cost_s * static_cast<double>(tokens);
  counters_.step_ns += static_cast<std::uint64_t>(cost_s * 1e9);
  counters_.planning_ns += static_cast<std::uint64_t>(config_.step_cost_s * 0.05 * 1e9);
  if (config_.clock != nullptr) config_.clock->advance(cost_s);
  return {};
}

ContextPages FakeEngine::pages(ContextHandle context) const {
  const Slot& s = slot(context);
  return ContextPages{s.held, floor_pages(), config_.target_pages, config_.burst_pages};
}

bool FakeEngine::all_returned() const { return live_ == 0 && order_.empty(); }

}  // namespace activekv::serve
