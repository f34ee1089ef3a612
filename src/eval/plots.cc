#include "eval/plots.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "eval/lists.h"
#include "eval/svg.h"

namespace icecache::eval {

namespace {

std::string LengthLabel(int length, int trained) {
  return FormatLength(length) + (trained > 0 && length > trained ? " †" : "");
}

struct Mean {
  double sum = 0;
  int n = 0;
  double value() const { return n ? sum / n : 0; }
};

// The smallest of 1, 2, 2.5, 5 x 10^k at or above v (and above 0).
double NiceCeil(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string NeedleHeatmapSvg(const std::vector<EvalRecord>& records, const std::string& policy,
                             int budget, const std::string& title, int trained_context) {
  std::set<int> length_set;
  std::set<double> depth_set;
  std::map<std::pair<int, double>, Mean> cells;
  for (const EvalRecord& r : records) {
    if (r.policy != policy || r.budget != budget) continue;
    length_set.insert(r.length);
    depth_set.insert(r.depth);
    Mean& m = cells[{r.length, r.depth}];
    m.sum += r.score;
    ++m.n;
  }
  const std::vector<int> lengths(length_set.begin(), length_set.end());
  const std::vector<double> depths(depth_set.begin(), depth_set.end());
  const double cell_w = 90, cell_h = 34, left = 80, top = 50;
  const double width = left + cell_w * std::max<size_t>(lengths.size(), 1) + 110;
  const double height = top + cell_h * std::max<size_t>(depths.size(), 1) + 60;
  SvgDocument svg(width, height);
  svg.Text(width / 2, 24, title, 15, "middle", "#222", 0, true);
  for (size_t c = 0; c < lengths.size(); ++c) {
    svg.Text(left + cell_w * (c + 0.5), top + cell_h * depths.size() + 20,
             LengthLabel(lengths[c], trained_context), 12, "middle");
  }
  svg.Text(left + cell_w * lengths.size() / 2, height - 12, "context length (tokens)", 12,
           "middle");
  svg.Text(18, top + cell_h * depths.size() / 2, "needle depth", 12, "middle", "#222", -90);
  for (size_t row = 0; row < depths.size(); ++row) {
    svg.Text(left - 8, top + cell_h * (row + 0.5) + 4, fmt::format("{:.0f}%", 100 * depths[row]),
             12, "end");
    for (size_t c = 0; c < lengths.size(); ++c) {
      const double x = left + cell_w * c, y = top + cell_h * row;
      auto it = cells.find({lengths[c], depths[row]});
      if (it == cells.end()) {
        svg.Rect(x, y, cell_w, cell_h, "#eeeeee", "white");
        continue;
      }
      const double v = it->second.value();
      svg.Rect(x, y, cell_w, cell_h, ScoreColor(v), "white");
      svg.Text(x + cell_w / 2, y + cell_h / 2 + 4, fmt::format("{:.2f}", v), 12, "middle");
    }
  }
  // Colour key.
  const double kx = left + cell_w * lengths.size() + 30;
  for (int i = 0; i <= 10; ++i) {
    const double v = 1.0 - i / 10.0;
    svg.Rect(kx, top + i * 12, 16, 12, ScoreColor(v));
  }
  svg.Text(kx + 22, top + 10, "1.0", 11);
  svg.Text(kx + 22, top + 130, "0.0", 11);
  if (lengths.empty()) svg.Text(width / 2, top + 20, "no results yet", 13, "middle", "#888");
  return svg.Finish();
}

std::string BudgetPlotSvg(const std::vector<EvalRecord>& records, const BudgetPlotSpec& spec,
                          std::vector<int> budgets, int trained_context) {
  std::set<int> length_set;
  std::vector<std::string> policies;
  std::map<std::tuple<std::string, int, int>, Mean> means;  // (policy, budget, length)
  for (const EvalRecord& r : records) {
    length_set.insert(r.length);
    if (r.policy != "full") {
      if (std::find(budgets.begin(), budgets.end(), r.budget) == budgets.end()) {
        budgets.push_back(r.budget);
      }
      if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) {
        policies.push_back(r.policy);
      }
    }
    Mean& m = means[{r.policy, r.budget, r.length}];
    m.sum += spec.value(r);
    ++m.n;
  }
  std::sort(budgets.begin(), budgets.end());
  double y_min = spec.y_min, y_max = spec.y_max;
  if (y_max <= y_min) {
    y_min = 0;
    double top = 0;
    for (const auto& [k, m] : means) top = std::max(top, m.value());
    y_max = NiceCeil(top);
  }
  const std::vector<int> lengths(length_set.begin(), length_set.end());
  const double pw = 260, ph = 200, left = 60, top = 50, gap = 40;
  const size_t panels = std::max<size_t>(lengths.size(), 1);
  const double width = std::max(left + panels * (pw + gap), 420.0);
  // Legend entries wrap into rows of the plot's width.
  const double entry = 110;
  const int per_row = std::max(1, static_cast<int>((width - left) / entry));
  const int legend_rows = static_cast<int>(policies.size() + 1 + per_row - 1) / per_row;
  const double height = top + ph + 70 + 20 * legend_rows;
  SvgDocument svg(width, height);
  svg.Text(width / 2, 24, spec.title, 15, "middle", "#222", 0, true);
  auto ypos = [&](double v) {
    return top + ph * (1 - (std::clamp(v, y_min, y_max) - y_min) / (y_max - y_min));
  };
  auto xpos = [&](size_t i, double x0) {
    return budgets.size() <= 1 ? x0 + pw / 2 : x0 + 20 + (pw - 40) * i / (budgets.size() - 1.0);
  };
  for (size_t p = 0; p < lengths.size(); ++p) {
    const double x0 = left + p * (pw + gap);
    const int length = lengths[p];
    svg.Rect(x0, top, pw, ph, "#fafafa", "#999");
    svg.Text(x0 + pw / 2, top - 8, LengthLabel(length, trained_context), 13, "middle");
    for (int t = 0; t <= 4; ++t) {
      const double v = y_min + (y_max - y_min) * t / 4;
      svg.Line(x0, ypos(v), x0 + pw, ypos(v), "#e0e0e0");
      if (p == 0) svg.Text(x0 - 6, ypos(v) + 4, fmt::format("{:.3g}", v), 11, "end");
    }
    for (size_t i = 0; i < budgets.size(); ++i) {
      svg.Text(xpos(i, x0), top + ph + 16, std::to_string(budgets[i]), 11, "middle");
    }
    if (auto f = means.find({"full", 0, length}); f != means.end()) {
      svg.Line(x0, ypos(f->second.value()), x0 + pw, ypos(f->second.value()), "#222", 1.5, "6,4");
    }
    for (size_t k = 0; k < policies.size(); ++k) {
      std::vector<std::pair<double, double>> pts;
      for (size_t i = 0; i < budgets.size(); ++i) {
        auto it = means.find({policies[k], budgets[i], length});
        if (it != means.end()) pts.emplace_back(xpos(i, x0), ypos(it->second.value()));
      }
      if (pts.size() > 1) svg.Polyline(pts, SeriesColor(static_cast<int>(k)));
      for (const auto& [x, y] : pts) svg.Circle(x, y, 3.5, SeriesColor(static_cast<int>(k)));
    }
  }
  svg.Text(left + (width - left) / 2 - gap / 2, top + ph + 36,
           "KV budget (tokens per layer and KV head)", 12, "middle");
  svg.Text(16, top + ph / 2, spec.y_label, 12, "middle", "#222", -90);
  // Legend: full KV first, then the policies, wrapping into rows.
  auto slot = [&](size_t i) {
    const size_t row = i / per_row;  // whole rows
    return std::pair<double, double>{left + entry * static_cast<double>(i % per_row),
                                     top + ph + 62 + 20.0 * static_cast<double>(row)};
  };
  const auto [fx, fy] = slot(0);
  svg.Line(fx, fy - 4, fx + 24, fy - 4, "#222", 1.5, "6,4");
  svg.Text(fx + 30, fy, "full KV", 12);
  for (size_t k = 0; k < policies.size(); ++k) {
    const auto [x, y] = slot(k + 1);
    svg.Line(x, y - 4, x + 24, y - 4, SeriesColor(static_cast<int>(k)), 2);
    svg.Text(x + 30, y, policies[k], 12);
  }
  if (policies.empty()) {
    svg.Text(fx + entry, fy, "(no sparse-policy results yet)", 12, "start", "#888");
  }
  return svg.Finish();
}

}  // namespace icecache::eval
