// run_report.cpp — figures, report.json, report.html and the terminal summary.
#include "serve/run_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "activekv/size.hpp"
#include "serve/svg_chart.hpp"

namespace activekv::serve {

namespace {

using nlohmann::json;

double share(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

json latency_json(const std::vector<double>& values) {
  return json{{"count", values.size()},
              {"p50", percentile(values, 0.50)},
              {"p99", percentile(values, 0.99)},
              {"max", values.empty() ? 0.0 : *std::max_element(values.begin(), values.end())}};
}

json request_json(const RequestRecord& r, const std::string& output) {
  json wait = json::object();
  for (std::size_t k = 0; k < wait_reason_count; ++k) {
    if (r.wait_steps[k] > 0) wait[wait_reason_name(static_cast<WaitReason>(k))] = r.wait_steps[k];
  }
  json j{{"id", r.id},
         {"trace_line", r.trace_line},
         {"state", request_state_name(r.state)},
         {"arrival_s", r.arrival_s},
         {"prompt_tokens", r.prompt_tokens},
         {"output_tokens", r.output_tokens},
         {"max_tokens", r.max_tokens},
         {"waited_steps", wait},
         {"reused_tokens", r.reused_tokens}};
  if (r.waited) j["first_wait_reason"] = wait_reason_name(r.first_wait_reason);
  if (r.state == RequestState::rejected) j["reject_reason"] = reject_reason_name(r.reject_reason);
  if (r.previous_turn >= 0) j["previous_turn"] = r.previous_turn;
  if (r.ready_s >= 0) j["ready_s"] = r.ready_s;
  if (r.admitted_s >= 0) j["admitted_s"] = r.admitted_s;
  if (r.first_token_s >= 0) j["ttft_s"] = r.first_token_s - r.ready_s;
  if (r.output_tokens > 1 && r.last_token_s > r.first_token_s) {
    j["tpot_s"] = (r.last_token_s - r.first_token_s) / static_cast<double>(r.output_tokens - 1);
  }
  if (r.decode_steps_held > 0) j["decode_steps_held"] = r.decode_steps_held;
  if (r.ended_s >= 0) j["ended_s"] = r.ended_s;
  if (!output.empty()) j["output_text"] = output;
  return j;
}

}  // namespace

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * static_cast<double>(values.size()));
  const auto index = static_cast<std::size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
  return values[index];
}

