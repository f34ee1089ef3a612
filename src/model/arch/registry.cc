#include <array>

#include "model/arch/arch.h"

namespace icecache {

namespace {
std::array<const ArchSpec*, 3> All() { return {&LlamaArch(), &Qwen2Arch(), &Qwen3Arch()}; }
}  // namespace

const ArchSpec* FindArchByGgufName(std::string_view name) {
  for (const ArchSpec* a : All()) {
    for (auto n : a->gguf_names) {
      if (n == name) return a;
    }
  }
  return nullptr;
}

const ArchSpec* FindArchByHfClass(std::string_view hf_class) {
  for (const ArchSpec* a : All()) {
    for (auto n : a->hf_classes) {
      if (n == hf_class) return a;
    }
  }
  return nullptr;
}

std::string SupportedArchList() {
  std::string s;
  for (const ArchSpec* a : All()) {
    if (!s.empty()) s += ", ";
    s += a->name;
    s += " (";
    bool first = true;
    for (auto n : a->hf_classes) {
      if (!first) s += ", ";
      s += n;
      first = false;
    }
    s += ")";
  }
  return s;
}

}  // namespace icecache
