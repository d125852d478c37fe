// tensorctl summary SPEC|CONFIG|RUN_DIR|KERAS_JSON: the Keras-style table of a model's layers.
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "models/io/spec_reader.h"
#include "models/nn/sequential.h"
#include "models/record/train_config.h"

namespace tctl::app {

namespace {
struct SummaryFlags {
  std::string path;
  bool json = false;
};

int run_summary(const SummaryFlags& f) {
  const std::string file = model_file_of(f.path);
  const TrainConfig c = load_model_file(file);
  std::optional<Sequential> net;
  net.emplace(Sequential::from_json(c.model_spec, c.model_file, c.model_path, c.seed));
  if (f.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (std::size_t i = 0; i < net->layers().size(); ++i) {
      const auto& l = *net->layers()[i];
      auto shape = net->layer_output_shapes()[i];
      std::vector<std::int64_t> dims{-1};
      dims.insert(dims.end(), shape.dims().begin(), shape.dims().end());
      layers.push_back({{"name", l.name()}, {"type", l.type()}, {"output_shape", dims}, {"params", l.param_count()}});
    }
    nlohmann::json j = {{"name", net->name()},
                        {"layers", layers},
                        {"total_params", net->param_count()},
                        {"trainable_params", net->trainable_param_count()}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < net->layers().size(); ++i) {
    const auto& l = *net->layers()[i];
    rows.push_back({l.name() + " (" + l.type() + ")", Shape::concat(-1, net->layer_output_shapes()[i]).keras_string(),
                    thousands(l.param_count())});
  }
  const std::int64_t total = net->param_count(), trainable = net->trainable_param_count();
  std::printf("Model: \"%s\"\n", net->name().c_str());
  std::printf("%s", box_table({"Layer (type)", "Output Shape", "Param #"}, rows, {false, false, true}).c_str());
  std::printf(" Total params: %s (%s)\n", thousands(total).c_str(),
              human_bytes(4.0 * static_cast<double>(total)).c_str());
  std::printf(" Trainable params: %s (%s)\n", thousands(trainable).c_str(),
              human_bytes(4.0 * static_cast<double>(trainable)).c_str());
  std::printf(" Non-trainable params: %s (%s)\n", thousands(total - trainable).c_str(),
              human_bytes(4.0 * static_cast<double>(total - trainable)).c_str());
  return 0;
}

void define_flags(CLI::App& cmd, SummaryFlags& flags) {
  cmd.add_option("spec", flags.path, "Model spec, train config, run directory, or Keras model JSON")
      ->required()
      ->check(non_empty("a model spec, train config, run directory or Keras model JSON"));
  cmd.add_flag("--json", flags.json, "Print the summary as JSON");
}

}  // namespace

Command add_summary_command(CLI::App& app) {
  return add_command<SummaryFlags>(app, "summary", "Print a model's layers, output shapes and parameter counts",
                                   define_flags, run_summary);
}

}  // namespace tctl::app
