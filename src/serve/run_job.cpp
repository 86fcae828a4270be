// run_job.cpp — the run loop around the scheduler (see run_job.hpp).
#include "serve/run_job.hpp"

#include <fmt/format.h>

#include <cmath>

#include <algorithm>

#include "testing/alloc_counter.hpp"

namespace activekv::serve {

std::string admission_text(const EnginePlan& plan, const RunConfig& config) {
  const std::uint32_t cap = std::min(config.max_seqs, plan.concurrency);
  if (plan.retained_histories > 0) {
    return fmt::format("concurrency {}: max_seqs {}, the host pool holds {} histories, {} of them kept only for retained "
                       "prefixes (retained_histories)\n",
                       cap, config.max_seqs, plan.histories, plan.retained_histories);
  }
  if (plan.histories < config.max_seqs && plan.histories < plan.max_seqs) {
    return fmt::format(
        "concurrency {}: the host pool holds {} histories, below max_seqs {}; further requests queue "
        "(raise host_pool to run more at once)\n",
        cap, plan.histories, config.max_seqs);
  }
  return fmt::format("concurrency {}: max_seqs {}, the host pool holds {} histories\n", cap, config.max_seqs, plan.histories);
}

namespace {

// Decoded text may end inside a multi-byte character (or, from the fake engine,
// be arbitrary bytes); JSON needs valid UTF-8, so invalid bytes become U+FFFD.
std::string valid_utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (ok) {
      out.append(text, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

void print_progress(const Scheduler& s, double now_s, const RunJobOptions& options, bool final_line) {
  const double rate = now_s > 0 ? static_cast<double>(s.tokens_out()) / now_s : 0.0;
  fmt::print(options.out, "{}[{:7.1f} s] requests {}/{} done, {} running, {} queued; {} tokens in, {} out; {:.1f} output tokens/s{}",
             options.terminal ? "\r" : "", now_s, s.ended(), s.requests().size(), s.running(), s.queued(), s.tokens_in(),
             s.tokens_out(), rate, options.terminal && !final_line ? "   " : "\n");
  std::fflush(options.out);
}

}  // namespace

Result<RunJobResult> run_job(StepEngine& engine, Clock& clock, const std::vector<TraceRequest>& trace,
                             const RunConfig& config, ReportInputs inputs, const RunJobOptions& options) {
  fmt::print(options.out, "{}", engine.plan_text());
  fmt::print(options.out, "{}", admission_text(engine.plan(), config));
  // Arrival times are scaled in doubles: a product that overflows to infinity is refused here, naming the line.
  const std::uint32_t vocab = engine.plan().vocab;
  for (const TraceRequest& t : trace) {
    for (const std::int32_t id : t.prompt_tokens) {
      if (vocab != 0 && static_cast<std::uint32_t>(id) >= vocab) {
        return make_error(ErrorCode::invalid_argument, fmt::format("{}:{}: prompt_tokens", inputs.trace, t.line),
                          fmt::format("token id {} is outside the model's vocabulary of {} tokens", id, vocab));
      }
    }
    if (!std::isfinite(t.arrival_s * config.arrival_scale)) {
      return make_error(ErrorCode::invalid_argument, fmt::format("{}:{}: arrival_s", inputs.trace, t.line),
                        fmt::format("arrival {} s × arrival scale {} is past any representable time: lower arrival_s "
                                    "or --arrival-scale", t.arrival_s, config.arrival_scale));
    }
  }
  SchedulerConfig sc;
  sc.max_seqs = config.max_seqs;
  sc.step_tokens = config.step_tokens;
  sc.prefill_chunk_tokens = config.prefill_chunk_tokens;
  sc.stop_at_eos = config.stop_at_eos;
  sc.arrival_scale = config.arrival_scale;
  auto created = Scheduler::create(trace, engine, clock, sc);
  if (!created) return created.error();
  RunJobResult result;
  result.scheduler = std::move(created).value();
  Scheduler& s = *result.scheduler;
  fmt::print(options.out, "trace: {} requests\n", s.requests().size());
  std::fflush(options.out);

  // Warm-up ends here: from now on the step path must not allocate, and arrival times count from now.
  clock.restart();
  std::uint64_t heap = 0;
  double last_print_s = 0;
  std::uint32_t last_ended = 0;
  bool printed = false;
  while (!s.done()) {
    const std::uint64_t before = activekv::testing::heap_allocations();
    Status status = s.advance();
    heap += activekv::testing::heap_allocations() - before;
    if (!status) return status.error();
    s.sample_pages();
    const double now_s = clock.now_s();
    if (now_s - last_print_s >= (options.terminal ? 0.25 : options.progress_interval_s) || s.ended() != last_ended) {
      print_progress(s, now_s, options, false);
      last_print_s = now_s;
      last_ended = s.ended();
      printed = true;
    }
  }
  double first_arrival_s = 0, last_end_s = 0;
  for (const RequestRecord& r : s.requests()) last_end_s = std::max(last_end_s, r.ended_s);
  if (!s.requests().empty()) {
    first_arrival_s = s.requests()[0].arrival_s;
    for (const RequestRecord& r : s.requests()) first_arrival_s = std::min(first_arrival_s, r.arrival_s);
  }
  // The loop printed the final state already when a line went out as the last request ended;
  // a terminal's last line is rewritten, and ends with a newline.
  if (options.terminal || !printed || last_ended != s.ended()) print_progress(s, clock.now_s(), options, true);

  inputs.scheduler = &s;
  inputs.plan = engine.plan();
  inputs.totals = engine.counters();
  inputs.heap_allocations_after_warmup = heap;
  inputs.heap_counter_linked = activekv::testing::heap_counter_linked();
  inputs.wall_s = last_end_s - first_arrival_s;
  inputs.config = config;
  if (options.decode_outputs) {
    for (const RequestRecord& r : s.requests()) inputs.outputs.push_back(valid_utf8(engine.decode(r.output())));
  }
  result.figures = summarize(inputs);
  engine.release_retained();  // shutdown: retained device pages go back before the check
  result.figures["all_returned"] = engine.all_returned();
  result.inputs = std::move(inputs);
  fmt::print(options.out, "{}", summary_text(result.figures));
  return result;
}

}  // namespace activekv::serve