json summarize(const ReportInputs& in) {
  AK_ASSERT(in.scheduler != nullptr, "summarize: no scheduler");
  const Scheduler& s = *in.scheduler;
  std::map<std::string, std::uint32_t> states;
  json requests = json::array();
  for (std::size_t i = 0; i < s.requests().size(); ++i) {
    const RequestRecord& r = s.requests()[i];
    ++states[request_state_name(r.state)];
    requests.push_back(request_json(r, i < in.outputs.size() ? in.outputs[i] : std::string()));
  }
  std::vector<double> ttft, itl;
  for (const TokenSample& t : s.token_samples()) (t.first ? ttft : itl).push_back(t.latency_s);
  std::uint64_t peak_host = 0, peak_device = 0;
  for (const StepSample& step : s.steps()) {
    peak_host = std::max(peak_host, step.delta.host_bytes_in_use);
    peak_device = std::max(peak_device, step.delta.device_bytes_in_use);
  }
  const EngineCounters& c = in.totals;
  const double wall_s = in.wall_s > 0 ? in.wall_s : 1e-9;
  const std::uint64_t reads = c.page_reads_resident + c.page_reads_staged;
  json figures;
  figures["run"] = {{"model", in.model},
                    {"trace", in.trace},
                    {"config", in.config_source},
                    {"wall_s", in.wall_s},
                    {"steps", s.steps().size() + s.steps_dropped()}};
  figures["settings"] = {{"host_pool_bytes", in.config.host_pool_bytes},
                         {"device_pool_bytes", in.config.device_pool_bytes},
                         {"page_tokens", in.config.page_tokens},
                         {"tile_tokens", in.config.tile_tokens},
                         {"tiles", in.config.tiles},
                         {"max_seqs", in.config.max_seqs},
                         {"step_tokens", in.config.step_tokens},
                         {"prefill_chunk_tokens", in.config.prefill_chunk_tokens},
                         {"threads", in.config.threads}};
  figures["plan"] = {{"max_context_tokens", in.plan.max_context_tokens},
                     {"histories", in.plan.histories},
                     {"max_seqs", in.plan.max_seqs},
                     {"concurrency", in.plan.concurrency},
                     {"pool_pages", in.plan.pool_pages},
                     {"page_tokens", in.plan.page_tokens},
                     {"host_pool_bytes", in.plan.host_pool_bytes},
                     {"device_arena_bytes", in.plan.device_arena_bytes}};
  figures["requests"] = {{"total", s.requests().size()},
                         {"finished", states["finished"]},
                         {"cancelled", states["cancelled"]},
                         {"rejected", states["rejected"]},
                         {"running_max", s.running_max()}};
  figures["tokens"] = {{"in", s.tokens_in()}, {"out", s.tokens_out()}};
  figures["throughput"] = {{"output_tokens_per_s", static_cast<double>(s.tokens_out()) / wall_s},
                           {"total_tokens_per_s", static_cast<double>(s.tokens_in() + s.tokens_out()) / wall_s},
                           {"requests_per_s", static_cast<double>(states["finished"]) / wall_s}};
  figures["latency"] = {{"ttft_s", latency_json(ttft)}, {"inter_token_s", latency_json(itl)}};
  figures["copies"] = {{"h2d", {{"bytes", c.bytes_h2d}, {"count", c.copies_h2d}}},
                       {"d2h", {{"bytes", c.bytes_d2h}, {"count", c.copies_d2h}}},
                       {"d2d", {{"bytes", c.bytes_d2d}, {"count", c.copies_d2d}}}};
  figures["residency"] = {{"page_reads_resident", c.page_reads_resident},
                          {"page_reads_staged", c.page_reads_staged},
                          {"resident_share", share(c.page_reads_resident, reads)},
                          {"staged_share", share(c.page_reads_staged, reads)}};
  figures["promotions"] = c.promotions;
  figures["reclaimed"] = {{"pages", c.reclaimed_pages}, {"steps", c.reclaim_steps}};
  figures["quarantines"] = c.quarantines;
  // Prefix reuse: follow-up turns (a session's later requests) are where it pays.
  std::vector<double> follow_up_ttft;
  std::uint64_t follow_ups_reusing = 0;
  for (const RequestRecord& r : s.requests()) {
    if (r.previous_turn < 0 || r.first_token_s < 0) continue;
    follow_up_ttft.push_back(r.first_token_s - r.ready_s);
    follow_ups_reusing += r.reused_tokens > 0 ? 1 : 0;
  }
  figures["prefix_reuse"] = {{"enabled", in.config.prefix_reuse},
                             {"reused_tokens", c.prefix_reused_tokens},
                             {"adoptions", c.prefix_adoptions},
                             {"prompt_tokens_prefilled", s.tokens_in()},
                             {"retained_kept", c.retained_kept},
                             {"retained_dropped", c.retained_dropped},
                             {"retained_histories_at_end", c.retained_histories},
                             {"device_pages_handed_over", c.retained_device_pages_adopted},
                             {"device_pages_reclaimed", c.retained_device_pages_reclaimed},
                             {"device_pages_retained_at_end", c.retained_device_pages},
                             {"device_pages_copied_d2d", c.prefix_device_pages_copied},
                             {"device_pages_promoted_d2d", c.prefix_device_pages_promoted},
                             {"h2d_bytes_adopting_contexts", c.h2d_bytes_adopting},
                             {"follow_ups", follow_up_ttft.size()},
                             {"follow_ups_reusing", follow_ups_reusing},
                             {"follow_up_ttft_s", latency_json(follow_up_ttft)},
                             {"follow_up_first_steps", s.follow_up_first_steps()},
                             {"held_decode_tokens", s.held_decode_tokens()},
                             {"held_decode_steps", s.held_decode_steps()}};
  figures["prefix_cache"] = {{"pages_capacity", c.prefix_cache_pages_total},
                             {"pages_at_end", c.prefix_cache_pages},
                             {"bytes_at_end", c.prefix_cache_bytes},
                             {"lookups", c.prefix_cache_lookups},
                             {"hits", c.prefix_cache_hits},
                             {"hit_tokens", c.prefix_cache_hit_tokens},
                             {"evictions", c.prefix_cache_evictions},
                             {"pages_shared", c.prefix_cache_pages_shared},
                             {"ring_cuts", c.prefix_cache_ring_cuts},
                             {"ring_cut_pages", c.prefix_cache_ring_cut_pages},
                             {"state_cuts", c.prefix_cache_state_cuts},
                             {"state_cut_pages", c.prefix_cache_state_cut_pages}};
  figures["allocations_after_warmup"] = {{"device", c.device_allocations_after_warmup},
                                         {"heap", in.heap_allocations_after_warmup}};
  if (!in.heap_counter_linked) figures["allocations_after_warmup"]["heap_measured"] = false;
  figures["peak"] = {{"host_bytes", peak_host},
                     {"host_bytes_plan", in.plan.host_pool_bytes},
                     {"device_bytes", peak_device},
                     {"device_bytes_plan", in.plan.device_arena_bytes}};
  figures["time"] = {{"step_s_total", static_cast<double>(c.step_ns) * 1e-9},
                     {"planning_s_total", static_cast<double>(c.planning_ns) * 1e-9},
                     {"planning_share_of_step", share(c.planning_ns, c.step_ns)}};
  figures["request_list"] = std::move(requests);
  return figures;
}

