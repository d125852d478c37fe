#include "models/record/keras_model_file.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "core/read_whole.h"
#include "models/data/hdf5_file.h"
#include "models/data/zip_archive.h"
#include "models/io/atomic_file.h"
#include "models/io/spec_reader.h"

namespace tctl {

namespace {

// A model's config is kilobytes and its weights file what the model holds: bounds on what a forged archive
// can make us inflate.
constexpr std::size_t kMaxConfigBytes = std::size_t{64} << 20;
constexpr std::size_t kMaxWeightsBytes = std::size_t{16} << 30;
constexpr std::int64_t kMaxWeightElements = std::int64_t{1} << 31;

// Keras' naming.to_snake_case: "Conv2D" -> "conv2d", "BatchNormalization" -> "batch_normalization",
// "SimpleRNN" -> "simple_rnn", "GlobalAveragePooling2D" -> "global_average_pooling2d".
std::string snake_case(const std::string& name) {
  // First pass: an underscore before each capital followed by lower-case letters (not at the start).
  std::string a;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const bool word = i > 0 && std::isupper(static_cast<unsigned char>(name[i])) && i + 1 < name.size() &&
                      std::islower(static_cast<unsigned char>(name[i + 1]));
    if (word) a += '_';
    a += name[i];
  }
  // Second pass: an underscore between a lower-case letter and a capital.
  std::string b;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (i > 0 && std::islower(static_cast<unsigned char>(a[i - 1])) && std::isupper(static_cast<unsigned char>(a[i])))
      b += '_';
    b += static_cast<char>(std::tolower(static_cast<unsigned char>(a[i])));
  }
  return b;
}

// Copies `data` into `v`, refusing another element count, or another shape unless the layer allows one.
void assign_weight(Variable& v, const Hdf5Dataset& data, bool any_shape, const Hdf5File& h5, const std::string& path) {
  const Shape shape(data.shape);
  if (static_cast<std::int64_t>(data.values.size()) != v.shape().num_elements() || (!any_shape && shape != v.shape()))
    throw SpecError(h5.file(), path,
                    fmt::format("a weight of shape {}, where the model's {} is {}", shape.to_string(), v.name(),
                                v.shape().to_string()));
  for (std::size_t i = 0; i < data.values.size(); ++i)
    if (!std::isfinite(data.values[i]))
      throw SpecError(h5.file(), path, fmt::format("element {} is {}", i, data.values[i]));
  v.assign(Tensor::from_floats(v.shape(), data.values));
}

void load_keras3_weights(const Hdf5File& h5, const Sequential& net) {
  std::map<std::string, int> seen;  // per snake_case class: how many layers before
  for (const auto& layer : net.layers()) {
    const std::string base = snake_case(layer->type());
    const int n = seen[base]++;
    const std::string group = "layers/" + (n == 0 ? base : base + "_" + std::to_string(n));
    const std::vector<Layer::KerasWeight> weights = layer->keras_weights();
    if (!weights.empty() && !h5.is_group(group))
      throw SpecError(h5.file(), group,
                      fmt::format("no weights for layer {} \"{}\" (the file's layers: {})", layer->type(),
                                  layer->name(), fmt::join(h5.members("layers"), ", ")));
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const std::string path = group + "/" + weights[i].path;
      assign_weight(*layer->variables()[i], h5.read(path, kMaxWeightElements), weights[i].any_shape, h5, path);
    }
  }
}

void load_legacy_weights(const Hdf5File& h5, const Sequential& net) {
  for (const auto& layer : net.layers()) {
    const std::string group = "model_weights/" + layer->name();
    const auto names = h5.strings(group, "weight_names");
    const std::vector<std::string> listed = names ? *names : std::vector<std::string>{};
    const auto& vars = layer->variables();
    if (listed.size() != vars.size())
      throw SpecError(h5.file(), group,
                      fmt::format("{} weights listed (weight_names) for layer {} \"{}\", which has {}", listed.size(),
                                  layer->type(), layer->name(), vars.size()));
    // Our variables are in Keras' order, and so are the names: trainable weights, then the others.
    const std::vector<Layer::KerasWeight> weights = layer->keras_weights();
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const std::string path = group + "/" + listed[i];
      assign_weight(*vars[i], h5.read(path, kMaxWeightElements), weights[i].any_shape, h5, path);
    }
  }
}

}  // namespace

bool is_keras_archive_or_h5(const std::string& path) {
  // A pipe (`summary <(cat spec.json)`) is read once, as the JSON it holds: its first bytes are not peeked at.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  const std::string head = file_head(path);
  return looks_like_zip(head) || looks_like_hdf5(head);
}

KerasModelFile read_keras_model_file(const std::string& path) {
  if (!is_keras_archive_or_h5(path)) return {KerasFileKind::kJson, parse_json_file(path), path};
  const std::string head = file_head(path);
  if (looks_like_zip(head)) {
    const ZipArchive zip(path);
    if (!zip.contains("config.json"))
      throw SpecError(path, "", "a zip archive without config.json: not a Keras 3 .keras file");
    const std::string place = path + " (config.json)";
    return {KerasFileKind::kKeras, parse_json_text(zip.read("config.json", kMaxConfigBytes), place), place};
  }
  if (looks_like_hdf5(head)) {
    const Hdf5File h5(read_file(path, path, kMaxWeightsBytes), path);
    const auto config = h5.strings("", "model_config");
    if (!config || config->size() != 1)
      throw SpecError(path, "",
                      "an HDF5 file without a model_config attribute: not a whole-model Keras .h5 file "
                      "(a weights-only file needs the architecture beside it)");
    const std::string place = path + " (model_config)";
    return {KerasFileKind::kH5, parse_json_text(config->front(), place), place};
  }
  return {KerasFileKind::kJson, parse_json_file(path), path};  // not reached: the head was one of the two
}

void load_keras_weights(const std::string& path, const Sequential& net) {
  if (looks_like_zip(file_head(path))) {
    const ZipArchive zip(path);
    if (!zip.contains("model.weights.h5"))
      throw SpecError(path, "", "a .keras file without model.weights.h5 (weights saved as .npz are not read)");
    const Hdf5File h5(zip.read("model.weights.h5", kMaxWeightsBytes), path + " (model.weights.h5)");
    load_keras3_weights(h5, net);
    return;
  }
  const Hdf5File h5(read_file(path, path, kMaxWeightsBytes), path);
  if (!h5.is_group("model_weights"))
    throw SpecError(path, "", "an HDF5 file without model_weights: not a whole-model Keras .h5 file");
  load_legacy_weights(h5, net);
}

}  // namespace tctl
