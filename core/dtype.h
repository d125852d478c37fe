// Element types a Tensor can hold. A runtime value: core/ and models/ are not templated on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tctl {

enum class DType : std::uint8_t { kF32, kI32, kI64 };

// Bytes per element.
constexpr std::size_t dtype_size(DType t) { return t == DType::kI64 ? 8 : 4; }

// Lower-case name, as in specs and error messages: "float32", "int32", "int64".
std::string_view dtype_name(DType t);

// The safetensors spelling: "F32", "I32", "I64".
std::string_view dtype_safetensors_name(DType t);

}  // namespace tctl