namespace {

Chart pages_chart(const Scheduler& s) {
  Chart chart{"chart-pages", "Device pages per context (all dense layers) against floor, target and burst", "time (s)",
              "pages", {}, 900, 340, 1500};
  std::map<std::uint32_t, std::size_t> series_of;  // request -> series index
  ChartSeries floor{"floor (max)", "#444", SeriesStyle::dashed, {}};
  ChartSeries target{"target (max)", "#2ca02c", SeriesStyle::dashed, {}};
  ChartSeries burst{"burst (max)", "#d62728", SeriesStyle::dashed, {}};
  std::uint32_t floor_max = 0, target_max = 0, burst_max = 0;
  for (const PagesSample& p : s.pages_samples()) {
    const double t = s.steps()[p.step].end_s;
    auto [it, fresh] = series_of.try_emplace(p.request, chart.series.size());
    if (fresh) {
      chart.series.push_back(ChartSeries{s.requests()[p.request].id, palette_colour(chart.series.size()), SeriesStyle::step, {}});
    }
    chart.series[it->second].points.push_back({t, static_cast<double>(p.pages.held)});
    floor_max = std::max(floor_max, p.pages.floor);
    target_max = std::max(target_max, p.pages.target);
    burst_max = std::max(burst_max, p.pages.burst);
  }
  if (!s.steps().empty()) {
    const double t0 = s.steps().front().start_s, t1 = s.steps().back().end_s;
    floor.points = {{t0, static_cast<double>(floor_max)}, {t1, static_cast<double>(floor_max)}};
    target.points = {{t0, static_cast<double>(target_max)}, {t1, static_cast<double>(target_max)}};
    burst.points = {{t0, static_cast<double>(burst_max)}, {t1, static_cast<double>(burst_max)}};
  }
  chart.series.push_back(std::move(floor));
  chart.series.push_back(std::move(target));
  chart.series.push_back(std::move(burst));
  return chart;
}

Chart latency_chart(const Scheduler& s) {
  Chart chart{"chart-latency", "Per-token latency (first tokens: time to first token)", "time (s)", "latency (ms)", {}};
  ChartSeries next{"inter-token", "#1f77b4", SeriesStyle::dots, {}};
  ChartSeries first{"first token", "#d62728", SeriesStyle::dots, {}};
  for (const TokenSample& t : s.token_samples()) (t.first ? first : next).points.push_back({t.time_s, t.latency_s * 1e3});
  chart.series = {std::move(next), std::move(first)};
  return chart;
}

Chart bytes_chart(const Scheduler& s) {
  Chart chart{"chart-bytes", "Bytes per step: staged (h2d), promoted (d2d), written back (d2h)", "time (s)", "bytes", {}};
  ChartSeries staged{"staged h2d", "#ff7f0e", SeriesStyle::line, {}};
  ChartSeries promoted{"promoted d2d", "#9467bd", SeriesStyle::line, {}};
  ChartSeries written{"written back d2h", "#17becf", SeriesStyle::line, {}};
  for (const StepSample& step : s.steps()) {
    staged.points.push_back({step.end_s, static_cast<double>(step.delta.bytes_h2d)});
    promoted.points.push_back({step.end_s, static_cast<double>(step.delta.bytes_d2d)});
    written.points.push_back({step.end_s, static_cast<double>(step.delta.bytes_d2h)});
  }
  chart.series = {std::move(staged), std::move(promoted), std::move(written)};
  return chart;
}

Chart queue_chart(const Scheduler& s) {
  Chart chart{"chart-queue", "Queue and running contexts", "time (s)", "requests", {}};
  ChartSeries queued{"queued", "#d62728", SeriesStyle::step, {}};
  ChartSeries running{"running", "#2ca02c", SeriesStyle::step, {}};
  for (const StepSample& step : s.steps()) {
    queued.points.push_back({step.end_s, static_cast<double>(step.queued)});
    running.points.push_back({step.end_s, static_cast<double>(step.running)});
  }
  chart.series = {std::move(queued), std::move(running)};
  return chart;
}

std::string figure_rows(const json& f) {
  const auto& lat = f["latency"];
  const auto& peak = f["peak"];
  const auto& copies = f["copies"];
  std::string rows;
  auto row = [&](const std::string& name, const std::string& value) {
    rows += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", html_escape(name), html_escape(value));
  };
  row("requests", fmt::format("{} total: {} finished, {} cancelled, {} rejected (at most {} running)",
                              f["requests"]["total"].get<int>(), f["requests"]["finished"].get<int>(),
                              f["requests"]["cancelled"].get<int>(), f["requests"]["rejected"].get<int>(),
                              f["requests"]["running_max"].get<int>()));
  row("tokens", fmt::format("{} in (prefill), {} out", f["tokens"]["in"].get<std::uint64_t>(), f["tokens"]["out"].get<std::uint64_t>()));
  row("throughput", fmt::format("{:.1f} output tokens/s, {:.1f} tokens/s in + out over {:.1f} s",
                                f["throughput"]["output_tokens_per_s"].get<double>(),
                                f["throughput"]["total_tokens_per_s"].get<double>(), f["run"]["wall_s"].get<double>()));
  row("time to first token", fmt::format("p50 {:.1f} ms, p99 {:.1f} ms", lat["ttft_s"]["p50"].get<double>() * 1e3,
                                         lat["ttft_s"]["p99"].get<double>() * 1e3));
  row("inter-token latency", fmt::format("p50 {:.1f} ms, p99 {:.1f} ms", lat["inter_token_s"]["p50"].get<double>() * 1e3,
                                         lat["inter_token_s"]["p99"].get<double>() * 1e3));
  for (const char* dir : {"h2d", "d2h", "d2d"}) {
    row(fmt::format("copies {}", dir), fmt::format("{} in {} copies", format_bytes(copies[dir]["bytes"].get<std::uint64_t>()),
                                                   copies[dir]["count"].get<std::uint64_t>()));
  }
  row("page reads", fmt::format("{:.1f}% resident, {:.1f}% staged", f["residency"]["resident_share"].get<double>() * 100,
                                f["residency"]["staged_share"].get<double>() * 100));
  row("promotions", std::to_string(f["promotions"].get<std::uint64_t>()));
  row("reclaimed", fmt::format("{} pages in {} steps", f["reclaimed"]["pages"].get<std::uint64_t>(),
                               f["reclaimed"]["steps"].get<std::uint64_t>()));
  row("quarantines", std::to_string(f["quarantines"].get<std::uint64_t>()));
  row("allocations after warm-up", fmt::format("device {}, heap {}", f["allocations_after_warmup"]["device"].get<std::uint64_t>(),
                                               f["allocations_after_warmup"]["heap"].get<std::uint64_t>()));
  row("peak host bytes", fmt::format("{} of {} planned", format_bytes(peak["host_bytes"].get<std::uint64_t>()),
                                     format_bytes(peak["host_bytes_plan"].get<std::uint64_t>())));
  row("peak device bytes", fmt::format("{} of {} planned", format_bytes(peak["device_bytes"].get<std::uint64_t>()),
                                       format_bytes(peak["device_bytes_plan"].get<std::uint64_t>())));
  row("planning", fmt::format("{:.2f}% of step time", f["time"]["planning_share_of_step"].get<double>() * 100));
  return rows;
}

std::string request_rows(const json& f) {
  std::string rows;
  for (const json& r : f["request_list"]) {
    std::string wait;
    for (const auto& [reason, steps] : r["waited_steps"].items()) wait += fmt::format("{} {} steps; ", reason, steps.get<int>());
    rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                        html_escape(r["id"].get<std::string>()), html_escape(r["state"].get<std::string>()),
                        r["prompt_tokens"].get<int>(), r["output_tokens"].get<int>(),
                        r.contains("ttft_s") ? fmt::format("{:.1f}", r["ttft_s"].get<double>() * 1e3) : std::string("-"),
                        html_escape(r.contains("reject_reason") ? r["reject_reason"].get<std::string>() : std::string()),
                        html_escape(wait));
  }
  return rows;
}

}  // namespace

