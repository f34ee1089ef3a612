#include "eval/ruler.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eval/ruler_internal.h"
#include "eval/words.h"

namespace icecache::eval {

namespace ruler {

Status CheckRoom(const std::string& subtask, int length, int64_t room) {
  if (room >= 32) return Status::Ok();
  return InvalidArgument(fmt::format(
      "ruler {}: a length of {} tokens leaves no room for the document", subtask, length));
}

}  // namespace ruler

const std::vector<std::string>& RulerSubtasks() {
  static const std::vector<std::string> names = {
      "niah_single",     "niah_essay", "niah_uuid", "niah_multikey", "niah_multivalue",
      "niah_multiquery", "vt",         "cwe",       "fwe",           "qa"};
  return names;
}

namespace {

// FNV-1a: a hash that is the same with every standard library (std::hash is not).
uint64_t NameHash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

Result<ruler::NiahSpec> NiahSpecFor(const std::string& name) {
  ruler::NiahSpec s;
  s.name = name;
  if (name == "niah_single") return s;
  s.essay = true;
  if (name == "niah_essay") return s;
  if (name == "niah_uuid") {
    s.uuid = true;
    return s;
  }
  if (name == "niah_multikey") {
    s.keys = 4;
    return s;
  }
  if (name == "niah_multivalue") {
    s.values = 4;
    return s;
  }
  if (name == "niah_multiquery") {
    s.keys = 4;
    s.queries = 4;
    return s;
  }
  return InvalidArgument("not a needle subtask: " + name);
}

}  // namespace

Result<std::vector<Sample>> MakeRulerSamples(const TextCodec& codec, const RulerOptions& options,
                                             int length) {
  std::vector<std::string> names = options.subtasks.empty() ? RulerSubtasks() : options.subtasks;
  for (const std::string& n : names) {
    const auto& all = RulerSubtasks();
    if (std::find(all.begin(), all.end(), n) == all.end()) {
      return InvalidArgument(fmt::format("ruler: unknown subtask '{}' (expected one of: {})", n,
                                         fmt::join(all, ", ")));
    }
  }
  std::vector<Sample> out;
  for (size_t t = 0; t < names.size(); ++t) {
    const std::string& name = names[t];
    for (int i = 0; i < options.samples; ++i) {
      // The seed of a sample depends on its subtask and index, not on the other subtasks run.
      const uint64_t seed = MixSeed(options.seed, NameHash(name), static_cast<uint64_t>(i));
      Result<Sample> s = InvalidArgument("unreachable");
      if (name.starts_with("niah_")) {
        ICECACHE_ASSIGN_OR_RETURN(ruler::NiahSpec spec, NiahSpecFor(name));
        s = ruler::MakeNiah(codec, spec, spec.essay ? *options.essay : *options.noise, length,
                            seed);
      } else if (name == "vt") {
        s = ruler::MakeVariableTracking(codec, *options.noise, length, seed);
      } else if (name == "cwe") {
        s = ruler::MakeCommonWords(codec, length, seed);
      } else if (name == "fwe") {
        s = ruler::MakeFrequentWords(codec, length, seed);
      } else {
        s = ruler::MakeQa(codec, length, seed);
      }
      if (!s.ok()) return s.status();
      s->subtask = name;
      s->id = std::to_string(i);
      out.push_back(std::move(*s));
    }
  }
  return out;
}

}  // namespace icecache::eval
