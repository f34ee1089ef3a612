#include "eval/svg.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

namespace icecache::eval {

SvgDocument::SvgDocument(double width, double height) : width_(width), height_(height) {}

void SvgDocument::Rect(double x, double y, double w, double h, std::string_view fill,
                       std::string_view stroke) {
  body_ += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" "
      "stroke=\"{}\"/>\n",
      x, y, w, h, fill, stroke);
}

void SvgDocument::Line(double x1, double y1, double x2, double y2, std::string_view stroke,
                       double width, std::string_view dash) {
  body_ += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
      "stroke-width=\"{:.1f}\"{}/>\n",
      x1, y1, x2, y2, stroke, width,
      dash.empty() ? std::string() : fmt::format(" stroke-dasharray=\"{}\"", dash));
}

void SvgDocument::Polyline(const std::vector<std::pair<double, double>>& points,
                           std::string_view stroke, double width, std::string_view dash) {
  std::string pts;
  for (const auto& [x, y] : points) pts += fmt::format("{:.1f},{:.1f} ", x, y);
  body_ += fmt::format(
      "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:.1f}\"{}/>\n", pts,
      stroke, width, dash.empty() ? std::string() : fmt::format(" stroke-dasharray=\"{}\"", dash));
}

void SvgDocument::Circle(double cx, double cy, double r, std::string_view fill) {
  body_ += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\"/>\n", cx, cy,
                       r, fill);
}

void SvgDocument::Text(double x, double y, std::string_view text, double size,
                       std::string_view anchor, std::string_view fill, double rotate, bool bold) {
  body_ += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" text-anchor=\"{}\" fill=\"{}\"{}{}>"
      "{}</text>\n",
      x, y, size, anchor, fill, bold ? " font-weight=\"bold\"" : "",
      rotate != 0 ? fmt::format(" transform=\"rotate({:.1f} {:.1f} {:.1f})\"", rotate, x, y)
                  : std::string(),
      XmlEscape(text));
}

std::string SvgDocument::Finish() const {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"Helvetica, Arial, sans-serif\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{}</svg>\n",
      width_, height_, width_, height_, body_);
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string ScoreColor(double score) {
  const double s = std::clamp(std::isnan(score) ? 0.0 : score, 0.0, 1.0);
  // Two linear ramps: red (215,48,39) -> yellow (254,224,139) -> green (26,152,80).
  auto mix = [](double a, double b, double t) {
    return static_cast<int>(std::lround(a + (b - a) * t));
  };
  int r, g, b;
  if (s < 0.5) {
    const double t = s / 0.5;
    r = mix(215, 254, t), g = mix(48, 224, t), b = mix(39, 139, t);
  } else {
    const double t = (s - 0.5) / 0.5;
    r = mix(254, 26, t), g = mix(224, 152, t), b = mix(139, 80, t);
  }
  return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
}

std::string SeriesColor(int index) {
  static constexpr std::array<const char*, 8> kColors = {
      "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  return kColors[static_cast<size_t>(index) % kColors.size()];
}

}  // namespace icecache::eval