std::string report_html(const ReportInputs& in, const json& figures) {
  AK_ASSERT(in.scheduler != nullptr, "report_html: no scheduler");
  const Scheduler& s = *in.scheduler;
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ActiveKV run report</title>\n"
      "<style>body{font-family:sans-serif;margin:24px;max-width:1000px}table{border-collapse:collapse;margin:8px 0 20px}"
      "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}th{background:#f3f3f3}"
      "svg{display:block;margin:10px 0 24px}</style></head><body>\n";
  html += "<h1>ActiveKV run report</h1>\n";
  html += fmt::format("<p>model <code>{}</code>, trace <code>{}</code>, configuration <code>{}</code>; plan: {} histories in "
                      "the host pool, concurrency {} (max_seqs {}), {} device pool pages of {} tokens.</p>\n",
                      html_escape(in.model), html_escape(in.trace), html_escape(in.config_source), in.plan.histories,
                      in.plan.concurrency, in.plan.max_seqs, in.plan.pool_pages, in.plan.page_tokens);
  html += "<h2>Figures</h2>\n<table id=\"figures\">\n" + figure_rows(figures) + "</table>\n";
  html += "<h2>Charts</h2>\n";
  html += render_svg(pages_chart(s));
  html += render_svg(latency_chart(s));
  html += render_svg(bytes_chart(s));
  html += render_svg(queue_chart(s));
  html += "<h2>Requests</h2>\n<table id=\"requests\"><tr><th>id</th><th>state</th><th>prompt tokens</th><th>output tokens</th>"
          "<th>TTFT (ms)</th><th>rejected because</th><th>waited</th></tr>\n";
  html += request_rows(figures);
  html += "</table>\n</body></html>\n";
  return html;
}

