#include "eval/lists.h"

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

namespace icecache::eval {

std::vector<std::string> SplitList(std::string_view list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    pos = end + 1;
  }
  return out;
}

Result<std::vector<int>> ParseLengths(std::string_view list, int min_tokens, int max_tokens) {
  std::vector<int> out;
  for (const std::string& item : SplitList(list)) {
    std::string num = item;
    double scale = 1;
    if (num.back() == 'K' || num.back() == 'k') {
      scale = 1024;
      num.pop_back();
    }
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(num.c_str(), &end);
    if (num.empty() || end != num.c_str() + num.size() || errno != 0 || !(v > 0)) {
      return InvalidArgument("--lengths: '" + item + "' is not a length (e.g. 2K, 4K, 1500)");
    }
    const double tokens = v * scale;
    if (tokens < min_tokens || tokens > max_tokens) {
      return InvalidArgument(
          fmt::format("--lengths: {} is outside {}..{} tokens", item, min_tokens, max_tokens));
    }
    out.push_back(static_cast<int>(tokens));
  }
  if (out.empty()) return InvalidArgument("--lengths: no length given");
  return out;
}

std::string FormatLength(int tokens) {
  if (tokens % 1024 == 0) return fmt::format("{}K", tokens / 1024);
  if (tokens > 1024 && tokens % 512 == 0) return fmt::format("{:.1f}K", tokens / 1024.0);
  return std::to_string(tokens);
}

Result<std::vector<int>> ParsePositiveInts(std::string_view list, std::string_view what) {
  std::vector<int> out;
  for (const std::string& item : SplitList(list)) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (end != item.c_str() + item.size() || errno != 0 || v <= 0 || v > (1 << 30)) {
      return InvalidArgument(fmt::format("{}: '{}' is not a positive integer", what, item));
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return InvalidArgument(fmt::format("{}: empty list", what));
  return out;
}

Result<std::vector<double>> ParseFractions(std::string_view list, std::string_view what) {
  std::vector<double> out;
  for (const std::string& item : SplitList(list)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end != item.c_str() + item.size() || !(v >= 0 && v <= 1)) {
      return InvalidArgument(fmt::format("{}: '{}' is not a number in [0, 1]", what, item));
    }
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgument(fmt::format("{}: empty list", what));
  return out;
}

}  // namespace icecache::eval
