// svg_chart.cpp — axes, ticks, polylines and bars as SVG text.
#include "sim/svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace activekv::sim {

namespace {

constexpr int margin_left = 62;
constexpr int margin_right = 14;
constexpr int margin_top = 30;
constexpr int margin_bottom = 46;

struct Axis {
  double lo = 0.0, hi = 1.0;
  bool log = false;
  int pixel_lo = 0, pixel_hi = 1;
  double map(double v) const {
    const double a = log ? std::log10(lo) : lo;
    const double b = log ? std::log10(hi) : hi;
    const double t = ((log ? std::log10(v) : v) - a) / (b - a);
    return pixel_lo + t * (pixel_hi - pixel_lo);
  }
};

std::vector<double> y_ticks(const Axis& axis) {
  std::vector<double> ticks;
  if (axis.log) {
    for (double decade = std::pow(10.0, std::floor(std::log10(axis.lo))); decade <= axis.hi * 1.0001; decade *= 10.0) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = decade * m;
        if (v >= axis.lo * 0.9999 && v <= axis.hi * 1.0001) ticks.push_back(v);
      }
    }
    return ticks;
  }
  const double span = axis.hi - axis.lo;
  const double raw = span / 5.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (magnitude * m >= raw) {
      step = magnitude * m;
      break;
    }
  }
  for (double v = std::ceil(axis.lo / step) * step; v <= axis.hi + step * 1e-6; v += step) ticks.push_back(v);
  return ticks;
}

std::string number(double v) {
  if (v >= 100.0 || v == std::floor(v)) return fmt::format("{:.0f}", v);
  if (v >= 10.0) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2g}", v);
}

std::string frame(int width, int height, const std::string& title, const std::string& x_label,
                  const std::string& y_label) {
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      width, height);
  out += fmt::format("<text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                     width / 2, escape_xml(title));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     (margin_left + width - margin_right) / 2, height - 8, escape_xml(x_label));
  out += fmt::format("<text x=\"14\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {0})\">{1}</text>\n",
                     (margin_top + height - margin_bottom) / 2, escape_xml(y_label));
  return out;
}

}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string tick_label(double value) {
  if (value >= 1024.0 && std::fmod(value, 1024.0) == 0.0) return fmt::format("{:.0f}K", value / 1024.0);
  return number(value);
}

