// report_html.cpp — one self-contained HTML page: the findings, tables and inline SVG charts.
#include <fmt/format.h>

#include <algorithm>

#include "activekv/size.hpp"
#include "sim/report.hpp"
#include "sim/svg_chart.hpp"

namespace activekv::sim {

namespace {

const char* color(Variant v) {
  switch (v) {
    case Variant::stock: return "#444444";
    case Variant::activekv: return "#d62728";
    case Variant::activekv_headroom: return "#1f77b4";
  }
  return "#000000";
}

std::string label(const Scenario& s, Variant v) {
  if (v == Variant::activekv_headroom) return fmt::format("ActiveKV, {} headroom", format_bytes(s.headroom_bytes));
  return variant_label(v);
}

// One y range for every latency panel, so panels compare at a glance.
void latency_range(const SweepResult& r, double* lo, double* hi) {
  *lo = 1e300;
  *hi = 0.0;
  for (const CellResult& c : r.cells) {
    if (!c.ran) continue;
    *lo = std::min(*lo, c.itl_seconds * 1e3);
    *hi = std::max(*hi, c.itl_seconds * 1e3);
  }
  if (*hi <= 0.0) *lo = 1.0, *hi = 10.0;
  *lo *= 0.8;
  *hi *= 1.25;
}

std::string by_length_panels(const SweepResult& r) {
  const Scenario& s = r.scenario;
  double lo = 0, hi = 0;
  latency_range(r, &lo, &hi);
  std::string out;
  for (std::uint32_t n : s.concurrency) {
    LineChart chart;
    chart.title = fmt::format("concurrency {}", n);
    chart.x_label = "context length (tokens)";
    chart.y_label = "inter-token latency (ms)";
    chart.log_x = true;
    chart.log_y = true;
    chart.y_min = lo;
    chart.y_max = hi;
    chart.legend = n == s.concurrency.front();
    for (Variant v : {Variant::stock, Variant::activekv, Variant::activekv_headroom}) {
      ChartSeries series{label(s, v), color(v), {}, v == Variant::stock};
      for (std::uint32_t length : s.context_tokens) {
        const CellResult* c = r.find(v, n, length);
        series.points.push_back({static_cast<double>(length), c != nullptr && c->ran ? c->itl_seconds * 1e3 : 0.0});
      }
      chart.series.push_back(series);
    }
    out += render_svg(chart);
  }
  return out;
}

std::string by_concurrency_panels(const SweepResult& r) {
  const Scenario& s = r.scenario;
  double lo = 0, hi = 0;
  latency_range(r, &lo, &hi);
  std::string out;
  for (std::uint32_t length : s.context_tokens) {
    LineChart chart;
    chart.title = fmt::format("{} tokens per context", tick_label(length));
    chart.x_label = "concurrency (contexts decoding together)";
    chart.y_label = "inter-token latency (ms)";
    chart.log_x = true;
    chart.log_y = true;
    chart.y_min = lo;
    chart.y_max = hi;
    chart.legend = length == s.context_tokens.front();
    for (Variant v : {Variant::stock, Variant::activekv, Variant::activekv_headroom}) {
      ChartSeries series{label(s, v), color(v), {}, v == Variant::stock};
      for (std::uint32_t n : s.concurrency) {
        const CellResult* c = r.find(v, n, length);
        series.points.push_back({static_cast<double>(n), c != nullptr && c->ran ? c->itl_seconds * 1e3 : 0.0});
      }
      chart.series.push_back(series);
    }
    out += render_svg(chart);
  }
  return out;
}

std::string crossover_chart(const SweepResult& r) {
  static const char* palette[] = {"#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  LineChart chart;
  chart.title = "ActiveKV (no headroom) ÷ stock, per token, while stock fits";
  chart.x_label = "context length (tokens)";
  chart.y_label = "latency ratio (1 = same as stock)";
  chart.log_x = true;
  chart.log_y = true;
  chart.width = 860;
  chart.height = 340;
  std::size_t k = 0;
  for (const Crossover& x : r.crossovers) {
    if (x.variant != Variant::activekv) continue;
    ChartSeries series{fmt::format("N={}", x.concurrency), palette[k++ % 8], {}, false};
    for (const ProbePoint& p : x.probes) {
      series.points.push_back({static_cast<double>(p.context_tokens),
                               p.stock_seconds > 0.0 ? p.activekv_seconds / p.stock_seconds : 0.0});
    }
    chart.series.push_back(series);
  }
  ChartSeries parity{"1.05 (the crossover threshold)", "#000000", {}, true};
  for (std::uint32_t length : r.scenario.context_tokens) parity.points.push_back({static_cast<double>(length), 1.05});
  chart.series.push_back(parity);
  chart.x_ticks.assign(r.scenario.context_tokens.begin(), r.scenario.context_tokens.end());
  return render_svg(chart);
}

std::string saturation_charts(const SaturationResult& sat) {
  BarChart bars;
  bars.title = fmt::format("Evictions per {} steps under a saturating workload", sat.settings.window_steps);
  bars.x_label = "step";
  bars.y_label = "evictions";
  ChartSeries naive{"naive: admit while pages are free, evict and recompute", "#d62728", {}, false};
  ChartSeries akv{"ActiveKV admission (the core)", "#1f77b4", {}, false};
  for (const SaturationWindow& w : sat.windows) {
    bars.x.push_back(w.first_step);
    naive.points.push_back({static_cast<double>(w.first_step), static_cast<double>(w.naive_evictions)});
    akv.points.push_back({static_cast<double>(w.first_step), static_cast<double>(w.activekv_evictions)});
  }
  bars.series = {naive, akv};

  LineChart running;
  running.title = "Requests running (min and max per window)";
  running.x_label = "step";
  running.y_label = "running requests";
  running.width = 860;
  running.height = 280;
  ChartSeries naive_max{"naive, max", "#d62728", {}, false};
  ChartSeries naive_min{"naive, min", "#d62728", {}, true};
  ChartSeries akv_max{"ActiveKV, max", "#1f77b4", {}, false};
  ChartSeries akv_min{"ActiveKV, min", "#1f77b4", {}, true};
  for (const SaturationWindow& w : sat.windows) {
    const double x = w.first_step;
    naive_max.points.push_back({x, static_cast<double>(w.naive_running_max) + 1e-9});
    naive_min.points.push_back({x, static_cast<double>(w.naive_running_min) + 1e-9});
    akv_max.points.push_back({x, static_cast<double>(w.activekv_running_max) + 1e-9});
    akv_min.points.push_back({x, static_cast<double>(w.activekv_running_min) + 1e-9});
  }
  running.series = {naive_max, naive_min, akv_max, akv_min};
  for (std::size_t i = 0; i < sat.windows.size(); i += std::max<std::size_t>(1, sat.windows.size() / 8)) {
    running.x_ticks.push_back(sat.windows[i].first_step);
  }
  return render_svg(bars) + render_svg(running);
}

std::string table_html(const SweepResult& r, Variant v) {
  const Scenario& s = r.scenario;
  std::string out = "<table><tr><th>tokens \\ N</th>";
  for (std::uint32_t n : s.concurrency) out += fmt::format("<th>{}</th>", n);
  out += "</tr>\n";
  for (std::uint32_t length : s.context_tokens) {
    out += fmt::format("<tr><th>{}</th>", length);
    for (std::uint32_t n : s.concurrency) {
      const CellResult* c = r.find(v, n, length);
      if (c != nullptr && c->ran) {
        out += fmt::format("<td title=\"h2d {:.0f} MiB, d2d {:.0f} MiB per step; compute stalled {:.1f} ms\">{:.1f}</td>",
                           c->h2d_bytes_per_step / MiB, c->d2d_bytes_per_step / MiB, c->stall_seconds * 1e3,
                           c->itl_seconds * 1e3);
      } else {
        out += fmt::format("<td class=\"na\" title=\"{}\">—</td>", escape_xml(c != nullptr ? c->note : ""));
      }
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string speedup_html(const SweepResult& r) {
  const Scenario& s = r.scenario;
  std::string out = "<table><tr><th>tokens \\ N</th>";
  for (std::uint32_t n : s.concurrency) out += fmt::format("<th>{}</th>", n);
  out += "</tr>\n";
  for (std::uint32_t length : s.context_tokens) {
    out += fmt::format("<tr><th>{}</th>", length);
    for (std::uint32_t n : s.concurrency) {
      const double x = headroom_speedup(r, n, length);
      out += x > 0 ? fmt::format("<td{}>{:.2f}×</td>", x >= 1.8 ? " class=\"good\"" : "", x) : "<td class=\"na\">—</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string crossover_html(const SweepResult& r) {
  std::string out =
      "<table><tr><th>variant</th><th>N</th><th>not slower at</th><th>slower (&gt; 5%) from</th>"
      "<th>there: ActiveKV / stock (ms)</th><th>stock holds N up to</th></tr>\n";
  for (const Crossover& x : r.crossovers) {
    const ProbePoint* at = nullptr;
    for (const ProbePoint& p : x.probes) {
      if (p.context_tokens == x.slower_from_tokens) at = &p;
    }
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                       variant_name(x.variant), x.concurrency,
                       x.slower_from_tokens != 0 ? std::to_string(x.not_slower_until_tokens) : "—",
                       x.slower_from_tokens != 0 ? std::to_string(x.slower_from_tokens) : "never, while stock fits",
                       at != nullptr ? fmt::format("{:.1f} / {:.1f}", at->activekv_seconds * 1e3, at->stock_seconds * 1e3) : "—",
                       x.stock_fits_until_tokens != 0 ? std::to_string(x.stock_fits_until_tokens) : "never");
  }
  return out + "</table>\n";
}

}  // namespace

std::string report_html(const SimReport& report) {
  const SweepResult& r = report.sweep;
  const Scenario& s = r.scenario;
  const MemoryPlan& p = r.plan;
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  out += fmt::format("<title>activekv sim — {}</title>\n", escape_xml(s.name));
  out +=
      "<style>body{font-family:sans-serif;max-width:1320px;margin:1em auto;padding:0 1em;color:#222}"
      "table{border-collapse:collapse;margin:0.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
      "td.na{color:#aaa}td.good{background:#e6f2e6}.panels svg{margin:4px}code{background:#f4f4f4;padding:1px 4px}"
      "</style></head><body>\n";
  out += fmt::format("<h1>activekv sim — {}</h1>\n<p>{}</p>\n", escape_xml(s.name), escape_xml(s.description));
  out += fmt::format("<p>Command: <code>{}</code>. Card: {}. Every cost-model figure and its source is in "
                     "<code>docs/SIMULATION.md</code>; the simulated device charges those figures, the residency "
                     "decisions come from the real ActiveKV core.</p>\n",
                     escape_xml(report.command), escape_xml(std::string(s.card.description)));
  out += "<h2>The seed's figures, from the core</h2>\n<ul>\n";
  out += fmt::format("<li>{} of host memory per {}-token history: {} segments of {} ({} tokens × {} B rows)</li>\n",
                     format_bytes(p.host.history_bytes), p.host.max_context_tokens, p.geometry.dense_layers,
                     format_bytes(p.host.segment_bytes), p.host.max_context_tokens, p.host.row_bytes);
  out += fmt::format("<li>a {} host pool holds {} histories; the core admits {} at once</li>\n",
                     format_bytes(p.host.host_pool_bytes), p.host.histories, p.budget.concurrency);
  out += fmt::format("<li>{} of recurrent state per context, in its own {} slots</li>\n",
                     format_bytes(p.arena.recurrent_slot_bytes), p.arena.recurrent_slots);
  out += fmt::format("<li>{} dense layers share one arena: tiles {} + page pool {} ({} pages) + recurrent {} = {}; "
                     "with headroom {} more</li>\n",
                     p.geometry.dense_layers, format_bytes(p.arena.staging_tiles.size_bytes),
                     format_bytes(p.arena.page_pool.size_bytes), p.arena.pages, format_bytes(p.arena.recurrent.size_bytes),
                     format_bytes(p.arena.used_bytes), format_bytes(r.plan_headroom.arena.headroom.size_bytes));
  out += fmt::format("<li>{} heap allocations over {} measured decode steps (core planning, translation, scheduling)",
                     r.heap_allocations, r.measured_steps);
  if (report.saturation) {
    out += fmt::format("; {} over the saturating run after its first window", report.saturation->heap_allocations);
  }
  out += "</li>\n</ul>\n";

  out += "<h2>Inter-token latency against context length</h2>\n<p>One panel per concurrency; all panels share one "
         "(logarithmic) scale. Stock is drawn only where its contexts fit in device memory.</p>\n<div class=\"panels\">\n";
  out += by_length_panels(r);
  out += "</div>\n<h2>Inter-token latency against concurrency</h2>\n<div class=\"panels\">\n";
  out += by_concurrency_panels(r);
  out += "</div>\n";
  for (Variant v : {Variant::stock, Variant::activekv, Variant::activekv_headroom}) {
    out += fmt::format("<h3>{} — inter-token latency, ms</h3>\n", escape_xml(label(s, v)));
    out += table_html(r, v);
  }
  out += fmt::format("<h2>What {} of headroom buys</h2>\n<p>Latency without headroom ÷ latency with it (≥ 1.8× shaded).</p>\n",
                     format_bytes(s.headroom_bytes));
  out += speedup_html(r);
  out += "<h2>Where staging makes ActiveKV slower than all-on-device</h2>\n";
  out += crossover_chart(r);
  out += crossover_html(r);
  if (report.saturation) {
    const SaturationResult& sat = *report.saturation;
    out += "<h2>A saturating workload: admission without evictions, and the limit cycle</h2>\n";
    out += fmt::format(
        "<p>Endless identical requests of {} prompt + {} output tokens for {} steps. Naive: all KV on the device ({} "
        "pages of {} tokens), up to {} running, admit while pages are free, evict the newest and recompute on overflow. "
        "ActiveKV: the core admits when a host history is free and the floor fits, and never takes a floor back.</p>\n",
        sat.settings.prompt_tokens, sat.settings.output_tokens, sat.settings.steps, sat.naive_capacity_pages, s.page_tokens,
        sat.settings.naive_max_seqs);
    out += saturation_charts(sat);
    out += "<table><tr><th></th><th>evictions</th><th>recomputed tokens</th><th>decoded tokens</th><th>finished</th>"
           "<th>simulated seconds</th><th>tokens/s</th></tr>\n";
    out += fmt::format("<tr><th>naive</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td></tr>\n",
                       sat.naive.evictions, sat.naive.recompute_tokens, sat.naive.decoded_tokens, sat.naive.finished,
                       sat.naive.seconds, sat.naive.tokens_per_second());
    out += fmt::format("<tr><th>ActiveKV</th><td>{}</td><td>0</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td></tr>\n",
                       sat.activekv.evictions, sat.activekv.decoded_tokens, sat.activekv.finished, sat.activekv.seconds,
                       sat.activekv.tokens_per_second());
    out += "</table>\n";
    out += fmt::format(
        "<p>Headroom under pressure (a prefill's {} workspace takes headroom back while it runs): {} takings, {} pages "
        "taken, {} lent pages revoked, {} retained pages dropped. The core queued {} submissions; reclamation took {} "
        "pages in {} steps.</p>\n",
        format_bytes(sat.settings.prefill_workspace_bytes), sat.headroom_takings, sat.headroom_pages_taken,
        sat.headroom_pages_revoked, sat.retained_pages_dropped, sat.queued_by_core, sat.pages_reclaimed, sat.reclaim_steps);
  }
  out += fmt::format("<p>Simulated in {:.2f} s of wall time.</p>\n</body></html>\n", r.wall_seconds);
  return out;
}

}  // namespace activekv::sim