Status write_report(const std::string& dir, const ReportInputs& in, const json& figures) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::io, "--report", fmt::format("cannot create directory {}: {}", dir, ec.message()));
  const std::string files[2][2] = {{dir + "/report.json", figures.dump(2, ' ', false, json::error_handler_t::replace) + "\n"}, {dir + "/report.html", report_html(in, figures)}};
  for (const auto& [path, text] : files) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) return make_error(ErrorCode::io, "--report", fmt::format("cannot write {}", path));
  }
  return {};
}

namespace {

// "prefix cache: 120 of 2912 pages (42.2 MiB), 3 hits of 5 lookups (1,024 tokens), 0 evicted".
std::string cache_text(const json& f) {
  if (!f.contains("prefix_cache") || f["prefix_cache"]["pages_capacity"].get<std::uint64_t>() == 0) return {};
  const json& p = f["prefix_cache"];
  return fmt::format("; prefix cache: {} of {} pages ({:.1f} MiB), {} hits of {} lookups ({} tokens), {} evicted",
                     p["pages_at_end"].get<std::uint64_t>(), p["pages_capacity"].get<std::uint64_t>(),
                     static_cast<double>(p["bytes_at_end"].get<std::uint64_t>()) / 1048576.0, p["hits"].get<std::uint64_t>(),
                     p["lookups"].get<std::uint64_t>(), p["hit_tokens"].get<std::uint64_t>(),
                     p["evictions"].get<std::uint64_t>());
}

std::string reuse_text(const json& f) {
  if (!f.contains("prefix_reuse")) return "-";
  const json& p = f["prefix_reuse"];
  const json& t = p["follow_up_ttft_s"];
  return fmt::format("{}: {} prompt tokens reused in {} adoptions, {} prefilled; histories retained {}, dropped {}; "
                     "{} follow-ups ({} reusing), TTFT p50 {:.0f} ms p99 {:.0f} ms{}{}",
                     p["enabled"].get<bool>() ? "on" : "off (--no-prefix-reuse)", p["reused_tokens"].get<std::uint64_t>(),
                     p["adoptions"].get<std::uint64_t>(), p["prompt_tokens_prefilled"].get<std::uint64_t>(),
                     p["retained_kept"].get<std::uint64_t>(), p["retained_dropped"].get<std::uint64_t>(),
                     p["follow_ups"].get<std::uint64_t>(), p["follow_ups_reusing"].get<std::uint64_t>(),
                     t["p50"].get<double>() * 1e3, t["p99"].get<double>() * 1e3,
                     p.contains("h2d_bytes_adopting_contexts")
                         ? fmt::format("; device: {} pages handed over, {} copied d2d; h2d for adopting contexts {:.2f} MiB",
                                       p["device_pages_handed_over"].get<std::uint64_t>(),
                                       p["device_pages_copied_d2d"].get<std::uint64_t>(),
                                       static_cast<double>(p["h2d_bytes_adopting_contexts"].get<std::uint64_t>()) / 1048576.0)
                         : std::string(),
                     p.contains("follow_up_first_steps")
                         ? fmt::format("; follow-ups' first steps {} (holding {} decode tokens of others)",
                                       p["follow_up_first_steps"].get<std::uint64_t>(),
                                       p["held_decode_tokens"].get<std::uint64_t>())
                         : std::string()) +
         cache_text(f);
}

}  // namespace