std::string render_svg(const LineChart& chart) {
  double x_lo = std::numeric_limits<double>::max(), x_hi = std::numeric_limits<double>::lowest();
  double y_lo = std::numeric_limits<double>::max(), y_hi = std::numeric_limits<double>::lowest();
  for (const ChartSeries& s : chart.series) {
    for (const ChartPoint& p : s.points) {
      x_lo = std::min(x_lo, p.x);
      x_hi = std::max(x_hi, p.x);
      if (p.y <= 0.0) continue;
      y_lo = std::min(y_lo, p.y);
      y_hi = std::max(y_hi, p.y);
    }
  }
  if (x_lo > x_hi) x_lo = 0.0, x_hi = 1.0;
  if (x_lo == x_hi) x_hi = x_lo + 1.0;
  if (chart.y_max > 0.0) y_lo = chart.y_min, y_hi = chart.y_max;
  if (y_lo > y_hi) y_lo = 1.0, y_hi = 10.0;
  if (y_lo == y_hi) y_hi = y_lo * 2.0;
  if (!chart.log_y) y_lo = std::min(0.0, y_lo);
  const Axis x{x_lo, x_hi, chart.log_x, margin_left, chart.width - margin_right};
  const Axis y{y_lo, y_hi, chart.log_y, chart.height - margin_bottom, margin_top};

  std::string out = frame(chart.width, chart.height, chart.title, chart.x_label, chart.y_label);
  for (double v : y_ticks(y)) {
    const double py = y.map(v);
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", margin_left,
                       chart.width - margin_right, py, py);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", margin_left - 4, py + 4, number(v));
  }
  std::vector<double> xt = chart.x_ticks;
  if (xt.empty()) {
    for (const ChartSeries& s : chart.series) {
      for (const ChartPoint& p : s.points) xt.push_back(p.x);
    }
    std::sort(xt.begin(), xt.end());
    xt.erase(std::unique(xt.begin(), xt.end()), xt.end());
  }
  for (double v : xt) {
    const double px = x.map(v);
    out += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/>\n", px, margin_top,
                       chart.height - margin_bottom);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px,
                       chart.height - margin_bottom + 14, tick_label(v));
  }
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", margin_left,
                     margin_top, chart.width - margin_left - margin_right, chart.height - margin_top - margin_bottom);
  int legend_row = 0;
  for (const ChartSeries& s : chart.series) {
    std::string path;
    for (const ChartPoint& p : s.points) {
      if (p.y <= 0.0 || p.y < y.lo || p.y > y.hi * 1.0001) {
        path += ' ';  // a gap breaks the line
        continue;
      }
      path += fmt::format("{}{:.1f},{:.1f}", (path.empty() || path.back() == ' ') ? "M" : " L", x.map(p.x), y.map(p.y));
    }
    out += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", path, s.color,
                       s.dashed ? " stroke-dasharray=\"5,3\"" : "");
    for (const ChartPoint& p : s.points) {
      if (p.y <= 0.0 || p.y < y.lo || p.y > y.hi * 1.0001) continue;
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"><title>{}: {} → {}</title></circle>\n",
                         x.map(p.x), y.map(p.y), s.color, escape_xml(s.name), tick_label(p.x), number(p.y));
    }
    if (chart.legend) {
      const int ly = margin_top + 12 + 14 * legend_row++;
      out += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>\n",
                         margin_left + 8, margin_left + 26, ly - 4, s.color, s.dashed ? " stroke-dasharray=\"5,3\"" : "");
      out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", margin_left + 30, ly, escape_xml(s.name));
    }
  }
  out += "</svg>\n";
  return out;
}

std::string render_svg(const BarChart& chart) {
  double y_hi = 1.0;
  for (const ChartSeries& s : chart.series) {
    for (const ChartPoint& p : s.points) y_hi = std::max(y_hi, p.y);
  }
  const Axis y{0.0, y_hi * 1.1, false, chart.height - margin_bottom, margin_top};
  std::string out = frame(chart.width, chart.height, chart.title, chart.x_label, chart.y_label);
  for (double v : y_ticks(y)) {
    const double py = y.map(v);
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", margin_left,
                       chart.width - margin_right, py, py);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", margin_left - 4, py + 4, number(v));
  }
  const std::size_t groups = chart.x.size();
  const double plot_width = chart.width - margin_left - margin_right;
  const double group_width = groups > 0 ? plot_width / static_cast<double>(groups) : plot_width;
  const double bar_width = group_width * 0.8 / static_cast<double>(std::max<std::size_t>(1, chart.series.size()));
  const std::size_t label_every = std::max<std::size_t>(1, groups / 12);
  for (std::size_t g = 0; g < groups; ++g) {
    const double gx = margin_left + static_cast<double>(g) * group_width;
    if (g % label_every == 0) {
      out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", gx + group_width / 2,
                         chart.height - margin_bottom + 14, number(chart.x[g]));
    }
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
      const double v = g < chart.series[s].points.size() ? chart.series[s].points[g].y : 0.0;
      const double top = y.map(v);
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} @ {}: {}</title></rect>\n",
          gx + group_width * 0.1 + static_cast<double>(s) * bar_width, top, std::max(bar_width - 0.5, 0.5), y.map(0.0) - top,
          chart.series[s].color, escape_xml(chart.series[s].name), number(chart.x[g]), number(v));
    }
  }
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", margin_left,
                     margin_top, chart.width - margin_left - margin_right, chart.height - margin_top - margin_bottom);
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    const int ly = margin_top + 12 + 14 * static_cast<int>(s);
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"8\" fill=\"{}\"/>\n", margin_left + 8, ly - 8,
                       chart.series[s].color);
    out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", margin_left + 26, ly, escape_xml(chart.series[s].name));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace activekv::sim
