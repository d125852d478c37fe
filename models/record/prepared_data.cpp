#include "models/record/prepared_data.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/text.h"
#include "models/data/arrays.h"
#include "models/data/csv.h"
#include "models/nn/losses.h"

namespace tctl {

Tensor shape_for_model(const Tensor& x, const Sequential& net) {
  return x.reshaped(Shape::concat(x.shape()[0], net.input_shape()));
}

std::string data_source(const TrainConfig& c) {
  if (!c.data.x.empty()) return c.data.x;
  if (!c.data.images.empty()) return c.data.images;
  return c.data.csv.empty() ? "dataset " + c.data.dataset : c.data.csv;
}

std::string data_key(const TrainConfig& c) {
  if (!c.data.x.empty()) return "data.x";
  if (!c.data.images.empty()) return "data.images";
  return c.data.csv.empty() ? "data" : "data.csv";
}

std::string last_layer_key(const Sequential& net) { return "layers[" + std::to_string(net.layers().size() - 1) + "]"; }

namespace {

// The part scaled and shaped for the model; in place when the caller moved in the only handle of its rows.
Dataset scaled(Dataset d, const Standardizer* s, const Sequential& net) {
  if (d.size() == 0) return d;
  d.x = shape_for_model(s ? s->apply(std::move(d.x)) : d.x, net);
  return d;
}

// Where a key of the model spec was written: "m.json input_shape", or "config.json model.input_shape" inline.
std::string model_place(const TrainConfig& c, const std::string& key) {
  return c.model_file + " " + (c.model_path.empty() ? key : c.model_path + "." + key);
}

// Throws a SpecError naming the CSV line of the first label that the model's `outputs` cannot represent.
// Only called once a label is known to be out of range: it reads the file again to find the line, which the
// Dataset no longer knows.
void check_csv_labels(const std::string& csv_path, bool header, const std::string& label, std::int64_t outputs,
                      const std::string& model_place) {
  CsvTable table = read_csv(csv_path, CsvOptions{.header = header, .text_columns = {}, .number_columns = {}});
  const int col = table.column_index(label);
  if (col < 0) return;
  for (std::int64_t r = 0; r < table.rows; ++r) {
    const float v = table.at(r, col);
    if (v >= static_cast<float>(outputs))
      throw SpecError(csv_path, "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]),
                      fmt::format("label {:g} does not fit the model's {} outputs ({}); labels must lie in 0..{}", v,
                                  outputs, model_place, outputs - 1));
  }
}

// The config's text options with the model's defaults filled in: the input length, and the first layer's
// input_dim as the vocabulary's size. Throws SpecError naming the key when they disagree with the model.
TextOptions resolved_text_options(const TrainConfig& c, const Sequential& net) {
  TextOptions t = *c.data.text;
  const std::int64_t length = net.input_shape().num_elements();
  if (t.output_sequence_length == 0) t.output_sequence_length = length;
  if (t.output_sequence_length != length)
    throw SpecError(
        c.file, "data.text.output_sequence_length",
        fmt::format("{} ids per row, but the model's input_shape {} ({}) takes {}", t.output_sequence_length,
                    net.input_shape().to_string(), model_place(c, "input_shape"), length));
  const Layer* first = net.layers().empty() ? nullptr : net.layers().front().get();
  const std::int64_t ids = first != nullptr ? first->token_ids() : 0;
  if (t.max_tokens == 0) {
    if (ids == 0)
      throw SpecError(c.file, "data.text",
                      "give \"max_tokens\": the model's first layer takes no token ids to size the vocabulary by");
    t.max_tokens = std::min(ids, kMaxTextTokens);
  }
  if (ids > 0 && t.max_tokens > ids)
    throw SpecError(c.file, "data.text.max_tokens",
                    fmt::format("{} token ids, but the model's first layer, {} \"{}\" ({}), takes ids below {}",
                                t.max_tokens, first->type(), first->name(), model_place(c, "layers[0]"), ids));
  return t;
}

// The config's image options with the model's input_shape [height, width, channels] filling what it left out.
// Throws SpecError naming the key when they disagree with the model.
ImageOptions resolved_image_options(const TrainConfig& c, const Sequential& net) {
  ImageOptions o = c.data.image_options;
  const Shape& in = net.input_shape();
  const bool image_input = in.rank() == 3 && (in[2] == 1 || in[2] == 3);
  if ((o.height == 0 || o.channels == 0) && !image_input)
    throw SpecError(c.file, "data.images",
                    fmt::format("give \"image_size\" and \"color_mode\": the model's input_shape {} ({}) is no "
                                "[height, width, 1 or 3] to take them from",
                                in.to_string(), model_place(c, "input_shape")));
  if (o.height == 0) {
    o.height = in[0];
    o.width = in[1];
  }
  if (o.channels == 0) o.channels = static_cast<int>(in[2]);
  if (o.features() != in.num_elements())
    throw SpecError(c.file, "data.images",
                    fmt::format("images of {} x {} pixels, {} channel{} ({} values), but the model's input_shape {} "
                                "({}) takes {}",
                                o.height, o.width, o.channels, o.channels == 1 ? "" : "s", o.features(), in.to_string(),
                                model_place(c, "input_shape"), in.num_elements()));
  return o;
}

// The rows' texts as ids, named "t1", "t2", ... as features.
void vectorize_part(Dataset& part, const TextVectorizer& text) {
  part.x = text.vectorize(part.texts);
  part.feature_names.clear();
  for (std::int64_t i = 1; i <= text.length(); ++i) part.feature_names.push_back("t" + std::to_string(i));
}

// The config's data as loaded, before any check against the model: a built-in set, a CSV (of numbers or of
// text), arrays or a folder of images (decoded as `images` says). `run_classes` as for prepare_data.
Dataset load_config_data(const TrainConfig& c, const std::optional<ImageOptions>& images,
                         const std::vector<std::string>* run_classes) {
  const bool classification = loss_is_classification(c.loss);
  CsvDataOptions options{
      .header = c.data.header, .named_labels = true, .classes = {}, .text_column = {}, .threads = c.data_threads};
  if (c.data.text) options.text_column = c.data.text->column;
  if (run_classes != nullptr) {
    options.named_labels = !run_classes->empty();
    options.classes = *run_classes;
  }
  if (!c.data.x.empty())
    return load_array_dataset(c.data.x, c.data.y, classification, c.file, "data", c.data.x_key, c.data.y_key);
  if (!c.data.csv.empty())
    return load_csv_dataset(c.data.csv, c.data.label, classification, c.file, "data.csv", options);
  if (c.data.images.empty()) return load_builtin(c.data.dataset, c.seed, c.file, "data");
  Dataset data = load_image_dataset(c.data.images, *images, c.data_threads, c.file, "data.images.directory");
  if (run_classes != nullptr && *run_classes != data.class_names)
    throw SpecError(c.file, "data.images.directory",
                    fmt::format("class folders {}, but the run was trained on {}", join_first(data.class_names),
                                join_first(*run_classes)));
  return data;
}

}  // namespace

PreparedData prepare_data(const TrainConfig& c, const Sequential& net, const std::vector<std::string>* run_classes,
                          const TextVectorizer* run_text) {
  const bool classification = loss_is_classification(c.loss);
  std::optional<ImageOptions> images;
  if (!c.data.images.empty()) images = resolved_image_options(c, net);
  Dataset data = load_config_data(c, images, run_classes);
  const DataFingerprint fingerprint = fingerprint_of(data);
  const std::string where = data_key(c);
  if (loss_is_binary(c.loss) && data.num_classes > 0) {
    // Binary cross-entropy takes 0/1 labels as float targets, one column.
    if (data.num_classes > 2)
      throw SpecError(
          c.file, "loss",
          "loss " + c.loss + " needs two classes, but " + data.name + " has " + std::to_string(data.num_classes));
    std::vector<float> y(static_cast<std::size_t>(data.size()));
    for (std::int64_t i = 0; i < data.size(); ++i)
      y[static_cast<std::size_t>(i)] = static_cast<float>(data.y.data<std::int32_t>()[i]);
    data.y = Tensor::from_floats(Shape{data.size(), 1}, y);
    data.num_classes = 0;
  }
  if (!classification && data.num_classes > 0)
    throw SpecError(c.file, "loss",
                    "loss " + c.loss + " needs a regression data set, but " + data.name + " has class labels");
  if (!c.data.text && data.num_features() != net.input_shape().num_elements())
    throw SpecError(c.file, where,
                    fmt::format("{} has {} features per row, but the model's input_shape {} ({}) takes {}",
                                data_source(c), data.num_features(), net.input_shape().to_string(),
                                model_place(c, "input_shape"), net.input_shape().num_elements()));
  const std::int64_t outputs = net.output_shape().num_elements();
  if (classification && data.num_classes > outputs) {
    const std::string last = model_place(c, last_layer_key(net));
    if (!data.class_names.empty())
      throw SpecError(c.file, where,
                      fmt::format("{} has {} classes ({}), but the model's last layer ({}) has only {} outputs",
                                  data_source(c), data.num_classes, join_first(data.class_names), last, outputs));
    if (!c.data.csv.empty()) check_csv_labels(c.data.csv, c.data.header, c.data.label, outputs, last);
    throw SpecError(c.file, where,
                    fmt::format("{} has labels 0..{}, but the model's last layer ({}) has only {} outputs",
                                data_source(c), data.num_classes - 1, last, outputs));
  }
  if (!classification && data.y.num_elements() / std::max<std::int64_t>(data.size(), 1) != outputs)
    throw SpecError(c.file, where,
                    fmt::format("the data has {} targets per row, but the model has {} outputs",
                                data.y.num_elements() / std::max<std::int64_t>(data.size(), 1), outputs));
  // Scaled ids are no ids: an embedding first would fail its first step on a fraction.
  if (c.data.standardize && !net.layers().empty() && net.layers().front()->token_ids() > 0)
    throw SpecError(c.file, "data.standardize",
                    fmt::format("the model's first layer, {} \"{}\", takes token ids, which scaling would turn into "
                                "fractions: set \"standardize\": false",
                                net.layers().front()->type(), net.layers().front()->name()));
  if (const auto bad = find_bad_token_id(net, data.x, data.feature_names))
    throw SpecError(c.file, data_key(c), fmt::format("{}, row {}: {}", data_source(c), bad->row + 1, bad->message));
  // Moved in: the training rows keep the table's buffer (split_dataset).
  Split split = split_dataset(std::move(data), c.data.test_split, c.data.validation_split, c.data.shuffle, c.seed);
  if (split.train.size() == 0)
    throw SpecError(c.file, "data", "no rows are left for training after the test and validation splits");
  PreparedData p;
  p.images = images;
  if (c.data.text) {
    p.text = run_text != nullptr ? *run_text : TextVectorizer::fit(resolved_text_options(c, net), split.train.texts);
    for (Dataset* part : {&split.train, &split.validation, &split.test}) vectorize_part(*part, *p.text);
  }
  p.fingerprint = fingerprint;
  p.test_raw = split.test;
  p.standardized = c.data.standardize;
  if (p.standardized) p.standardizer.fit(split.train.x);
  const Standardizer* s = p.standardized ? &p.standardizer : nullptr;
  p.train = scaled(std::move(split.train), s, net);
  p.validation = scaled(std::move(split.validation), s, net);
  p.test = scaled(std::move(split.test), s, net);  // a copy: test_raw keeps the rows as loaded
  return p;
}

std::optional<TokenIdProblem> find_bad_token_id(const Sequential& net, const Tensor& x,
                                                const std::vector<std::string>& feature_names) {
  if (net.layers().empty() || net.layers().front()->token_ids() <= 0) return std::nullopt;
  const Layer& embedding = *net.layers().front();
  const std::int64_t ids = embedding.token_ids();
  const std::int64_t rows = x.shape()[0], features = rows > 0 ? x.num_elements() / rows : 0;
  const float* p = x.data<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < features; ++j) {
      const float v = p[r * features + j];
      if (v >= 0.0f && v < static_cast<float>(ids) && v == std::floor(v)) continue;
      const std::string column = static_cast<std::size_t>(j) < feature_names.size()
                                     ? "column \"" + feature_names[static_cast<std::size_t>(j)] + "\""
                                     : fmt::format("feature {}", j);
      return TokenIdProblem{r, fmt::format("{}: {:.9g} is not a token id of {} (a whole number in [0, {}))", column, v,
                                           embedding.name(), ids)};
    }
  return std::nullopt;
}

}  // namespace tctl
