#include "models/record/precision.h"

namespace tctl {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names{"float32", "mixed_bfloat16", "mixed_float16"};
  return names;
}

std::string precision_note(const std::string& precision, const std::string& device) {
  if (precision == "float32") return "";
  std::string line = "precision " + precision + ": " + device +
                     " computes it in float32 (no backend has reduced-precision kernels yet); the weights are "
                     "float32's";
  if (precision == "mixed_float16") line += ", and dynamic loss scaling runs as it will in float16";
  return line;
}

}  // namespace tctl
