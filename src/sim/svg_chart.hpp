// svg_chart.hpp — small, dependency-free SVG charts for the simulation report.
//
// A chart is plain data (series of points, axes, scales) rendered into one
// <svg> element that a self-contained HTML page can inline. Two kinds:
//   line charts  x and y each linear or log; a series may have gaps (a point
//                with y <= 0 is not drawn and breaks the line: "does not fit")
//   bar charts   grouped bars per x category (evictions per window)
// Panels that must be compared share a y range: the caller sets y_min/y_max.
// Text is escaped; numbers are printed with fixed precision so the output is
// deterministic for a given input.
#pragma once

#include <string>
#include <vector>

namespace activekv::sim {

struct ChartPoint {
  double x = 0.0;
  double y = 0.0;  // <= 0: no value here (a gap)
};

struct ChartSeries {
  std::string name;
  std::string color;  // CSS colour
  std::vector<ChartPoint> points;
  bool dashed = false;
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  double y_min = 0.0;  // 0 with y_max 0: from the data
  double y_max = 0.0;
  std::vector<double> x_ticks;  // empty: from the data's x values
  std::vector<ChartSeries> series;
  int width = 420;
  int height = 300;
  bool legend = true;
};

struct BarChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<double> x;                 // category positions (e.g. a window's first step)
  std::vector<ChartSeries> series;       // points' x ignored: series[s].points[i].y is bar i
  int width = 860;
  int height = 280;
};

std::string render_svg(const LineChart& chart);
std::string render_svg(const BarChart& chart);
std::string escape_xml(const std::string& text);
// "1K", "32K", "128K" for token counts; plain numbers otherwise.
std::string tick_label(double value);

}  // namespace activekv::sim
