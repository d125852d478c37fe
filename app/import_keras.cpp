// tensorctl import-keras FILE.json|FILE.keras [-o SPEC.json]: converts a Keras Sequential model's architecture
// (to_json(), or a .keras file's config.json) into a tensorctl model spec, printed to stdout or written to SPEC.json.
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "core/errors.h"
#include "models/io/atomic_file.h"
#include "models/io/keras_import.h"
#include "models/io/spec_reader.h"
#include "models/nn/sequential.h"
#include "models/record/keras_model_file.h"
#include "models/run/output_check.h"

namespace tctl::app {

namespace {
struct ImportKerasFlags {
  std::string input;
  std::string output;
};

// nlohmann::json sorts keys; a spec reads better with the model's name and each layer's type first.
nlohmann::ordered_json readable(const nlohmann::json& spec) {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& layer : spec.at("layers")) {
    nlohmann::ordered_json l;
    l["type"] = layer.at("type");
    if (layer.contains("name")) l["name"] = layer.at("name");
    for (auto it = layer.begin(); it != layer.end(); ++it)
      if (it.key() != "type" && it.key() != "name") l[it.key()] = it.value();
    layers.push_back(std::move(l));
  }
  nlohmann::ordered_json out;
  out["name"] = spec.at("name");
  out["input_shape"] = spec.at("input_shape");
  out["layers"] = std::move(layers);
  return out;
}

int run_import_keras(const ImportKerasFlags& f) {
  if (!f.output.empty()) check_output_path(f.output, "--output");
  check_output_keeps_inputs(f.output, "--output", {f.input});

  const KerasModelFile keras = read_keras_model_file(f.input);
  const nlohmann::json& doc = keras.config;
  const nlohmann::json spec = keras_to_spec(doc, keras.place, keras_layer_mappings());
  // A spec we write must load: shapes and sizes are checked as `summary` would, without allocating weights.
  try {
    Sequential::check(spec, f.input, "");
  } catch (const SpecError& e) {
    throw SpecError(keras.place, "the converted spec's " + e.where(), e.message());
  }
  const std::string text = readable(spec).dump(2) + "\n";
  if (f.output.empty())
    std::fwrite(text.data(), 1, text.size(), stdout);
  else
    write_file_atomic(f.output, text);
  // On stderr, so that stdout stays a spec that can be redirected to a file.
  std::fprintf(stderr, "converted %zu layers from %s Sequential '%s'%s\n", spec.at("layers").size(),
               keras_source_description(doc).c_str(), spec.at("name").get<std::string>().c_str(),
               f.output.empty() ? "" : (" to " + printable_line(f.output)).c_str());
  return 0;
}

void define_flags(CLI::App& cmd, ImportKerasFlags& flags) {
  cmd.add_option("file", flags.input,
                 "Keras architecture JSON (model.to_json()), Keras 2 (tf.keras) or Keras 3, a Keras 3 .keras file or a "
                 "legacy whole-model .h5 file")
      ->required()
      ->check(non_empty("a Keras model JSON file"));
  cmd.add_option("-o,--output", flags.output, "Write the spec to this file instead of stdout")->check(output_path());
}

}  // namespace

Command add_import_keras_command(CLI::App& app) {
  return add_command<ImportKerasFlags>(app, "import-keras",
                                       "Convert a Keras Sequential model (to_json(), .keras, .h5) into a model spec",
                                       define_flags, run_import_keras);
}

}  // namespace tctl::app