std::string summary_text(const json& f) {
  const auto& lat = f["latency"];
  return fmt::format(
      "requests   {} finished, {} cancelled, {} rejected of {} (at most {} running)\n"
      "tokens     {} in, {} out in {:.1f} s: {:.1f} output tokens/s, {:.1f} tokens/s in + out\n"
      "latency    TTFT p50 {:.0f} ms p99 {:.0f} ms; inter-token p50 {:.1f} ms p99 {:.1f} ms\n"
      "copies     h2d {} ({} copies), d2h {} ({}), d2d {} ({})\n"
      "pages      {:.1f}% of page reads resident, {:.1f}% staged; {} promotions; {} pages reclaimed in {} steps; "
      "{} quarantines\n"
      "memory     peak host {} of {} planned; peak device {} of {} planned\n"
      "warm-up    allocations after warm-up: device {}, heap {}\n"
      "reuse      {}\n",
      f["requests"]["finished"].get<int>(), f["requests"]["cancelled"].get<int>(), f["requests"]["rejected"].get<int>(),
      f["requests"]["total"].get<int>(), f["requests"]["running_max"].get<int>(), f["tokens"]["in"].get<std::uint64_t>(),
      f["tokens"]["out"].get<std::uint64_t>(), f["run"]["wall_s"].get<double>(),
      f["throughput"]["output_tokens_per_s"].get<double>(), f["throughput"]["total_tokens_per_s"].get<double>(),
      lat["ttft_s"]["p50"].get<double>() * 1e3, lat["ttft_s"]["p99"].get<double>() * 1e3,
      lat["inter_token_s"]["p50"].get<double>() * 1e3, lat["inter_token_s"]["p99"].get<double>() * 1e3,
      format_bytes(f["copies"]["h2d"]["bytes"].get<std::uint64_t>()), f["copies"]["h2d"]["count"].get<std::uint64_t>(),
      format_bytes(f["copies"]["d2h"]["bytes"].get<std::uint64_t>()), f["copies"]["d2h"]["count"].get<std::uint64_t>(),
      format_bytes(f["copies"]["d2d"]["bytes"].get<std::uint64_t>()), f["copies"]["d2d"]["count"].get<std::uint64_t>(),
      f["residency"]["resident_share"].get<double>() * 100, f["residency"]["staged_share"].get<double>() * 100,
      f["promotions"].get<std::uint64_t>(), f["reclaimed"]["pages"].get<std::uint64_t>(),
      f["reclaimed"]["steps"].get<std::uint64_t>(), f["quarantines"].get<std::uint64_t>(),
      format_bytes(f["peak"]["host_bytes"].get<std::uint64_t>()), format_bytes(f["peak"]["host_bytes_plan"].get<std::uint64_t>()),
      format_bytes(f["peak"]["device_bytes"].get<std::uint64_t>()),
      format_bytes(f["peak"]["device_bytes_plan"].get<std::uint64_t>()),
      f["allocations_after_warmup"]["device"].get<std::uint64_t>(), f["allocations_after_warmup"]["heap"].get<std::uint64_t>(),
      reuse_text(f));
}

}  // namespace activekv::serve
