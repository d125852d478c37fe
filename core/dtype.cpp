#include "core/dtype.h"

#include <array>

namespace tctl {

namespace {
// Indexed by DType: {tensorctl's name, safetensors' name}.
constexpr std::array<std::array<std::string_view, 2>, 3> kNames{
    {{"float32", "F32"}, {"int32", "I32"}, {"int64", "I64"}}};
}  // namespace

std::string_view dtype_name(DType t) { return kNames[static_cast<std::size_t>(t)][0]; }

std::string_view dtype_safetensors_name(DType t) { return kNames[static_cast<std::size_t>(t)][1]; }

}  // namespace tctl
