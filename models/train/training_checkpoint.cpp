#include "models/train/training_checkpoint.h"

#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"

namespace tctl {

namespace {

// Values training could have written: every weight and slot finite, the slots that sum squares (Adam's v,
// RMSprop's mean square, Adagrad's accumulator) not negative, the step count a whole number from 0 and the
// learning-rate factor positive. A tampered one would otherwise train to NaN weights, or fail later as if
// the learning rate were to blame.
void check_values(const SafetensorsFile& file, const Model& model, const std::string& name) {
  const std::string& type = model.optimizer().config().type;
  const std::string squares = type == "adam" || type == "adamw" ? "/v"
                              : type == "rmsprop"               ? "/velocity"
                              : type == "adagrad"               ? "/accumulator"
                                                                : "";
  for (const NamedTensor& want : checkpoint_tensors(model)) {
    const Tensor* t = file.find(want.name);
    if (t == nullptr || t->dtype() != DType::kF32) continue;
    const bool nonnegative = want.name.starts_with("optimizer/") && !squares.empty() && want.name.ends_with(squares);
    if (const auto i = first_bad_element(*t, nonnegative))
      throw SpecError(name, "tensor " + quote_for_message(want.name),
                      fmt::format("damaged training state: element {} is {}", *i, t->data<float>()[*i]));
  }
  const auto scalar = [&](const char* tensor) {
    const Tensor* t = file.find(tensor);
    return t != nullptr && t->dtype() == DType::kF32 && t->num_elements() == 1 ? std::optional(t->data<float>()[0])
                                                                               : std::nullopt;
  };
  // Counts: whole numbers from 0. The loss scale's good steps stay below its growth interval (reaching it
  // doubles the scale and starts again at 0), and the scale itself within the range UpdateLossScale keeps.
  const auto check_count = [&](const char* tensor, double below) {
    if (const auto n = scalar(tensor); n && (*n < 0.0f || *n != std::floor(*n) || *n >= below))
      throw SpecError(name, fmt::format("tensor \"{}\"", tensor),
                      fmt::format("damaged training state: {} steps (a whole number from 0{})", *n,
                                  below < HUGE_VAL ? fmt::format(" below {}", below) : std::string()));
  };
  check_count("optimizer/iterations", HUGE_VAL);
  check_count("optimizer/skipped_steps", HUGE_VAL);
  check_count("optimizer/loss_scale_good_steps",
              static_cast<double>(model.optimizer().config().loss_scale.growth_steps));
  if (const auto scale = scalar("optimizer/loss_scale"); scale && !(*scale >= 1.0f && *scale <= 0x1p126f))
    throw SpecError(name, "tensor \"optimizer/loss_scale\"",
                    fmt::format("damaged training state: {} (a loss scale from 1 to 2^126)", *scale));
  if (const auto factor = scalar("optimizer/learning_rate_factor"); factor && !(*factor > 0.0f))
    throw SpecError(name, "tensor \"optimizer/learning_rate_factor\"",
                    fmt::format("damaged training state: {} (a factor above 0)", *factor));
}

}  // namespace

std::vector<NamedTensor> checkpoint_tensors(const Model& model) {
  std::vector<NamedTensor> out = variable_values(model.net().variables());
  for (auto& t : variable_values(model.optimizer().state())) out.push_back(std::move(t));
  return out;
}

void save_training_checkpoint(const std::filesystem::path& path, const Model& model, const TrainingState& state,
                              const std::vector<NamedTensor>& extra) {
  std::vector<NamedTensor> tensors = checkpoint_tensors(model);
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  save_safetensors(path, tensors, training_state_metadata(model.net().name(), state));
}

void restore_training_checkpoint(const std::filesystem::path& path, const SafetensorsFile& file, Model& model,
                                 const std::vector<NamedTensor>& extra_expected) {
  std::vector<NamedTensor> expected = checkpoint_tensors(model);
  expected.insert(expected.end(), extra_expected.begin(), extra_expected.end());
  check_against(file, expected, path.string());
  check_values(file, model, path.string());
  assign_from(file, model.net().variables());
  assign_from(file, model.optimizer().state());
}

}  // namespace tctl
