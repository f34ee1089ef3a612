#include "core/dtype.h"

namespace icecache {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kF32, "f32", 1, 4},       {DType::kF16, "f16", 1, 2},
    {DType::kBF16, "bf16", 1, 2},     {DType::kI32, "i32", 1, 4},
    {DType::kQ8_0, "q8_0", 32, 34},   {DType::kQ4_0, "q4_0", 32, 18},
    {DType::kQ4_1, "q4_1", 32, 20},   {DType::kQ4_K, "q4_k", 256, 144},
    {DType::kQ5_K, "q5_k", 256, 176}, {DType::kQ6_K, "q6_k", 256, 210},
};
const DTypeInfo& Info(DType t) { return kInfo[static_cast<int>(t)]; }
}  // namespace

int64_t BlockElems(DType t) { return Info(t).block_elems; }
int64_t BlockBytes(DType t) { return Info(t).block_bytes; }
bool IsQuantized(DType t) { return Info(t).block_elems > 1; }
std::string_view DTypeName(DType t) { return Info(t).name; }

bool ParseDType(std::string_view name, DType* out) {
  for (const auto& i : kInfo) {
    if (i.name == name) {
      *out = i.type;
      return true;
    }
  }
  return false;
}

}  // namespace icecache
