// A small SVG writer for eval plots (no plotting dependency): shapes and text in user units.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace icecache::eval {

class SvgDocument {
 public:
  SvgDocument(double width, double height);

  void Rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view stroke = "none");
  void Line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            std::string_view dash = "");
  void Polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke,
                double width = 2, std::string_view dash = "");
  void Circle(double cx, double cy, double r, std::string_view fill);
  // anchor: "start", "middle" or "end"; rotate: degrees around (x, y).
  void Text(double x, double y, std::string_view text, double size = 12,
            std::string_view anchor = "start", std::string_view fill = "#222", double rotate = 0,
            bool bold = false);

  // The whole document.
  std::string Finish() const;

 private:
  double width_, height_;
  std::string body_;
};

// Escapes &, <, >, " for XML text and attributes.
std::string XmlEscape(std::string_view text);
// A colour for a score in [0, 1]: red (0) through yellow to green (1), "#rrggbb".
std::string ScoreColor(double score);
// A distinct colour per series index.
std::string SeriesColor(int index);

}  // namespace icecache::eval
