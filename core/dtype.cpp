#include "core/dtype.h"

namespace tctl {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

std::string_view dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
  }
  return "?";
}

}  // namespace tctl
