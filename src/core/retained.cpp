// retained.cpp — capturing, materialising, releasing and dropping retained pages.
#include "activekv/retained.hpp"

#include <algorithm>
#include <limits>

namespace activekv {

namespace {

Error zero_field(const char* field) {
  return make_error(ErrorCode::invalid_argument, field, "retained history needs it to be at least 1");
}

}  // namespace

Result<RetainedHistory> RetainedHistory::create(const RetainedConfig& config, Headroom& headroom) {
  if (config.slots == 0) return zero_field("--max-seqs");
  if (config.dense_layers == 0) return zero_field("--dense-layers");
  if (config.page_tokens == 0) return zero_field("--page-tokens");
  if (config.pages_per_layer_max == 0) return zero_field("--max-context");
  const std::uint64_t entries = static_cast<std::uint64_t>(config.slots) * config.dense_layers * config.pages_per_layer_max;
  if (entries > std::numeric_limits<std::uint32_t>::max()) {
    return make_error(ErrorCode::invalid_argument, "--page-tokens",
                      "retained history would track more than 4 billion pages: raise --page-tokens");
  }
  RetainedHistory retained;
  retained.config_ = config;
  retained.headroom_ = &headroom;
  retained.entries_.assign(entries, HeadroomPage{});
  retained.held_.assign(config.slots, 0);
  retained.revoked_.assign(headroom.pages_total(), Revocation{});
  retained.validate();
  return retained;
}

std::uint64_t RetainedHistory::capture(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical,
                                       std::uint32_t length_tokens) noexcept {
  AK_ASSERT(slot < config_.slots, "capture: slot out of range");
  AK_ASSERT(layer < config_.dense_layers, "capture: layer out of range");
  AK_ASSERT(logical < config_.pages_per_layer_max, "capture: logical page beyond max context");
  // Only full pages strictly below the tail are immutable; the tail page still receives rows.
  if (logical >= length_tokens / config_.page_tokens) return std::numeric_limits<std::uint64_t>::max();
  HeadroomPage& entry = entries_[key(slot, layer, logical)];
  if (entry.valid()) return headroom_->offset_of(entry);
  if (config_.pages_per_context_max != 0 && held_[slot] >= config_.pages_per_context_max) {
    ++counters_.capture_refusals;
    return std::numeric_limits<std::uint64_t>::max();
  }
  const HeadroomPage page = headroom_->lend(key(slot, layer, logical));
  if (!page.valid()) {
    ++counters_.capture_refusals;
    return std::numeric_limits<std::uint64_t>::max();
  }
  entry = page;
  ++held_[slot];
  ++total_;
  ++counters_.pages_captured;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "retained history consistent after capture");
  return headroom_->offset_of(page);
}

