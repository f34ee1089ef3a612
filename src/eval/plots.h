// The plots of an eval, as SVG: the needle depth x length heatmap of one KV configuration, and
// a score (or any metric) against KV budget.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "eval/record.h"

namespace icecache::eval {

// Rows: needle depth (0% at the top); columns: length; colour and label: mean score. Lengths
// beyond `trained_context` are marked with a dagger.
std::string NeedleHeatmapSvg(const std::vector<EvalRecord>& records, const std::string& policy,
                             int budget, const std::string& title, int trained_context);

struct BudgetPlotSpec {
  std::string title;
  std::string y_label;
  double y_min = 0, y_max = 1;  // y_max <= y_min: fit to the data
  std::function<double(const EvalRecord&)> value;
};

// One panel per length: a line per sparse policy (mean value at each budget), full KV as a
// dashed horizontal line. `budgets` are the x positions (evenly spaced, ascending); budgets in
// the records are added.
std::string BudgetPlotSvg(const std::vector<EvalRecord>& records, const BudgetPlotSpec& spec,
                          std::vector<int> budgets, int trained_context);

}  // namespace icecache::eval
