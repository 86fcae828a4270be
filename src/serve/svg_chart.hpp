// svg_chart.hpp — a line/dot chart as inline SVG, with no library and no script.
//
// The report (run_report.hpp) must be one self-contained HTML file that a
// browser renders offline, so charts are plain <svg> with axes, ticks, a legend
// and one <polyline> (or a group of <circle>s) per series. Every series element
// carries class="series" and data-series="<name>" and data-points="<count>",
// so a test can find the charts and their data in the rendered DOM.
// Series longer than points_max are thinned by keeping, per bucket, the point
// with the largest y (peaks survive, as in a min/max envelope).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace activekv::serve {

struct ChartPoint {
  double x = 0;
  double y = 0;
};

enum class SeriesStyle { line, step, dots, dashed };

struct ChartSeries {
  std::string name;
  std::string colour;  // CSS colour
  SeriesStyle style = SeriesStyle::line;
  std::vector<ChartPoint> points;
};

struct Chart {
  std::string id;       // element id
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  int width = 900;
  int height = 280;
  std::size_t points_max = 1500;  // per series, after thinning
};

std::string render_svg(const Chart& chart);

// Escapes &, <, >, " and ' for HTML text and attributes.
std::string html_escape(std::string_view text);

// A readable colour for series i of a palette.
const char* palette_colour(std::size_t i) noexcept;

}  // namespace activekv::serve
