// Internal: safetensors dtype names ("F32", "F16", "BF16") and our DTypes.
#pragma once

#include <string>

#include "core/dtype.h"

namespace icecache {

// False for every dtype we do not read (I64, F64, F8_E4M3, ... and unknown names).
inline bool SafetensorsDTypeFromName(const std::string& name, DType* out) {
  if (name == "F32") {
    *out = DType::kF32;
  } else if (name == "F16") {
    *out = DType::kF16;
  } else if (name == "BF16") {
    *out = DType::kBF16;
  } else {
    return false;
  }
  return true;
}

// REQUIRES: t is F32, F16 or BF16.
inline const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      return nullptr;
  }
}

}  // namespace icecache
