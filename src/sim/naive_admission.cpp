// naive_admission.cpp — admit while pages are free; evict the newest and recompute on overflow.
#include "sim/naive_admission.hpp"

#include "activekv/assert.hpp"

namespace activekv::sim {

NaiveAdmission::NaiveAdmission(const NaiveSettings& settings) : settings_(settings) {
  AK_ASSERT(settings.page_tokens > 0, "naive admission needs a page size");
  AK_ASSERT(settings.max_seqs > 0, "naive admission needs max_seqs ≥ 1");
  AK_ASSERT(settings.output_tokens > 0, "naive admission needs requests that produce tokens");
  // A request in flight is running or was evicted from running; fresh requests are admitted
  // only when no evicted one waits, so at most max_seqs are in flight at once.
  table_.assign(settings.max_seqs, Request{});
  free_entries_.reserve(settings.max_seqs);
  for (std::uint32_t i = settings.max_seqs; i > 0; --i) free_entries_.push_back(i - 1);
  running_.assign(settings.max_seqs, 0);
  waiting_.assign(settings.max_seqs, 0);
}

void NaiveAdmission::admit(NaiveStep& out) noexcept {
  while (running_count_ < settings_.max_seqs) {
    const bool from_queue = waiting_count_ > 0;
    std::uint32_t generated = 0;
    if (from_queue) generated = table_[waiting_[waiting_head_]].generated;
    const std::uint64_t need = kv_pages(settings_.prompt_tokens + generated) + settings_.recurrent_pages;
    if (need > pages_free()) return;  // FIFO: the head waits, so everything behind it waits
    std::uint32_t index = 0;
    if (from_queue) {
      index = waiting_[waiting_head_];
      waiting_head_ = (waiting_head_ + 1) % settings_.max_seqs;
      --waiting_count_;
      out.recompute_tokens += settings_.prompt_tokens + generated;
    } else {
      AK_ASSERT(!free_entries_.empty(), "more requests in flight than max_seqs");
      index = free_entries_.back();
      free_entries_.pop_back();
      table_[index] = Request{};
      out.prefill_tokens += settings_.prompt_tokens;
    }
    Request& r = table_[index];
    r.pages = need;
    pages_used_ += need;
    running_[running_count_++] = index;
    ++out.admitted;
  }
}

void NaiveAdmission::evict_newest(NaiveStep& out) noexcept {
  AK_ASSERT(running_count_ > 0, "eviction with nothing running");
  const std::uint32_t index = running_[--running_count_];
  Request& r = table_[index];
  pages_used_ -= r.pages;
  r.pages = 0;
  // Back to the head of the queue: it is re-admitted first, and recomputes prompt + generated.
  waiting_head_ = (waiting_head_ + settings_.max_seqs - 1) % settings_.max_seqs;
  waiting_[waiting_head_] = index;
  ++waiting_count_;
  ++out.evicted;
}

NaiveStep NaiveAdmission::step() noexcept {
  NaiveStep out;
  admit(out);
  const std::uint32_t admitted_now = out.admitted;
  // Requests admitted this step spend it in prefill ([decoders_end, running_count_));
  // the others decode, oldest first.
  std::uint32_t decoders_end = running_count_ - admitted_now;
  for (std::uint32_t i = 0; i < decoders_end;) {
    Request& r = table_[running_[i]];
    const std::uint64_t length = settings_.prompt_tokens + r.generated;
    const bool needs_page = kv_pages(length + 1) > kv_pages(length);
    if (needs_page && pages_free() == 0) {
      const bool self = (i == running_count_ - 1);
      evict_newest(out);
      if (running_count_ < decoders_end) decoders_end = running_count_;
      if (self) break;
      AK_ASSERT(pages_free() > 0, "an eviction frees at least one page");
    }
    if (needs_page) {
      ++r.pages;
      ++pages_used_;
    }
    ++r.generated;
    ++out.decoded_tokens;
    ++i;
  }
  // Finished requests leave; order of the rest is kept (admission order).
  std::uint32_t kept = 0;
  for (std::uint32_t k = 0; k < running_count_; ++k) {
    const std::uint32_t index = running_[k];
    Request& r = table_[index];
    if (r.generated >= settings_.output_tokens) {
      pages_used_ -= r.pages;
      r.pages = 0;
      free_entries_.push_back(index);
      ++out.finished;
      continue;
    }
    running_[kept++] = index;
  }
  running_count_ = kept;
  out.running = running_count_;
  out.pages_used = pages_used_;
  for (std::uint32_t k = 0; k < running_count_; ++k) {
    out.kv_tokens_resident += settings_.prompt_tokens + table_[running_[k]].generated;
  }
  AK_ASSERT(pages_used_ <= settings_.capacity_pages, "naive admission used more pages than the device has");
  ++totals_.steps;
  totals_.admitted += out.admitted;
  totals_.evicted += out.evicted;
  totals_.finished += out.finished;
  totals_.decoded_tokens += out.decoded_tokens;
  totals_.prefill_tokens += out.prefill_tokens;
  totals_.recompute_tokens += out.recompute_tokens;
  return out;
}

}  // namespace activekv::sim
