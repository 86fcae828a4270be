// report_render_test.cpp — report.html renders in a real browser with its charts and data.
//
// Writes the report of a fake-engine run, opens it in headless Chromium
// (--dump-dom prints the DOM after parsing and layout) and checks that each of
// the four charts is an <svg> in the rendered DOM whose series hold data
// points. Chromium comes from scripts/install-deps.sh --test (Debian package
// `chromium`); its absence is a failure with that instruction, not a skip.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include "serve/fake_engine.hpp"
#include "serve/run_job.hpp"
#include "serve/run_report.hpp"

namespace activekv::serve {
namespace {

std::string find_browser() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string probe = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return name;
  }
  return {};
}

std::string run_capture(const std::string& command) {
  std::string output;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  std::array<char, 65536> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  pclose(pipe);
  return output;
}

TEST(ReportRender, ChartsAreInTheRenderedDom) {
  const std::string browser = find_browser();
  ASSERT_FALSE(browser.empty()) << "headless Chromium is needed to check the report renders: run scripts/install-deps.sh --test";

  ManualClock clock;
  FakeEngineConfig fc;
  fc.histories = 3;
  fc.max_context_tokens = 1024;
  fc.pool_pages = 40;
  fc.target_pages = 12;
  fc.burst_pages = 24;
  fc.clock = &clock;
  FakeEngine engine(fc);
  std::ostringstream trace_text;
  for (int i = 0; i < 8; ++i) {
    trace_text << "{\"id\": \"r" << i << "\", \"arrival_s\": " << i * 0.05 << ", \"prompt_tokens\": [";
    for (int t = 0; t < 40 + 60 * i; ++t) trace_text << (t ? ", " : "") << (t * 7 + i) % 256;
    trace_text << "], \"max_tokens\": " << 10 + 5 * i << "}\n";
  }
  std::istringstream in(trace_text.str());
  auto trace = read_trace(in, "render");
  ASSERT_TRUE(trace) << trace.error().describe();
  auto config = parse_run_config(R"({"host_pool": "1MiB", "device_pool": "64KiB", "page_tokens": 16, "tile_tokens": 64,
      "tiles": 2, "max_seqs": 4, "step_tokens": 64, "prefill_chunk_tokens": 32, "threads": 1, "stop_at_eos": false})",
                                 "render");
  ASSERT_TRUE(config) << config.error().describe();
  std::FILE* sink = std::fopen("/dev/null", "w");
  RunJobOptions options;
  options.out = sink;
  ReportInputs inputs;
  inputs.model = "fake";
  inputs.trace = "render";
  inputs.config_source = "render";
  auto result = run_job(engine, clock, *trace, *config, inputs, options);
  std::fclose(sink);
  ASSERT_TRUE(result) << result.error().describe();

  const auto dir = std::filesystem::temp_directory_path() / "activekv_report_render_test";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(write_report(dir.string(), result->inputs, result->figures));
  const std::string command = browser + " --headless --disable-gpu --no-sandbox --user-data-dir=" + (dir / "profile").string() +
                              " --dump-dom file://" + (dir / "report.html").string() + " 2>/dev/null";
  const std::string dom = run_capture(command);
  ASSERT_NE(dom.find("ActiveKV run report"), std::string::npos) << "the browser did not render the page:\n" << dom.substr(0, 2000);

  for (const char* id : {"chart-pages", "chart-latency", "chart-bytes", "chart-queue"}) {
    SCOPED_TRACE(id);
    const auto begin = dom.find(std::string("id=\"") + id + "\"");
    ASSERT_NE(begin, std::string::npos) << "chart missing from the DOM";
    const auto end = dom.find("</svg>", begin);
    ASSERT_NE(end, std::string::npos);
    const std::string svg = dom.substr(begin, end - begin);
    const std::regex points_re("data-points=\"([0-9]+)\"");
    int series = 0, with_data = 0;
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), points_re); it != std::sregex_iterator(); ++it) {
      ++series;
      with_data += std::stoi((*it)[1]) > 0;
    }
    EXPECT_GE(series, 2);
    EXPECT_GE(with_data, 1);
    EXPECT_TRUE(svg.find("<polyline") != std::string::npos || svg.find("<circle") != std::string::npos);
  }
  // One series per context in the pages chart, each with points.
  EXPECT_NE(dom.find("data-series=\"r7\""), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace activekv::serve