bool RetainedHistory::retained(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept {
  AK_ASSERT(slot < config_.slots, "retained: slot out of range");
  AK_ASSERT(layer < config_.dense_layers, "retained: layer out of range");
  AK_ASSERT(logical < config_.pages_per_layer_max, "retained: logical page beyond max context");
  return entries_[key(slot, layer, logical)].valid();
}

SplitCounts RetainedHistory::split(std::uint32_t slot, std::uint32_t layer, std::uint32_t token_begin,
                                   std::uint32_t token_end, std::span<StagedRun> out) noexcept {
  AK_ASSERT(slot < config_.slots, "split: slot out of range");
  AK_ASSERT(layer < config_.dense_layers, "split: layer out of range");
  AK_ASSERT(token_begin <= token_end, "split: range ends before it begins");
  AK_ASSERT(token_end <= static_cast<std::uint64_t>(config_.pages_per_layer_max) * config_.page_tokens,
            "split: range beyond max context");
  SplitCounts counts;
  const std::uint32_t P = config_.page_tokens;
  const HeadroomPage* layer_entries = entries_.data() + key(slot, layer, 0);
  StagedRun current{};
  bool open = false;
  std::uint32_t last_headroom_index = 0;
  const auto close = [&] {
    if (!open) return;
    if (counts.runs < out.size()) out[counts.runs++] = current;
    ++counts.runs_needed;
    if (current.retained) {
      ++counts.retained_runs;
      counts.retained_tokens += current.token_end - current.token_begin;
    } else {
      ++counts.host_runs;
      counts.host_tokens += current.token_end - current.token_begin;
    }
    open = false;
  };
  for (std::uint32_t t = token_begin; t < token_end;) {
    const std::uint32_t logical = t / P;
    const std::uint32_t piece_end = std::min(token_end, (logical + 1) * P);
    const HeadroomPage entry = layer_entries[logical];
    const bool is_retained = entry.valid();
    // A retained run continues only while headroom pages are adjacent (one d2d copy).
    const bool continues = open && current.retained == is_retained &&
                           (!is_retained || entry.index == last_headroom_index + 1);
    if (!continues) {
      close();
      current = StagedRun{t, piece_end, is_retained,
                          is_retained ? headroom_->offset_of(entry) + static_cast<std::uint64_t>(t - logical * P) *
                                                                          (headroom_->page_bytes() / P)
                                      : 0};
      open = true;
    } else {
      current.token_end = piece_end;
    }
    if (is_retained) {
      last_headroom_index = entry.index;
      ++counters_.pages_materialised;
    }
    t = piece_end;
  }
  close();
  return counts;
}

void RetainedHistory::drop(std::uint64_t entry_key) noexcept {
  const auto slot = static_cast<std::uint32_t>(entry_key / (static_cast<std::uint64_t>(config_.dense_layers) *
                                                            config_.pages_per_layer_max));
  AK_ASSERT(entries_[entry_key].valid(), "dropping a retained entry that holds no page");
  AK_ASSERT(held_[slot] > 0, "dropping a page from a context that holds none");
  entries_[entry_key] = HeadroomPage{};
  --held_[slot];
  --total_;
}

void RetainedHistory::release_context(std::uint32_t slot) noexcept {
  AK_ASSERT(slot < config_.slots, "release_context: slot out of range");
  if (held_[slot] == 0) return;
  const std::uint64_t first = key(slot, 0, 0);
  const std::uint64_t last = key(slot + 1, 0, 0);
  for (std::uint64_t k = first; k < last && held_[slot] > 0; ++k) {
    if (!entries_[k].valid()) continue;
    headroom_->give_back(entries_[k]);
    drop(k);
    ++counters_.pages_released;
  }
  AK_ASSERT(held_[slot] == 0, "a finished context keeps no retained page");
  AK_EXPENSIVE_ASSERT(check() == nullptr, "retained history consistent after release_context");
}

std::uint32_t RetainedHistory::take_back_headroom(std::uint32_t pages) noexcept {
  const std::uint32_t bounded = std::min<std::uint32_t>(pages, static_cast<std::uint32_t>(revoked_.size()));
  std::uint32_t revoked = 0;
  const std::uint32_t taken = headroom_->take_back(bounded, revoked_, &revoked);
  for (std::uint32_t i = 0; i < revoked; ++i) {
    const std::uint64_t entry_key = revoked_[i].owner;
    AK_ASSERT(entry_key < entries_.size(), "a revoked headroom page names no retained entry");
    AK_ASSERT(entries_[entry_key] == revoked_[i].page, "a revoked headroom page is not the entry's page");
    drop(entry_key);
    ++counters_.pages_dropped;
  }
  AK_EXPENSIVE_ASSERT(check() == nullptr, "retained history consistent after take_back_headroom");
  return taken;
}

const char* RetainedHistory::check() const noexcept {
  if (headroom_ == nullptr) return "retained history has no headroom";
  if (const char* broken = headroom_->check()) return broken;
  std::uint64_t total = 0;
  const std::uint64_t per_slot = static_cast<std::uint64_t>(config_.dense_layers) * config_.pages_per_layer_max;
  for (std::uint32_t slot = 0; slot < config_.slots; ++slot) {
    std::uint64_t held = 0;
    for (std::uint64_t k = slot * per_slot; k < (slot + 1) * per_slot; ++k) {
      if (!entries_[k].valid()) continue;
      ++held;
      if (!headroom_->current(entries_[k])) return "a retained entry names a headroom page that is not lent to it";
      if (headroom_->owner_of(entries_[k]) != k) return "a retained entry's headroom page has another owner";
    }
    if (held != held_[slot]) return "a context's retained page count disagrees with its entries";
    if (config_.pages_per_context_max != 0 && held > config_.pages_per_context_max) return "a context holds more retained pages than its cap";
    total += held;
  }
  if (total != total_) return "retained page total disagrees with the entries";
  if (total != headroom_->pages_lent()) return "headroom lends pages that no retained entry holds";
  return nullptr;
}

void RetainedHistory::validate() const noexcept {
  const char* broken = check();
  AK_ASSERT(broken == nullptr, broken);
}

}  // namespace activekv
