// report_test.cpp — the options refuse bad input by name; a quick run goes end to end into
// text, JSON and a self-contained HTML page with its charts.
#include "sim/report.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/sim_options.hpp"
#include "sim/svg_chart.hpp"

namespace activekv::sim {
namespace {

std::string setting_of(const SimOptions& o) {
  const Result<SimConfig> r = make_sim_config(o);
  return r.ok() ? std::string("<accepted>") : r.error().setting;
}

TEST(SimOptions, RefusesBadInputNamingTheOption) {
  SimOptions o;
  o.scenario = "gpt-9";
  EXPECT_EQ(setting_of(o), "--scenario");
  o = SimOptions{};
  o.headroom = "auto";
  EXPECT_EQ(setting_of(o), "--headroom");
  o = SimOptions{};
  o.headroom = "12GiB";  // 14 + 1.5 + 8 + 12 GiB > 32 GiB
  EXPECT_EQ(setting_of(o), "--device-pool");
  o = SimOptions{};
  o.device_pool = "lots";
  EXPECT_EQ(setting_of(o), "--device-pool");
  o = SimOptions{};
  o.lengths = "1024,65536";  // above the 32,768-token max context
  EXPECT_EQ(setting_of(o), "--lengths");
  o = SimOptions{};
  o.lengths = "1024,";
  EXPECT_EQ(setting_of(o), "--lengths");
  o = SimOptions{};
  o.concurrency = "0";
  EXPECT_EQ(setting_of(o), "--concurrency");
  o = SimOptions{};
  o.concurrency = "64";  // the arena is sized for 32
  EXPECT_EQ(setting_of(o), "--concurrency");
  o = SimOptions{};
  o.steps = "-3";
  EXPECT_EQ(setting_of(o), "--steps");
  o = SimOptions{};
  o.output_tokens = "40000";
  EXPECT_EQ(setting_of(o), "--output-tokens");
  o = SimOptions{};
  o.headroom = "0";
  EXPECT_EQ(setting_of(o), "<accepted>");
}

TEST(SvgChart, GapsBreakLinesAndTextIsEscaped) {
  LineChart chart;
  chart.title = "a < b & c";
  chart.series.push_back(ChartSeries{"s", "#000", {{1, 1}, {2, 0}, {3, 3}}, false});
  const std::string svg = render_svg(chart);
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  // The gap at x = 2 splits the path into two moves.
  const std::size_t path = svg.find("<path d=\"");
  ASSERT_NE(path, std::string::npos);
  const std::string d = svg.substr(path, svg.find('"', path + 9) - path);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2);
  EXPECT_EQ(tick_label(32768), "32K");
  EXPECT_EQ(tick_label(3), "3");
}

TEST(Report, QuickRunEndToEnd) {
  SimOptions o;
  o.quick = true;
  o.saturation_steps = "512";
  const SimConfig config = make_sim_config(o).value();
  SimReport report;
  report.sweep = run_sweep(config.scenario, config.sweep).value();
  report.cost = make_cost_model(config.scenario.card, config.scenario.model);
  report.saturation = run_saturation(config.scenario, *config.saturation).value();
  report.command = "activekv sim --quick";

  const std::string text = report_text(report);
  EXPECT_NE(text.find("history 2 GiB per 32768-token context (16 dense layers)"), std::string::npos);
  // Qwen3.5-27B's state, 153,944,064 B: the seed's "147 MiB" (core/geometry.cpp).
  EXPECT_NE(text.find("recurrent state 146.81 MiB per context"), std::string::npos) << text;
  EXPECT_NE(text.find("heap allocations over"), std::string::npos);
  EXPECT_NE(text.find("What headroom buys"), std::string::npos);
  EXPECT_NE(text.find("Crossover"), std::string::npos);

  const nlohmann::json j = nlohmann::json::parse(report_json(report));
  EXPECT_EQ(j["core_plan"]["history_bytes"], 2ull << 30);
  EXPECT_EQ(j["core_plan"]["histories"], 32u);
  EXPECT_EQ(j["heap_allocations"], 0u);
  EXPECT_EQ(j["cells"].size(), 3u * 3u * 3u);
  EXPECT_EQ(j["saturation"]["activekv"]["evictions"], 0u);
  EXPECT_TRUE(j["saturation"]["windows"].is_array());

  const std::string html = report_html(report);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  EXPECT_GE(static_cast<int>(std::count(html.begin(), html.end(), '\n')), 100);
  std::size_t svgs = 0;
  for (std::size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++svgs;
  // 3 concurrency panels + 3 length panels + the crossover chart + evictions + running.
  EXPECT_EQ(svgs, 9u);
  EXPECT_EQ(html.find("http://", html.find("<body>")), html.find("http://www.w3.org/2000/svg"));  // nothing external
}

}  // namespace
}  // namespace activekv::sim
