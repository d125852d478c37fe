#include "models/record/prepared_data.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/function_ref.h"
#include "core/read_whole.h"
#include "core/text.h"
#include "models/data/arrays.h"
#include "models/data/csv.h"
#include "models/data/row_stream.h"
#include "models/nn/losses.h"
#include "models/nn/memory_budget.h"

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

// Where the labels come from, and the config key that names it: an array config's y file, else the data's.
std::string label_source(const TrainConfig& c) { return c.data.y.empty() ? data_source(c) : c.data.y; }
std::string label_key(const TrainConfig& c) { return c.data.y.empty() ? data_key(c) : "data.y"; }

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

// Throws a SpecError naming the CSV line of the first label `problem` finds wrong (it returns what is wrong, or
// "" for a good label). Only called once a label is known to be wrong: it reads the file again to find the
// line, which the Dataset no longer knows.
void check_csv_labels(const std::string& csv_path, bool header, const std::string& label,
                      FunctionRef<std::string(float)> problem) {
  CsvTable table = read_csv(csv_path, CsvOptions{.header = header, .text_columns = {}, .number_columns = {}});
  const int col = table.column_index(label);
  if (col < 0) return;
  for (std::int64_t r = 0; r < table.rows; ++r)
    if (const std::string p = problem(table.at(r, col)); !p.empty())
      throw SpecError(csv_path, "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]), p);
}

// Binary cross-entropy takes targets in [0, 1]: labels 0 and 1, or Keras' soft labels between. A 2 or a -1
// has no prediction in (0, 1) that minimizes its loss, so it trained on nonsense without a word. Refused at
// the CSV's line, or at the row of an array or a streamed file.
void check_binary_targets(const TrainConfig& c, const Dataset& data, bool streamed) {
  const float* t = data.y.data<float>();
  const std::int64_t n = data.y.num_elements();
  std::int64_t bad = 0;
  while (bad < n && t[bad] >= 0.0f && t[bad] <= 1.0f) ++bad;
  if (bad == n) return;
  const std::string rule = "binary_crossentropy takes targets in [0, 1] (labels 0 and 1)";
  if (!c.data.csv.empty() && !streamed)
    check_csv_labels(c.data.csv, c.data.header, c.data.label, [&](float v) {
      return v >= 0.0f && v <= 1.0f ? std::string() : fmt::format("label {:g}: {}", v, rule);
    });
  const std::int64_t width = n / std::max<std::int64_t>(data.y.shape()[0], 1);
  throw SpecError(c.file, label_key(c),
                  fmt::format("{}: row {} (counting from 0) has the target {:g}; {}", label_source(c),
                              bad / std::max<std::int64_t>(width, 1), t[bad], rule));
}

// The config's text options with the model's defaults filled in: the input length, and the embedding's
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
  const std::ptrdiff_t at = net.id_layer();
  const Layer* reader = at >= 0 ? net.layers()[static_cast<std::size_t>(at)].get() : nullptr;
  const std::int64_t ids = reader != nullptr ? reader->token_ids() : 0;
  if (t.max_tokens == 0) {
    if (ids == 0)
      throw SpecError(c.file, "data.text",
                      "give \"max_tokens\": no layer of the model takes the token ids to size the vocabulary by");
    t.max_tokens = std::min(ids, kMaxTextTokens);
  }
  if (ids > 0 && t.max_tokens > ids)
    throw SpecError(c.file, "data.text.max_tokens",
                    fmt::format("{} token ids, but the model's {} \"{}\" ({}) takes ids below {}", t.max_tokens,
                                reader->type(), reader->name(), model_place(c, fmt::format("layers[{}]", at)), ids));
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

namespace {

// The config's split of `n` rows whose labels are `labels`: test, validation and training rows, the validation
// rows one fold of them under cross-validation.
SplitOrder split_of(const TrainConfig& c, std::int64_t n, const Tensor& labels) {
  SplitOrder order = split_order(n, c.data.test_split, c.data.validation_split, c.data.shuffle, c.seed);
  return c.data.folds > 0 ? with_fold(std::move(order), labels, c.data.folds, c.data.fold) : order;
}

// Checks the loaded data against the model (features, classes, targets) and makes binary labels the float
// targets the loss takes. A streamed data set (`streamed`) has only its labels in memory: its values are
// not checked for token ids, and a label past the outputs is not found again in the file.
void fit_to_model(const TrainConfig& c, const Sequential& net, Dataset& data, bool streamed) {
  const bool classification = loss_is_classification(c.loss);
  const std::string where = data_key(c);
  if (loss_is_binary(c.loss) && data.num_classes > 0) {
    // Binary cross-entropy takes 0/1 labels as float targets, one column.
    if (data.num_classes > 2)
      throw SpecError(
          c.file, "loss",
          "loss " + c.loss + " needs two classes, but " + data.name + " has " + std::to_string(data.num_classes));
    const std::int64_t n = data.y.shape()[0];
    std::vector<float> y(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      y[static_cast<std::size_t>(i)] = static_cast<float>(data.y.data<std::int32_t>()[i]);
    data.y = Tensor::from_floats(Shape{n, 1}, y);
    data.num_classes = 0;
  }
  if (loss_is_binary(c.loss)) check_binary_targets(c, data, streamed);
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
      throw SpecError(c.file, label_key(c),
                      fmt::format("{} has {} classes ({}), but the model's last layer ({}) has only {} outputs",
                                  label_source(c), data.num_classes, join_first(data.class_names), last, outputs));
    if (!c.data.csv.empty() && !streamed)
      check_csv_labels(c.data.csv, c.data.header, c.data.label, [&](float v) {
        return v < static_cast<float>(outputs)
                   ? std::string()
                   : fmt::format("label {:g} does not fit the model's {} outputs ({}); labels must lie in 0..{}", v,
                                 outputs, last, outputs - 1);
      });
    throw SpecError(c.file, label_key(c),
                    fmt::format("{} has labels 0..{}, but the model's last layer ({}) has only {} outputs",
                                label_source(c), data.num_classes - 1, last, outputs));
  }
  const std::int64_t rows = std::max<std::int64_t>(data.y.shape()[0], 1);
  if (!classification && data.y.num_elements() / rows != outputs)
    throw SpecError(c.file, label_key(c),
                    fmt::format("{} has {} targets per row, but the model has {} outputs", label_source(c),
                                data.y.num_elements() / rows, outputs));
  // Scaled ids are no ids: an embedding first would fail its first step on a fraction.
  if (const std::ptrdiff_t at = net.id_layer(); c.data.standardize && at >= 0) {
    const Layer& reader = *net.layers()[static_cast<std::size_t>(at)];
    throw SpecError(c.file, "data.standardize",
                    fmt::format("the model's {} \"{}\" ({}) takes token ids, which scaling would turn into "
                                "fractions: set \"standardize\": false",
                                reader.type(), reader.name(), model_place(c, fmt::format("layers[{}]", at))));
  }
  if (streamed) return;
  // The row's place as predict names it in the same file: a CSV's line, an array's row counting from 0.
  if (const auto bad = find_bad_token_id(net, data.x, data.feature_names)) {
    const auto r = static_cast<std::size_t>(bad->row);
    const std::string place =
        r < data.row_lines.size() ? fmt::format("line {}", data.row_lines[r]) : fmt::format("row {}", bad->row);
    throw SpecError(c.file, data_key(c), fmt::format("{}, {}: {}", data_source(c), place, bad->message));
  }
}

// The bytes a CSV's rows would take as float32 in memory, estimated from its first 64 KiB: cells per byte there
// times the file's size.
double estimated_float_bytes(const std::string& path) {
  std::error_code ec;
  const auto size = static_cast<double>(std::filesystem::file_size(path, ec));
  const std::string head = file_head(path, std::size_t{64} << 10);
  if (ec || head.empty()) return 0.0;
  const auto cells =
      static_cast<double>(std::count(head.begin(), head.end(), ',') + std::count(head.begin(), head.end(), '\n'));
  return size * 4.0 * cells / static_cast<double>(head.size());
}

// The bytes a CSV of texts would take in memory: the file's text, a string's 32 bytes a row and `length`
// float32 ids a row, the rows counted from the line breaks of its first 64 KiB.
double estimated_text_bytes(const std::string& path, std::int64_t length) {
  std::error_code ec;
  const auto size = static_cast<double>(std::filesystem::file_size(path, ec));
  const std::string head = file_head(path, std::size_t{64} << 10);
  if (ec || head.empty()) return 0.0;
  const double rows =
      size * static_cast<double>(std::count(head.begin(), head.end(), '\n') + 1) / static_cast<double>(head.size());
  return size + rows * (32.0 + 4.0 * static_cast<double>(length));
}

// The rows of the config's arrays or image folder as float32, in bytes.
double float_bytes(const TrainConfig& c, const std::optional<ImageOptions>& images) {
  if (!c.data.x.empty()) {
    const ArrayRows x(c.data.x, c.data.x_key);
    double n = 4.0;
    for (std::int64_t d : x.shape()) n *= static_cast<double>(d);
    return n;
  }
  const ImageFolder folder = list_image_folder(c.data.images, c.file, "data.images.directory");
  return static_cast<double>(folder.paths.size()) * static_cast<double>(images->features()) * 4.0;
}

// Whether `c`'s data is streamed, and the line saying so when the run chose it itself: a CSV of numbers,
// arrays or an image folder whose rows would take more than a third of the memory limit in memory (which
// holds them about 1.4 times over while they are split and scaled, bench/csv_load.sh, besides the model).
// `images`: how an image folder's files are decoded.
std::optional<std::string> stream_choice(const TrainConfig& c, const Sequential& net,
                                         const std::optional<ImageOptions>& images) {
  const bool csv = !c.data.csv.empty();
  if (!(csv || !c.data.x.empty() || !c.data.images.empty()) || c.data.stream == DataConfig::Stream::kOff)
    return std::nullopt;
  if (c.data.stream == DataConfig::Stream::kOn) return "";
  const double bytes = !csv          ? float_bytes(c, images)
                       : c.data.text ? estimated_text_bytes(c.data.csv, net.input_shape().num_elements())
                                     : estimated_float_bytes(c.data.csv);
  const auto limit = static_cast<double>(memory_limit_bytes());
  // A file past the in-memory CSV reader's own limit (a quarter of the machine's memory, models/data/csv.h)
  // streams too, rather than being refused.
  std::error_code ec;
  const auto file_bytes = csv ? static_cast<double>(std::filesystem::file_size(c.data.csv, ec)) : 0.0;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double quarter = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) / 4 : 1e300;
  if (!ec && file_bytes > quarter)
    return fmt::format(
        "{}: {} of text, more than the {} a CSV read into memory may hold: streaming it from a "
        "cache",
        c.data.csv, byte_size_text(file_bytes), byte_size_text(quarter));
  if (bytes * 3.0 <= limit) return std::nullopt;
  return fmt::format(
      "{}: about {} of rows {}, more than a third of the memory limit ({}): streaming them "
      "from a cache (\"stream\": false in \"data\" reads them into memory)",
      data_source(c), byte_size_text(bytes), c.data.text ? "as texts and token ids" : "as float32",
      byte_size_text(limit));
}

// A streamed run's rows per window: the config's shuffle_buffer, else as many as fit in a sixteenth of the
// memory limit (up to four are held at once: two of training rows, two of validation rows while they are
// evaluated).
std::int64_t window_rows(const TrainConfig& c, const RowCache& cache, const Sequential& net) {
  if (c.data.shuffle_buffer > 0) return c.data.shuffle_buffer;
  // A row of text: its bytes on average, a string's 32, and its ids.
  const std::int64_t row_bytes = cache.has_texts() ? cache.text_bytes() / std::max<std::int64_t>(cache.rows(), 1) + 32 +
                                                         4 * net.input_shape().num_elements()
                                                   : cache.features() * 4;
  return std::max<std::int64_t>(1, memory_limit_bytes() / 16 / std::max<std::int64_t>(row_bytes, 1));
}

// The config's data as a cache's source: its CSV of numbers, arrays or image folder.
RowCache::Source cache_source(const TrainConfig& c, const std::optional<ImageOptions>& images,
                              const std::vector<std::string>* run_classes) {
  const bool classification = loss_is_classification(c.loss);
  if (!c.data.x.empty())
    return array_rows_source(c.data.x, c.data.y, classification, c.file, "data", c.data.x_key, c.data.y_key);
  if (!c.data.images.empty())
    return image_rows_source(c.data.images, *images, c.data_threads, c.file, "data.images.directory");
  RowCache::CsvSource csv{.path = c.data.csv,
                          .label_column = c.data.label,
                          .classification = classification,
                          .options = {.header = c.data.header, .threads = c.data_threads},
                          .file_for_errors = c.file,
                          .where = "data.csv"};
  if (run_classes != nullptr) {
    csv.options.named_labels = !run_classes->empty();
    csv.options.classes = *run_classes;
  }
  if (c.data.text) csv.options.text_column = c.data.text->column;
  return RowCache::csv_source(csv);
}

// The config's data in its cache (built when there is none for the files as they are now), in the config's
// cache folder or the run directory. A run directory made for the cache is removed again when building it
// fails.
std::shared_ptr<const RowCache> cached_rows(const TrainConfig& c, const std::optional<ImageOptions>& images,
                                            const std::vector<std::string>* run_classes, bool& reused) {
  const RowCache::Source source = cache_source(c, images, run_classes);
  const std::uint64_t key = RowCache::key_of(source);
  const std::filesystem::path dir = c.data.cache.empty() ? c.output : c.data.cache;
  const std::filesystem::path path = RowCache::path_in(dir, source, key);
  auto cache = RowCache::open(path, key);
  // A trained run's classes (evaluate) are the CSV's own when it is the file the run trained on; a cache
  // whose classes differ is built again with them. An image folder's classes are its subfolders, checked
  // below.
  const bool folder = !c.data.images.empty();
  if (cache && run_classes != nullptr && !folder && cache->metadata().class_names != *run_classes) cache = nullptr;
  reused = cache != nullptr;
  if (!cache) {
    std::error_code ec;
    const bool made = !std::filesystem::exists(dir, ec);
    std::filesystem::create_directories(dir, ec);
    if (ec) throw SpecError(dir.string(), "", "cannot create the data cache's folder: " + ec.message());
    try {
      cache = RowCache::build(path, key, source);
    } catch (...) {
      if (made) std::filesystem::remove(dir, ec);  // only if still empty
      throw;
    }
  }
  if (folder && run_classes != nullptr && cache->metadata().class_names != *run_classes)
    throw SpecError(c.file, "data.images.directory",
                    fmt::format("class folders {}, but the run was trained on {}",
                                join_first(cache->metadata().class_names), join_first(*run_classes)));
  return cache;
}

// A streamed CSV of texts: the vocabulary learned from the training rows a window at a time (or the trained
// run's, `run_text`), and every part's windows turned into ids with it, as vectorize_part does in memory.
void vectorize_streams(const TrainConfig& c, const Sequential& net, const TextVectorizer* run_text, PreparedData& p) {
  p.text = run_text != nullptr
               ? *run_text
               : TextVectorizer::fit(resolved_text_options(c, net),
                                     [&](FunctionRef<void(std::span<const std::string>)> visit) {
                                       for_each_window(p.train, [&](const Dataset& w) { visit(w.texts); });
                                     });
  const auto text = std::make_shared<const TextVectorizer>(*p.text);
  for (Dataset* d : {&p.test_raw, &p.validation, &p.train}) {
    d->x = Tensor::empty(DType::kF32, Shape{0, text->length()});
    d->feature_names.clear();
    for (std::int64_t i = 1; i <= text->length(); ++i) d->feature_names.push_back("t" + std::to_string(i));
    d->stream = d->stream->prepared(std::nullopt, std::nullopt, text);
  }
}

// The parts of a streamed data set from its cache: checked against the model, split, each a stream of its
// rows, scaled and vectorized as in memory.
void stream_parts(const TrainConfig& c, const Sequential& net, const TextVectorizer* run_text,
                  const std::shared_ptr<const RowCache>& cache, PreparedData& p) {
  p.streamed->cache = cache->path();
  Dataset meta = cache->metadata();
  fit_to_model(c, net, meta, true);
  p.fingerprint = cache->fingerprint();
  const SplitOrder split = split_of(c, cache->rows(), meta.y);
  const std::span<const std::int64_t> all(split.order);
  const std::int64_t window = window_rows(c, *cache, net);
  auto part = [&](std::size_t first, std::size_t count) {
    Dataset d = meta;
    d.y = Tensor::empty(meta.y.dtype(), meta.y.shape().with_batch(0));
    const auto rows = all.subspan(first, count);
    // An image part's files, in split order, as the in-memory part holds them (each window has its own).
    d.paths.clear();
    for (std::int64_t r : rows)
      if (!meta.paths.empty()) d.paths.push_back(meta.paths[static_cast<std::size_t>(r)]);
    d.stream = std::make_shared<RowStream>(cache, std::vector<std::int64_t>(rows.begin(), rows.end()), meta.y, window,
                                           c.batch_size);
    return d;
  };
  const auto n_test = static_cast<std::size_t>(split.test), n_validation = static_cast<std::size_t>(split.validation);
  p.test_raw = part(0, n_test);
  p.validation = part(n_test, n_validation);
  p.train = part(n_test + n_validation, all.size() - n_test - n_validation);
  if (p.train.size() == 0)
    throw SpecError(c.file, "data", "no rows are left for training after the test and validation splits");
  p.streamed->window_rows = p.train.stream->window_rows();
  if (c.data.text) vectorize_streams(c, net, run_text, p);
  p.test = p.test_raw;
  p.standardized = c.data.standardize;
  // One window: read once, scaled in place and kept, as the in-memory run holds its rows.
  Dataset first;
  const bool one = p.train.stream->windows() == 1;
  if (one) p.train.stream->load(0, p.train, first);
  if (p.standardized && one) p.standardizer.fit(first.x);
  if (p.standardized && !one)
    p.standardizer.fit_windows(p.train.num_features(), [&](FunctionRef<void(const Tensor&)> visit) {
      for_each_window(p.train, [&](const Dataset& w) { visit(w.x); });
    });
  const std::optional<Standardizer> scale = p.standardized ? std::optional(p.standardizer) : std::nullopt;
  for (Dataset* d : {&p.train, &p.validation, &p.test}) d->stream = d->stream->prepared(scale, net.input_shape());
  if (one) {
    first.x = shape_for_model(scale ? scale->apply(std::move(first.x)) : first.x, net);
    p.train.stream->set_resident(std::move(first));
  }
}

// prepare_data for streamed data: the rows stay in their cache; each part is a stream of its rows there.
PreparedData prepare_streamed(const TrainConfig& c, const Sequential& net, const std::vector<std::string>* run_classes,
                              const TextVectorizer* run_text, const std::optional<ImageOptions>& images,
                              std::string note) {
  PreparedData p;
  p.images = images;
  p.streamed.emplace();
  p.streamed->note = std::move(note);
  const std::filesystem::path dir = c.data.cache.empty() ? c.output : c.data.cache;
  std::error_code ec;
  const bool dir_existed = std::filesystem::exists(dir, ec);
  auto cache = cached_rows(c, images, run_classes, p.streamed->reused);
  try {
    stream_parts(c, net, run_text, cache, p);
  } catch (...) {
    // A cache built here for data then refused goes, with its folder if this made it: a refused config writes
    // nothing. A cache that was there before stays.
    if (!p.streamed->reused) {
      std::filesystem::remove(cache->path(), ec);
      if (!dir_existed) std::filesystem::remove(dir, ec);  // only if empty
    }
    throw;
  }
  return p;
}

}  // namespace

PreparedData prepare_data(const TrainConfig& c, const Sequential& net, const std::vector<std::string>* run_classes,
                          const TextVectorizer* run_text) {
  std::optional<ImageOptions> images;
  if (!c.data.images.empty()) images = resolved_image_options(c, net);
  if (std::optional<std::string> note = stream_choice(c, net, images))
    return prepare_streamed(c, net, run_classes, run_text, images, *note);
  Dataset data = load_config_data(c, images, run_classes);
  const DataFingerprint fingerprint = fingerprint_of(data);
  fit_to_model(c, net, data, false);
  // Moved in: the training rows keep the table's buffer (split_dataset).
  const SplitOrder order = split_of(c, data.size(), data.y);
  Split split = split_dataset(std::move(data), order);
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
  const std::ptrdiff_t at = net.id_layer();
  if (at < 0) return std::nullopt;
  const Layer& embedding = *net.layers()[static_cast<std::size_t>(at)];
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
