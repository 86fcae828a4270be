// svg_chart.cpp — axes, ticks, legend and series as SVG text.
#include "serve/svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace activekv::serve {

namespace {

constexpr int margin_left = 70;
constexpr int margin_right = 180;  // legend
constexpr int margin_top = 30;
constexpr int margin_bottom = 45;
constexpr int ticks = 5;

std::vector<ChartPoint> thin(const std::vector<ChartPoint>& points, std::size_t points_max) {
  if (points.size() <= points_max || points_max < 2) return points;
  std::vector<ChartPoint> out;
  out.reserve(points_max + 1);
  const double bucket = static_cast<double>(points.size()) / static_cast<double>(points_max);
  for (std::size_t b = 0; b < points_max; ++b) {
    const auto lo = static_cast<std::size_t>(static_cast<double>(b) * bucket);
    const auto hi = std::min(points.size(), static_cast<std::size_t>(static_cast<double>(b + 1) * bucket));
    if (lo >= hi) continue;
    out.push_back(*std::max_element(points.begin() + static_cast<std::ptrdiff_t>(lo),
                                    points.begin() + static_cast<std::ptrdiff_t>(hi),
                                    [](const ChartPoint& a, const ChartPoint& c) { return a.y < c.y; }));
  }
  return out;
}

// A "nice" tick step covering span in about `ticks` steps: 1, 2 or 5 × 10^k.
double nice_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * power) return m * power;
  }
  return 10 * power;
}

std::string tick_label(double v) {
  const double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.4g}", v);
}

}  // namespace

const char* palette_colour(std::size_t i) noexcept {
  static constexpr const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                            "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};
  return colours[i % (sizeof(colours) / sizeof(colours[0]))];
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_svg(const Chart& chart) {
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_max = 0;
  for (const ChartSeries& s : chart.series) {
    for (const ChartPoint& p : s.points) {
      x_min = std::min(x_min, p.x);
      x_max = std::max(x_max, p.x);
      y_max = std::max(y_max, p.y);
    }
  }
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1;
  if (x_max <= x_min) x_max = x_min + 1;
  const double y_step = nice_step(y_max > 0 ? y_max : 1);
  const double y_top = y_step * std::ceil((y_max > 0 ? y_max : 1) / y_step);
  const double x_step = nice_step(x_max - x_min);
  const int plot_w = chart.width - margin_left - margin_right;
  const int plot_h = chart.height - margin_top - margin_bottom;
  auto px = [&](double x) { return margin_left + (x - x_min) / (x_max - x_min) * plot_w; };
  auto py = [&](double y) { return margin_top + plot_h - y / y_top * plot_h; };

  std::string svg = fmt::format(
      "<svg id=\"{}\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"11\">\n",
      html_escape(chart.id), chart.width, chart.height, chart.width, chart.height);
  svg += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", margin_left,
                     html_escape(chart.title));
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#999\"/>\n", margin_left,
                     margin_top, plot_w, plot_h);
  for (double y = 0; y <= y_top * (1 + 1e-9); y += y_step) {
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                       margin_left, margin_left + plot_w, py(y), py(y), margin_left - 6, py(y) + 4, tick_label(y));
  }
  for (double x = std::ceil(x_min / x_step) * x_step; x <= x_max * (1 + 1e-9); x += x_step) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x), margin_top + plot_h + 15,
                       tick_label(x));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", margin_left + plot_w / 2,
                     chart.height - 8, html_escape(chart.x_label));
  svg += fmt::format("<text transform=\"translate(14,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     margin_top + plot_h / 2, html_escape(chart.y_label));

  int legend_y = margin_top + 6;
  for (const ChartSeries& s : chart.series) {
    const std::vector<ChartPoint> points = thin(s.points, chart.points_max);
    const std::string name = html_escape(s.name);
    if (s.style == SeriesStyle::dots) {
      svg += fmt::format("<g class=\"series\" data-series=\"{}\" data-points=\"{}\" fill=\"{}\">", name, points.size(), s.colour);
      for (const ChartPoint& p : points) svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"1.8\"/>", px(p.x), py(p.y));
      svg += "</g>\n";
    } else {
      std::string coords;
      for (std::size_t i = 0; i < points.size(); ++i) {
        if (s.style == SeriesStyle::step && i > 0) coords += fmt::format("{:.1f},{:.1f} ", px(points[i].x), py(points[i - 1].y));
        coords += fmt::format("{:.1f},{:.1f} ", px(points[i].x), py(points[i].y));
      }
      svg += fmt::format("<polyline class=\"series\" data-series=\"{}\" data-points=\"{}\" fill=\"none\" stroke=\"{}\" "
                         "stroke-width=\"1.5\"{} points=\"{}\"/>\n",
                         name, points.size(), s.colour, s.style == SeriesStyle::dashed ? " stroke-dasharray=\"6 4\"" : "",
                         coords);
    }
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                       margin_left + plot_w + 10, legend_y, s.colour, margin_left + plot_w + 27, legend_y + 5, name);
    legend_y += 15;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace activekv::serve
