#include "models/record/precision.h"

namespace tctl {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names{"float32", "mixed_bfloat16", "mixed_float16"};
  return names;
}

ComputeType precision_compute_type(const std::string& precision) {
  if (precision == "mixed_bfloat16") return ComputeType::kBF16;
  if (precision == "mixed_float16") return ComputeType::kF16;
  return ComputeType::kF32;
}

std::string precision_note(const std::string& precision, const std::string& device) {
  if (precision == "float32") return "";
  const bool on_cpu = device.rfind("cpu", 0) == 0;
  std::string line = "precision " + precision + ": ";
  if (on_cpu && precision == "mixed_bfloat16" && cpu_bf16_products())
    line += device +
            "'s dense products read bfloat16 operands (AVX-512 BF16) and sum in float32; convolutions, attention, "
            "recurrent steps, weights, optimizer state, reductions and losses stay float32";
  else if (on_cpu)
    line +=
        device + " computes it in float32 (" +
        (precision == "mixed_bfloat16" ? "no bfloat16 products here: they need AVX-512 BF16, and TCTL_CPU_BF16 not 0"
                                       : "the CPU has no float16 products") +
        "); the weights are float32's";
  else
    line += "products on " + device + " read " + std::string(compute_type_name(precision_compute_type(precision))) +
            " operands and sum in float32; weights, optimizer state, reductions and losses stay float32";
  if (precision == "mixed_float16")
    line += on_cpu ? ", and dynamic loss scaling runs as it will in float16" : ", with dynamic loss scaling";
  return line;
}

}  // namespace tctl
