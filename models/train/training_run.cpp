#include "models/train/training_run.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "core/ceil_div.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/data/csv.h"
#include "models/io/atomic_file.h"
#include "models/io/run_lock.h"
#include "models/io/safetensors.h"
#include "models/io/spec_reader.h"
#include "models/nn/memory_budget.h"
#include "models/train/callbacks.h"
#include "models/train/training_checkpoint.h"

namespace tctl {

namespace {

// The rows of x reshaped to [N, ...input_shape] once the element counts are known to agree.
Tensor shape_for_model(const Tensor& x, const Sequential& net) {
  return x.reshaped(Shape::concat(x.shape()[0], net.input_shape()));
}

Dataset scaled(const Dataset& d, const Standardizer* s, const Sequential& net) {
  Dataset out = d;
  if (d.size() == 0) return out;
  out.x = shape_for_model(s ? s->apply(d.x) : d.x, net);
  return out;
}

ModelOptions model_options(const TrainConfig& c) {
  ModelOptions o;
  o.loss = c.loss;
  o.optimizer = c.optimizer;
  o.metrics = c.metrics;
  o.inter_op_threads = c.inter_op_threads;
  o.intra_op_threads = c.intra_op_threads;
  o.device = c.device;
  o.allow_tf32 = c.allow_tf32;
  o.seed = c.seed;
  o.config_file = c.file;
  o.prefetch = c.prefetch;
  if (c.strategy.mirrored() && c.strategy.replicas > 1) {
    o.replica_devices = c.strategy.devices;
    if (o.replica_devices.empty()) o.replica_devices.assign(static_cast<std::size_t>(c.strategy.replicas), c.device);
  }
  o.bucket_bytes = c.strategy.bucket_bytes;
  if (c.strategy.type == "hogwild") o.hogwild_workers = c.strategy.workers;
  o.placement.strict = c.strict_placement;
  if (c.log_device_placement)
    o.placement.log = [](const std::string& line) { std::fprintf(stderr, "placement: %s\n", line.c_str()); };
  return o;
}

nlohmann::json metrics_json(const MetricValues& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values) j[k] = v;
  return j;
}

std::string csv_number(double v) { return fmt::format("{:.6g}", v); }

// history.csv's header row for rows like `r`.
std::string history_header(const EpochResult& r) {
  std::string out = "epoch";
  for (const auto& [k, v] : r.train) out += "," + k;
  for (const auto& [k, v] : r.validation) out += ",val_" + k;
  return out + ",seconds\n";
}

std::string history_row(const EpochResult& r) {
  std::string out = std::to_string(r.epoch);
  for (const auto& [k, v] : r.train) out.append(",").append(csv_number(v));
  for (const auto& [k, v] : r.validation) out.append(",").append(csv_number(v));
  return out.append(",").append(fmt::format("{:.4f}", r.seconds)).append("\n");
}

// The run directory's history.csv, one row per finished epoch, appended: the rows wait in a buffer of at most
// 64 KB, and go to the file when it fills and before each checkpoint, so neither memory nor a checkpoint grows
// with the epochs, and no row is written twice. The rows reach the disk before the checkpoint that counts them
// is written, so the file holds at least the checkpoint's epochs; a resume drops any rows past them (epochs
// that ended after it, which it trains again), and a row cut short by a crash lies past them too. Not
// thread-safe; the writer holds the run directory's lock.
class HistoryLog {
 public:
  explicit HistoryLog(std::filesystem::path path) : path_(std::move(path)) {}

  // A resumed run at epoch `next_epoch`: keeps the file's first next_epoch - 1 rows and drops the rest. A
  // checkpoint that holds every row (one written before the history was appended, or one after epoch 1)
  // gives them instead. Otherwise the file must hold the header for the checkpoint's metrics and a row for
  // each of those epochs, in order, or the resume is refused (SpecError naming the file and the line), as the
  // run's history would be lost or wrong.
  void resume(std::int64_t next_epoch, const std::vector<EpochResult>& recorded) {
    const std::int64_t epochs = next_epoch - 1;
    std::error_code ec;
    created_ = epochs > 0;
    if (!created_) {
      std::filesystem::remove(path_, ec);
      return;
    }
    TCTL_CHECK(!recorded.empty() && recorded.back().epoch == epochs, "a checkpoint without its last epoch's row");
    const std::string header = history_header(recorded.back());
    std::string kept;
    if (static_cast<std::int64_t>(recorded.size()) == epochs) {
      kept = header;
      for (const EpochResult& r : recorded) kept += history_row(r);
      return write_file_atomic(path_, kept);
    }
    auto refuse = [&](std::int64_t line, const std::string& what) {
      throw SpecError(path_.string(), line > 0 ? "line " + std::to_string(line) : "",
                      "cannot resume: " + what + "; the run's history is lost (train it again with --overwrite)");
    };
    if (!std::filesystem::exists(path_, ec)) refuse(0, "it is missing");
    const std::string text = read_file(path_, path_.string());
    const auto cells = std::count(header.begin(), header.end(), ',');
    std::size_t at = 0;
    for (std::int64_t line = 1; line <= epochs + 1; ++line) {
      const std::size_t end = text.find('\n', at);
      if (end == std::string::npos)
        refuse(line, fmt::format("it holds {} epochs' rows, where the checkpoint continues after epoch {}",
                                 std::max<std::int64_t>(line - 2, 0), epochs));
      const std::string_view row(text.data() + at, end + 1 - at);
      if (line == 1 && row != header)
        refuse(1, "expected the header " + quote_for_message(header.substr(0, header.size() - 1)) + ", got " +
                      quote_for_message(row.substr(0, row.size() - 1)));
      if (line > 1 &&
          (!row.starts_with(std::to_string(line - 1) + ",") || std::count(row.begin(), row.end(), ',') != cells))
        refuse(line, fmt::format("expected the row of epoch {} ({} cells), got {}", line - 1, cells + 1,
                                 quote_for_message(row.substr(0, row.size() - 1))));
      at = end + 1;
    }
    // Rows past the checkpoint's epochs (and a row a kill cut short) are dropped: the resumed run trains
    // those epochs again.
    if (at < text.size()) write_file_atomic(path_, text.substr(0, at));
  }

  // The row of an epoch that ended.
  void add(const EpochResult& r) {
    if (!created_ && buffer_.empty()) buffer_ = history_header(r);
    buffer_ += history_row(r);
    if (buffer_.size() >= kBufferBytes) flush(false);
  }

  // Writes the rows added since the last flush; with `sync`, to the disk (before a checkpoint counts them).
  // The first rows of a run create the file whole.
  void flush(bool sync = true) {
    if (buffer_.empty()) return;
    if (!created_) {
      write_file_atomic(path_, buffer_);
      created_ = true;
      buffer_.clear();
      return;
    }
    // On the disk before the checkpoint that counts these rows is renamed into place.
    append_file(path_, buffer_, sync);
    buffer_.clear();
  }

 private:
  static constexpr std::size_t kBufferBytes = 64 * 1024;
  std::filesystem::path path_;
  bool created_ = false;  // the file holds its header
  std::string buffer_;    // rows not yet written
};

// The rows as CSV, with a header row unless the data had none (so the file reads back as the data did).
std::string dataset_csv(const Dataset& d, const std::string& label, bool header) {
  std::string out;
  if (header) {
    for (const auto& f : d.feature_names) out += csv_field(f) + ",";
    out += csv_field(label) + "\n";
  }
  const std::int64_t f = d.num_features();
  const std::int64_t targets = d.size() ? d.y.num_elements() / d.size() : 0;
  for (std::int64_t r = 0; r < d.size(); ++r) {
    for (std::int64_t j = 0; j < f; ++j) out.append(csv_number(d.x.data<float>()[r * f + j])).append(",");
    if (d.num_classes > 0) {
      const std::int32_t y = d.y.data<std::int32_t>()[r];
      out += d.class_names.empty() ? std::to_string(y) : csv_field(d.class_names[static_cast<std::size_t>(y)]);
    } else {
      for (std::int64_t j = 0; j < targets; ++j)
        out.append(j ? "," : "").append(csv_number(d.y.data<float>()[r * targets + j]));
    }
    out += "\n";
  }
  return out;
}

// "dataset iris" or "data.csv", for messages that compare the data with the model.
std::string data_source(const TrainConfig& c) { return c.data.csv.empty() ? "dataset " + c.data.dataset : c.data.csv; }

// The config key that names the data: "data.csv" for a file, "data" for a built-in dataset.
std::string data_key(const TrainConfig& c) { return c.data.csv.empty() ? "data" : "data.csv"; }

// Where a key of the model spec was written: "m.json input_shape", or "config.json model.input_shape" inline.
std::string model_place(const TrainConfig& c, const std::string& key) {
  return c.model_file + " " + (c.model_path.empty() ? key : c.model_path + "." + key);
}

// "layers[3]": the JSON key of the model's last layer, whose size sets the number of classes.
std::string last_layer_key(const Sequential& net) { return "layers[" + std::to_string(net.layers().size() - 1) + "]"; }

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

// A directory holding one of these is a tensorctl run's.
const std::vector<std::string> kRunMarkers{"model.json", "summary.json", "checkpoint.safetensors"};

// How sure a caller must be that a directory holds a run. kAnyMarker: one of kRunMarkers (--overwrite, since a
// run that failed in its first epoch leaves model.json alone). kTrained: model.json beside what training
// writes after it, weights, a summary or a checkpoint (the outputs' check, so that a folder of specs with a
// model.json among them is not taken for a run).
enum class RunEvidence { kAnyMarker, kTrained };

bool holds_run(const std::filesystem::path& dir, RunEvidence evidence) {
  std::error_code ec;
  auto has = [&](const std::string& name) { return std::filesystem::exists(dir / name, ec); };
  if (evidence == RunEvidence::kAnyMarker) return std::ranges::any_of(kRunMarkers, has);
  return has("model.json") && (has("weights.safetensors") || has("summary.json") || has("checkpoint.safetensors"));
}

void add_callback_files(const nlohmann::json& config, std::vector<std::string>& names) {
  if (!config.is_object() || !config.contains("callbacks") || !config.at("callbacks").is_array()) return;
  for (const auto& cb : config.at("callbacks"))
    for (const char* key : {"filename", "log_dir"})
      if (cb.is_object() && cb.contains(key) && cb.at(key).is_string()) names.push_back(cb.at(key));
}

// A TensorBoard log folder as tensorctl writes it: train/ and validation/ holding only event files.
bool is_log_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& part : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = part.path().filename().string();
    if ((name != "train" && name != "validation") || !part.is_directory(ec) || part.is_symlink(ec)) return false;
    for (const auto& f : std::filesystem::directory_iterator(part.path(), ec))
      if (!f.is_regular_file(ec) || f.is_symlink(ec) ||
          !f.path().filename().string().starts_with("events.out.tfevents."))
        return false;
  }
  return !ec;
}

// The names of the files the run in `dir` and the new run `c` write: the fixed ones, and the callbacks' files
// as the old run's summary or checkpoint recorded them (a damaged record adds none).
std::vector<std::string> run_file_names(const std::filesystem::path& dir, const TrainConfig& c) {
  std::vector<std::string> names = kRunFiles;
  add_callback_files(c.to_json(), names);
  try {
    add_callback_files(parse_json_file((dir / "summary.json").string()).value("config", nlohmann::json()), names);
  } catch (const std::exception&) {
  }
  try {
    SafetensorsFile file;
    add_callback_files(read_training_checkpoint(dir / "checkpoint.safetensors", file).config, names);
  } catch (const std::exception&) {
  }
  return names;
}

// One of `names`, or a temporary sibling of one that a killed process left (write_file_atomic's
// `<name>.tmp.<pid>.<counter>`).
bool is_run_file(const std::string& entry, const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return entry == n || entry.starts_with(n + ".tmp."); });
}

// Makes `dir` ready for a new run: a missing or empty directory is; with `overwrite`, so is a run directory
// once its files are deleted. Everything is checked before the first file is deleted; with `check_only`,
// nothing is. The lock file and the temporaries of killed processes (is_stale_temporary) do not count: a
// directory holding only those is empty (a run killed while writing its first file leaves one), and the
// temporaries go. Called for real only holding the directory's write lock, which it leaves in place.
void clear_run_directory(const std::filesystem::path& dir, const TrainConfig& c, bool overwrite, bool check_only) {
  std::error_code ec;
  const std::string d = dir.string();
  const std::filesystem::file_status status = std::filesystem::status(dir, ec);
  if (std::filesystem::exists(status) && !std::filesystem::is_directory(status))
    throw SpecError(d, "", "the run directory (--output, or the config's \"output\") is a file, not a directory");
  if (!std::filesystem::is_directory(status)) return;  // created later (or refused there with its reason)
  const std::vector<std::string> names = run_file_names(dir, c);
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool stale = !e.is_symlink(ec) && e.is_regular_file(ec) && is_stale_temporary(name, names);
    if (name != kRunLockFile && !stale) entries.push_back(e.path());
  }
  if (ec) throw RuntimeError("cannot read run directory " + d + ": " + ec.message());
  if (entries.empty()) {
    if (!check_only) remove_stale_temporaries(dir, names);
    return;
  }
  const bool run = holds_run(dir, RunEvidence::kAnyMarker);
  // The message suggests only what can work: --resume needs a checkpoint, which a run that failed in its
  // first epoch never wrote (it leaves model.json alone), and --overwrite needs a run.
  if (!overwrite && std::filesystem::exists(dir / "checkpoint.safetensors", ec))
    throw SpecError(d, "",
                    "the run directory exists and is not empty; pass --overwrite to replace the run in it, or "
                    "--resume " +
                        d + " to continue it");
  if (!overwrite && run)
    throw SpecError(d, "",
                    "the run directory exists and holds a run without a checkpoint (a run that failed in its first "
                    "epoch writes none), so it cannot be resumed; pass --overwrite to replace it");
  if (!overwrite)
    throw SpecError(d, "",
                    "the run directory exists and is not empty, and holds no tensorctl run (no model.json, "
                    "summary.json or checkpoint.safetensors) to replace or resume; choose another --output");
  if (!run)
    throw SpecError(d, "",
                    "--overwrite replaces only a tensorctl run, and this directory holds none (no model.json, "
                    "summary.json or checkpoint.safetensors); choose another --output");
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries) {
    const auto status = std::filesystem::symlink_status(e, ec);
    const bool ours = std::filesystem::is_directory(status) ? is_log_dir(e) : std::filesystem::is_regular_file(status);
    if (!ours || !is_run_file(e.filename().string(), names))
      throw SpecError(d, "",
                      "--overwrite deletes only the files tensorctl writes, and " + e.filename().string() +
                          " is not one of them; move it away or choose another --output");
  }
  if (check_only) return;
  remove_stale_temporaries(dir, names);
  for (const auto& e : entries)
    if (std::filesystem::remove_all(e, ec) == static_cast<std::uintmax_t>(-1) || ec)
      throw RuntimeError("cannot remove " + e.string() + ": " + ec.message());
}

// A value of the config as a message shows it: JSON, shortened; a list of another length by its length.
std::string config_value_text(const nlohmann::json& v) {
  if (v.is_null()) return "nothing";
  if (v.is_array()) return fmt::format("a list of {}", v.size());
  std::string text = v.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// --resume continues a run only with the config it was trained with, but for the keys that change no result.
void check_resume_config(const TrainingState& saved, const TrainConfig& c, const std::filesystem::path& dir) {
  const auto change = find_resume_change(saved.config, c.to_json());
  if (!change) return;
  throw SpecError(
      c.file, change->key,
      fmt::format("cannot resume {}: its checkpoint was trained with {}, this run has {}; a resumed run may "
                  "change only {} (to train otherwise, start a new run with --output or --overwrite)",
                  dir.string(), config_value_text(change->before), config_value_text(change->after),
                  join(kResumeMayChange)));
}

// The names quoted, as join_first lists them: a message about 100,000 columns stays one short line.
std::string column_list(const std::vector<std::string>& names) {
  if (names.empty()) return "(not recorded)";
  std::vector<std::string> quoted;
  for (const std::string& name : names) quoted.push_back(quote_for_message(name));
  return join_first(quoted);
}

// The feature names a checkpoint's input record holds, or none when it is damaged or missing.
std::vector<std::string> recorded_feature_names(const nlohmann::json& inputs) {
  try {
    return inputs.at("data").at("feature_names").get<std::vector<std::string>>();
  } catch (const std::exception&) {
    return {};
  }
}

// --resume continues a run only on the data it was trained on, as loaded before the split: the same path
// holding other rows (or TENSORCTL_DATA_DIR pointing at another digits.csv) would continue with other batches
// and another scaling. A checkpoint that recorded no fingerprint (written before there was one) is not checked.
void check_resume_data(const TrainingState& saved, const TrainConfig& c, const PreparedData& data,
                       const std::filesystem::path& dir) {
  if (!saved.data) return;
  const DataFingerprint& now = data.fingerprint;
  const bool same_columns = !saved.data->columns || saved.data->columns == now.columns;
  if (saved.data->rows == now.rows && saved.data->hash == now.hash && same_columns) return;
  std::string what;
  if (saved.data->rows != now.rows)
    what = fmt::format("{} holds {} rows, where the data its checkpoint was trained on held {}", data_source(c),
                       now.rows, saved.data->rows);
  else if (saved.data->hash != now.hash)
    what = fmt::format("{} has changed since its checkpoint was written: the rows' values differ", data_source(c));
  else
    what = fmt::format("{} has changed since its checkpoint was written: its columns are named {}, where they were {}",
                       data_source(c), column_list(data.test_raw.feature_names),
                       column_list(recorded_feature_names(saved.inputs)));
  throw SpecError(c.file, data_key(c),
                  fmt::format("cannot resume {}: {}; a resumed run trains on the same data (to train on this data, "
                              "start a new run with --output or --overwrite)",
                              dir.string(), what));
}

// A callback that monitors a val_ quantity needs validation rows: with none, val_loss would read as 0 every
// epoch (EarlyStopping restoring epoch 1, ModelCheckpoint never saving, ReduceLROnPlateau lowering the rate
// without end). An explicit validation_split of 0 is refused where the config is read; this is the split
// that rounds to no row.
void check_validation_monitors(const TrainConfig& c, const PreparedData& data) {
  if (data.validation.size() > 0) return;
  for (std::size_t i = 0; i < c.callbacks.size(); ++i) {
    const CallbackConfig& cb = c.callbacks[i];
    if (cb.type == "TensorBoard" || !cb.monitor.starts_with("val_")) continue;
    const std::int64_t left = data.train.size() + data.validation.size();
    throw SpecError(c.file, fmt::format("callbacks[{}].monitor", i),
                    fmt::format("{} needs validation data, but data.validation_split {:g} of the {} rows left after "
                                "the test split rounds to 0 rows; raise validation_split or monitor \"{}\"",
                                cb.monitor, c.data.validation_split, left, cb.monitor.substr(4)));
  }
}

// Every text the run records in its JSON files (model.json, summary.json, the checkpoint's header) must be
// UTF-8, or the first write after an epoch fails without naming what: the config's values (paths resolved
// against a config whose own path is not UTF-8) and the run directory's path. The data's names are checked
// where the CSV is read.
void check_utf8_text(const nlohmann::json& j, const std::string& key, const std::string& file) {
  if (j.is_string()) {
    const std::string& text = j.get_ref<const std::string&>();
    if (const auto bad = first_non_utf8(text)) throw SpecError(file, key, not_utf8_message("the value", text, *bad));
    return;
  }
  if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) check_utf8_text(j[i], fmt::format("{}[{}]", key, i), file);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) check_utf8_text(v, key.empty() ? k : key + "." + k, file);
}

void check_utf8_record(const TrainConfig& c) {
  if (const auto bad = first_non_utf8(c.output))
    throw SpecError(
        c.output, "",
        not_utf8_message("the run directory (--output, --resume or the config's \"output\")", c.output, *bad));
  check_utf8_text(c.to_json(), "", c.file);
}

// A NaN or an infinity in the weights makes every prediction NaN: refused, naming the first.
void check_finite(const SafetensorsFile& file, const std::filesystem::path& path) {
  for (const auto& t : file.tensors)
    if (const auto i = first_bad_element(t.value)) {
      const float v = t.value.data<float>()[*i];
      throw RuntimeError(fmt::format("{}: tensor \"{}\": element {} is {}", path.string(), t.name, *i,
                                     std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf")));
    }
}

}  // namespace

PreparedData prepare_data(const TrainConfig& c, const Sequential& net, const std::vector<std::string>* run_classes) {
  const bool classification = loss_is_classification(c.loss);
  CsvDataOptions options{.header = c.data.header, .named_labels = true, .classes = {}};
  if (run_classes != nullptr) {
    options.named_labels = !run_classes->empty();
    options.classes = *run_classes;
  }
  Dataset data = c.data.csv.empty()
                     ? load_builtin(c.data.dataset, c.seed, c.file, "data")
                     : load_csv_dataset(c.data.csv, c.data.label, classification, c.file, "data.csv", options);
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
  if (data.num_features() != net.input_shape().num_elements())
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
  Split split = split_dataset(data, c.data.test_split, c.data.validation_split, c.data.shuffle, c.seed);
  if (split.train.size() == 0)
    throw SpecError(c.file, "data", "no rows are left for training after the test and validation splits");

  PreparedData p;
  p.fingerprint = fingerprint;
  p.test_raw = split.test;
  p.standardized = c.data.standardize;
  if (p.standardized) p.standardizer.fit(split.train.x);
  const Standardizer* s = p.standardized ? &p.standardizer : nullptr;
  p.train = scaled(split.train, s, net);
  p.validation = scaled(split.validation, s, net);
  p.test = scaled(split.test, s, net);
  return p;
}

std::unique_ptr<Model> build_model(const TrainConfig& c, bool auto_control_dependencies,
                                   std::shared_ptr<MpiWorld> workers) {
  ModelOptions options = model_options(c);
  options.auto_control_dependencies = auto_control_dependencies;
  if (workers) {
    options.worker = workers->rank();
    options.workers = std::move(workers);
  }
  // Each mirrored replica has its own network, built alike.
  std::vector<std::shared_ptr<Sequential>> nets;
  for (std::size_t r = 0; r < std::max<std::size_t>(1, options.replica_devices.size()); ++r)
    nets.push_back(std::make_shared<Sequential>(
        Sequential::from_json(c.model_spec, c.model_file, c.model_path, c.seed, c.optimizer.locking)));
  return std::make_unique<Model>(std::move(nets), options);
}

std::unique_ptr<Model> build_model_if_loss_fits(const TrainConfig& config) {
  try {
    return build_model(config);
  } catch (const SpecError& e) {
    if (e.where() != "loss") throw;
    return nullptr;
  }
}

bool loss_fits_model(const TrainConfig& config) { return build_model_if_loss_fits(config) != nullptr; }

namespace {

LearningRateControl learning_rate_control(Optimizer& optimizer) {
  return {[&optimizer] { return optimizer.learning_rate(); },
          [&optimizer](double f) { optimizer.set_lr_factor(optimizer.lr_factor() * f); }};
}

// The state a resumed run continues from: the checkpoint in `dir`, read into the model and the callbacks
// once it is known to be a run of this config at a point this data can continue.
TrainingState resume_from_checkpoint(const TrainConfig& c, const std::filesystem::path& dir, const PreparedData& data,
                                     Model& model, Callbacks& callbacks) {
  const std::filesystem::path checkpoint = dir / "checkpoint.safetensors";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw SpecError(dir.string(), "",
                    std::filesystem::exists(dir, ec) ? "cannot resume: a file, not a run directory"
                                                     : "cannot resume: the run directory does not exist");
  // A run that failed in its first epoch leaves model.json and no checkpoint: it can only start again.
  if (!std::filesystem::exists(checkpoint, ec) && std::filesystem::exists(dir / "model.json", ec))
    throw SpecError(dir.string(), "",
                    "cannot resume: the run in it has no checkpoint.safetensors (a run that failed in its first epoch "
                    "writes none); train it again with --output " +
                        dir.string() + " --overwrite");
  if (!std::filesystem::exists(checkpoint, ec))
    throw SpecError(dir.string(), "", "cannot resume: not a run directory (checkpoint.safetensors is missing)");
  // A file the run writes that is now a directory would fail only after training, with the checkpoint and
  // history already past the summary.
  for (const std::string& name : kRunFiles)
    if (std::filesystem::is_directory(dir / name, ec))
      throw SpecError((dir / name).string(), "", "cannot resume: a directory stands where the run writes this file");
  SafetensorsFile file;
  TrainingState saved = read_training_checkpoint(checkpoint, file);
  check_resume_config(saved, c, dir);
  check_resume_data(saved, c, data, dir);
  try {
    callbacks.restore_state(saved.callbacks);
  } catch (const SpecError& e) {
    throw SpecError(checkpoint.string(), e.where(), e.message());
  }
  restore_training_checkpoint(checkpoint, file, model, callbacks.expected_tensors());
  callbacks.restore_tensors(file);
  const std::int64_t steps_per_epoch = ceil_div(data.train.size(), c.batch_size);
  if (saved.steps_done >= steps_per_epoch)
    throw SpecError(checkpoint.string(), "header",
                    fmt::format("the checkpoint is {} steps into epoch {}, but an epoch of {} has {} steps: the data "
                                "changed since",
                                saved.steps_done, saved.next_epoch, data_source(c), steps_per_epoch));
  // Its weights are part way through that epoch: stopping before it ends would save them as a run of fewer
  // epochs than they have seen.
  if (saved.steps_done > 0 && c.epochs < saved.next_epoch)
    throw SpecError(c.file, "epochs",
                    fmt::format("the checkpoint in {} is {} steps into epoch {}; resume with --epochs {} or more to "
                                "finish that epoch",
                                dir.string(), saved.steps_done, saved.next_epoch, saved.next_epoch));
  TrainingState state;
  state.next_epoch = saved.next_epoch;
  state.steps_done = saved.steps_done;
  state.partial_sums = saved.partial_sums;
  state.history = std::move(saved.history);
  return state;
}

// Created before training, so a run directory that cannot be made fails at once, not after the last epoch.
void create_run_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // A path the user chose that cannot be a directory (under a file, unwritable, too long) is theirs to fix; a
  // disk that is full or failing is not.
  if (ec == std::errc::no_space_on_device || ec == std::errc::io_error)
    throw RuntimeError("cannot create run directory " + dir.string() + ": " + ec.message());
  if (ec) throw SpecError(dir.string(), "", "cannot create the run directory: " + ec.message());
}

// The directory's write lock, for a new run (made ready by clear_run_directory once locked) or a resumed one
// (whose checkpoint is read only once locked; a refused resume leaves no lock file it created).
RunLock own_run_directory(const TrainConfig& c, const TrainControl& control) {
  const std::filesystem::path dir = c.output;
  if (!control.resume.empty()) {
    std::error_code ec;
    // A missing directory or a file is refused by resume_from_checkpoint, with its reason.
    if (!std::filesystem::is_directory(dir, ec)) return RunLock();
    return RunLock::acquire(dir, RunLock::Mode::kWrite);
  }
  try {
    clear_run_directory(dir, c, control.overwrite, true);
  } catch (const SpecError&) {
    // What another writer is doing to the directory right now (its temporaries, files it has not written
    // yet) is no reason to give: name the writer.
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) (void)RunLock::acquire(dir, RunLock::Mode::kRead);
    throw;
  }
  create_run_directory(dir);
  RunLock lock = RunLock::acquire(dir, RunLock::Mode::kWrite);
  clear_run_directory(dir, c, control.overwrite, false);
  return lock;
}

// With the callbacks' state as it is now: an interrupt before the first epoch's end writes it too. The
// history's rows reach the disk first.
void write_checkpoint(const std::filesystem::path& dir, const Model& model, TrainingState& state,
                      const Callbacks& callbacks, HistoryLog& history) {
  state.callbacks = callbacks.state();
  history.flush();
  save_training_checkpoint(dir / "checkpoint.safetensors", model, state, callbacks.tensors());
}

// Trains from `state` to c.epochs, or until a callback stops it or the interrupt flag is set; after every
// epoch the callbacks act, and a checkpoint is written after the first epoch, then after any epoch that ends
// c.checkpoint_seconds or more after the last one was written, and after the last epoch trained (an
// interrupted run writes its own, mid-epoch). Any of them resumes to the same bits; the cadence keeps
// short epochs from spending their time on checkpoints (the digits MLP's 1.5 ms epochs trained 6 % slower
// writing one after each). `state` ends where training ended.
void fit_with_checkpoints(const TrainConfig& c, const PreparedData& data, Trainer& trainer, Callbacks& callbacks,
                          TrainingState& state, const Trainer::EpochCallback& on_epoch,
                          const Trainer::StepCallback& on_step, const TrainControl& control, bool writer,
                          HistoryLog& history, TrainOutcome& out) {
  const std::filesystem::path dir = c.output;
  std::optional<std::chrono::steady_clock::time_point> written;  // when this run last wrote one
  bool pending = false;                                          // an epoch ended since then
  auto checkpoint = [&] {
    write_checkpoint(dir, trainer.model(), state, callbacks, history);
    written = std::chrono::steady_clock::now();
    pending = false;
  };
  auto epoch_done = [&](const EpochResult& r) {
    if (on_epoch) on_epoch(r);
    state.history.assign(1, r);  // the last row, for the checkpoint and the summary
    if (writer) history.add(r);
    ++out.epochs_trained;
    out.train_seconds += r.seconds;
    for (const std::string& line : callbacks.on_epoch_end(r))
      if (control.on_message) control.on_message(line);
    state.next_epoch = r.epoch + 1;
    state.steps_done = 0;
    state.partial_sums = {};
    if (!writer) return;
    pending = true;
    if (!written ||
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *written).count() >= c.checkpoint_seconds)
      checkpoint();
  };
  auto step_done = [&](std::int64_t step, std::int64_t steps, const MetricValues& running) {
    if (on_step) on_step(step, steps, running);
    callbacks.on_step_end(state.next_epoch, step, steps, running);
  };
  if (control.on_start) control.on_start(state.next_epoch);
  trainer.set_interrupt_flag(control.interrupt);
  trainer.set_keep_history(false);
  trainer.fit(data.train, &data.validation, c.epochs, c.batch_size, epoch_done, step_done,
              FitPosition{state.next_epoch, state.steps_done, state.partial_sums});
  trainer.set_interrupt_flag(nullptr);
  // The last epoch's checkpoint, if it is still due (whether the run reached c.epochs or a callback stopped
  // it), before on_train_end restores any best weights. An interrupted run writes its own, mid-epoch.
  if (pending && !trainer.interrupted_at()) checkpoint();
}

// The memory of each device besides the CPU that this process used: the pool's peak, what it holds, and
// how often it took fresh memory from the device or reused a block.
nlohmann::json device_memory_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : DeviceRegistry::instance().devices()) {
    const DeviceMemoryStats m = d->memory_stats();
    if (m.fresh_blocks == 0) continue;
    out.push_back({{"name", d->name()},
                   {"peak_bytes", m.bytes_peak},
                   {"reserved_bytes", m.bytes_reserved},
                   {"fresh_blocks", m.fresh_blocks},
                   {"reused_blocks", m.reused_blocks}});
  }
  return out;
}

// Mirrored training: the replicas, and what their all-reduces cost per step against the whole step.
nlohmann::json strategy_json(const TrainConfig& c, const Model& model, double train_seconds) {
  if (c.strategy.type == "hogwild") {
    const HogwildTotals h = model.hogwild_totals();
    return {{"type", "hogwild"},
            {"workers", c.strategy.workers},
            {"locking", std::string(locking_mode_name(c.optimizer.locking))},
            {"steps", h.steps},
            {"updates_expected", h.expected},
            {"updates_applied", h.applied},
            {"lost_updates", h.expected - h.applied}};
  }
  if (model.members() <= 1) return {{"type", c.strategy.type}, {"replicas", 1}};
  const AllReduceTotals t = model.all_reduce_totals();
  const double steps = static_cast<double>(std::max<std::int64_t>(t.steps, 1));
  return {{"type", c.strategy.type},
          {"replicas", model.members()},
          {"steps", t.steps},
          {"all_reduce",
           {{"calls", t.calls},
            {"bytes", t.bytes},
            {"seconds", t.seconds},
            {"bytes_per_step", static_cast<double>(t.bytes) / steps},
            {"seconds_per_step", t.seconds / steps}}},
          {"step_seconds", train_seconds / steps},
          {"compute_seconds_per_step", std::max(0.0, train_seconds - t.seconds) / steps}};
}

// What predict and evaluate need to feed the run new rows: summary.json's "data" and "preprocessing", which
// checkpoints record too (TrainingState::inputs).
nlohmann::json input_record(const TrainConfig& c, const PreparedData& data) {
  return {{"data",
           {{"feature_names", data.test_raw.feature_names},
            {"label", c.data.label},
            {"num_classes", data.test_raw.num_classes},
            {"classes", data.test_raw.class_names}}},
          {"preprocessing",
           {{"standardize", data.standardized}, {"mean", data.standardizer.mean}, {"std", data.standardizer.std}}}};
}

nlohmann::json run_summary(const TrainConfig& c, const Model& model, const PreparedData& data,
                           const TrainOutcome& out) {
  const Sequential& net = model.net();
  const nlohmann::json inputs = input_record(c, data);
  return {{"model", net.name()},
          {"params", net.param_count()},
          {"epochs", c.epochs},
          {"epochs_run", out.last_epoch ? out.last_epoch->epoch : 0},
          {"train", out.last_epoch ? metrics_json(out.last_epoch->train) : nlohmann::json::object()},
          {"validation", out.last_epoch ? metrics_json(out.last_epoch->validation) : nlohmann::json::object()},
          {"test", metrics_json(out.test)},
          {"rows", {{"train", data.train.size()}, {"validation", data.validation.size()}, {"test", data.test.size()}}},
          {"wall_seconds", out.seconds},
          {"train_seconds", out.train_seconds},
          {"samples_per_second", out.samples_per_second},
          {"devices", device_memory_json()},
          {"strategy", strategy_json(c, model, out.train_seconds)},
          {"data", inputs.at("data")},
          {"preprocessing", inputs.at("preprocessing")},
          {"config", c.to_json()},
          {"output", c.output}};
}

// After the last epoch: the test metrics, the timing of the epochs this call trained, and the run directory's
// final files.
void finish_run(const TrainConfig& c, Trainer& trainer, const PreparedData& data,
                std::chrono::steady_clock::time_point start, TrainOutcome& out, bool writer, HistoryLog& history) {
  if (data.test.size() > 0) out.test = trainer.evaluate(data.test, c.batch_size);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.samples_per_second =
      out.train_seconds > 0 ? static_cast<double>(data.train.size() * out.epochs_trained) / out.train_seconds : 0.0;
  out.summary = run_summary(c, trainer.model(), data, out);
  if (!writer) return;

  const std::filesystem::path dir = c.output;
  const Sequential& net = trainer.model().net();
  save_safetensors(dir / "weights.safetensors", variable_values(net.variables()),
                   {{"format", "tensorctl"}, {"model", net.name()}});
  history.flush();
  write_file_atomic(dir / "test.csv", dataset_csv(data.test_raw, c.data.label, c.data.header));
  write_file_atomic(dir / "summary.json", out.summary.dump(2) + "\n");
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// A multi-worker run's MPI world, joined after its checks: started by mpirun, a build with MPI, workers
// that divide the batch, and the same resolved config on every rank. Null for the other strategies.
std::shared_ptr<MpiWorld> join_workers(const TrainConfig& c) {
  if (c.strategy.type != "multi-worker") return nullptr;
  if (!mpi_built())
    throw SpecError(c.file, "strategy.type", "multi-worker needs a tensorctl built with MPI (libopenmpi-dev)");
  if (!mpi_launch())
    throw SpecError(c.file, "strategy.type",
                    "multi-worker runs one process per worker: start it with mpirun -np N tensorctl train " + c.file);
  auto world = MpiWorld::get(MpiWorld::Seconds(c.strategy.timeout_seconds));
  if (c.batch_size % world->members() != 0)
    throw SpecError(c.file, "batch_size",
                    fmt::format("{} workers do not divide batch_size {}: each worker takes an equal share of the "
                                "batch",
                                world->members(), c.batch_size));
  const std::vector<std::uint64_t> hashes =
      world->all_gather(fnv1a(c.to_json().dump()), "comparing the ranks' configs");
  for (std::size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0])
      throw SpecError(c.file, "",
                      fmt::format("rank {} resolved another config than rank 0 (hash {:016x}, rank 0's {:016x}): every "
                                  "worker must train the same config with the same flags",
                                  r, hashes[r], hashes[0]));
  return world;
}

}  // namespace

TrainOutcome train_and_save(const TrainConfig& config, const Trainer::EpochCallback& on_epoch,
                            const Trainer::StepCallback& on_step, const TrainControl& control) {
  TrainConfig c = config;
  if (!control.resume.empty()) c.output = control.resume.string();
  check_utf8_record(c);
  // Everything that can be wrong with the input is found before the run directory is touched.
  check_training_memory(Sequential::check(c.model_spec, c.model_file, c.model_path), c.batch_size,
                        c.optimizer.slots_per_weight(), c.file, "batch_size");
  // Multi-worker: rank 0 alone writes the run directory; every rank reads a checkpoint to resume.
  const std::shared_ptr<MpiWorld> workers = join_workers(c);
  const bool writer = !workers || workers->rank() == 0;
  std::unique_ptr<Model> model = build_model(c, true, workers);
  PreparedData data = prepare_data(c, model->net());
  check_validation_monitors(c, data);
  const std::filesystem::path dir = c.output;
  Trainer trainer(*model);
  Callbacks callbacks(c.callbacks, trainer, dir, learning_rate_control(model->optimizer()), writer);
  // Held until this function returns: no other process writes or reads the directory meanwhile.
  RunLock lock = writer ? own_run_directory(c, control) : RunLock();
  TrainingState state;
  if (!control.resume.empty()) {
    try {
      state = resume_from_checkpoint(c, dir, data, *model, callbacks);
    } catch (const SpecError&) {
      lock.release_and_remove_if_created();
      throw;
    }
    if (writer) remove_stale_temporaries(dir, run_file_names(dir, c));
    // A finished run resumed to no more epochs than it trained: nothing to train, and nothing rewritten
    // (its summary once became "epochs 5, epochs_run 10" after `--resume --epochs 5` on a 10-epoch run).
    std::error_code ec;
    if (state.next_epoch > c.epochs && state.steps_done == 0 && std::filesystem::exists(dir / "summary.json", ec)) {
      TrainOutcome out;
      if (!state.history.empty()) out.last_epoch = state.history.back();
      out.first_epoch = state.next_epoch;
      out.summary = parse_json_file((dir / "summary.json").string());
      if (out.summary.is_object() && out.summary.contains("test") && out.summary.at("test").is_object())
        for (const auto& [k, v] : out.summary.at("test").items())
          if (v.is_number()) out.test.emplace_back(k, v.get<double>());
      return out;
    }
  }
  HistoryLog history(dir / "history.csv");
  if (writer && !control.resume.empty()) history.resume(state.next_epoch, state.history);
  if (state.history.size() > 1) state.history.erase(state.history.begin(), state.history.end() - 1);
  state.config = c.to_json();
  state.data = data.fingerprint;
  state.inputs = input_record(c, data);
  if (writer) write_file_atomic(dir / "model.json", model->net().to_json().dump(2) + "\n");
  if (control.on_placement_warnings && !model->placement_warnings().empty())
    control.on_placement_warnings(model->placement_warnings());
  const auto start = std::chrono::steady_clock::now();

  TrainOutcome out;
  out.first_epoch = state.next_epoch;
  fit_with_checkpoints(c, data, trainer, callbacks, state, on_epoch, on_step, control, writer, history, out);
  if (!state.history.empty()) out.last_epoch = state.history.back();
  if (trainer.interrupted_at()) {
    out.interrupted_at = trainer.interrupted_at();
    state.next_epoch = out.interrupted_at->epoch;
    state.steps_done = out.interrupted_at->steps_done;
    state.partial_sums = out.interrupted_at->sums;
    if (writer) write_checkpoint(dir, *model, state, callbacks, history);
    return out;
  }
  const std::string restored = callbacks.on_train_end();
  if (!restored.empty() && control.on_message) control.on_message(restored);
  finish_run(c, trainer, data, start, out, writer, history);
  return out;
}

namespace {

// Where a run's record of its inputs lies, and how a damaged one is reported.
struct InputRecordPlace {
  std::string file;    // summary.json or the checkpoint
  std::string prefix;  // the JSON path of the record in it, with a trailing dot, or ""
  std::string damaged;
};

// The inputs' scaling, names and classes, from a record as input_record writes it, each value with its type
// and range checked, so a tampered file is a SpecError naming the key, never nlohmann's message without a
// place nor a conversion out of range (1e39 as an int).
void read_input_record(LoadedRun& run, SpecReader& record) {
  SpecReader pre = record.object("preprocessing");
  run.standardized = pre.boolean("standardize");
  run.standardizer.mean = pre.float_list("mean");
  run.standardizer.std = pre.float_list("std");
  SpecReader info = record.object("data");
  run.feature_names = info.string_list("feature_names");
  run.label = info.string("label");
  const std::int64_t classes = info.non_negative_int("num_classes");
  if (classes > std::numeric_limits<int>::max())
    info.fail("num_classes", fmt::format("{} classes, more than any model has outputs", classes));
  run.num_classes = static_cast<int>(classes);
  // Runs from before class names had no "classes".
  if (info.has("classes")) run.class_names = info.string_list("classes");
  if (!run.class_names.empty() && run.class_names.size() != static_cast<std::size_t>(run.num_classes))
    info.fail("classes", "the class names do not match num_classes");
}

// What an interrupted run (model.json and checkpoint.safetensors, no summary yet) needs besides its weights:
// the config and the inputs' scaling, names and classes from the checkpoint. A checkpoint written before it
// recorded the scaling has it recomputed from the training data as the run computed it, which holds only as
// long as that data is unchanged.
InputRecordPlace load_interrupted_run(LoadedRun& run, const std::filesystem::path& checkpoint) {
  SafetensorsFile file;
  const TrainingState state = read_training_checkpoint(checkpoint, file);
  run.config = TrainConfig::from_json(state.config, checkpoint.string(), "config", ConfigOrigin::kRunRecord);
  run.config.model_file = (run.dir / "model.json").string();
  run.config.model_spec = parse_json_file(run.config.model_file);
  run.config.model_path = "";
  if (!state.inputs.is_null()) {
    const std::string damaged = "damaged training state: ";
    SpecReader record(state.inputs, checkpoint.string(), "__metadata__.inputs", damaged);
    read_input_record(run, record);
    return {checkpoint.string(), "__metadata__.inputs.", damaged};
  }
  const Sequential net = Sequential::from_json(run.config.model_spec, run.config.model_file, "", run.config.seed,
                                               run.config.optimizer.locking);
  PreparedData data;
  try {
    data = prepare_data(run.config, net);
  } catch (const SpecError& e) {
    throw SpecError(run.dir.string(), "",
                    std::string("an interrupted run (no summary.json yet) needs its training data to recompute its "
                                "input scaling: ") +
                        e.what());
  }
  run.standardized = data.standardized;
  run.standardizer = data.standardizer;
  run.feature_names = data.test_raw.feature_names;
  run.label = run.config.data.label;
  run.num_classes = data.test_raw.num_classes;
  run.class_names = data.test_raw.class_names;
  return {run.dir.string(), "", "damaged run summary: "};
}

InputRecordPlace load_finished_run(LoadedRun& run, const std::string& summary_file) {
  run.summary = parse_json_file(summary_file);
  if (!run.summary.is_object() || !run.summary.contains("config"))
    throw SpecError(summary_file, "", "damaged run summary: it records no config");
  run.config = TrainConfig::from_json(run.summary.at("config"), summary_file, "config", ConfigOrigin::kRunRecord);
  // The model as the run built it, whose variables the weights are.
  run.config.model_file = (run.dir / "model.json").string();
  run.config.model_spec = parse_json_file(run.config.model_file);
  run.config.model_path = "";
  SpecReader summary(run.summary, summary_file, "", "damaged run summary: ");
  read_input_record(run, summary);
  return {summary_file, "", "damaged run summary: "};
}

// What a run records of its inputs and labels, against the model and its loss: a tampered summary.json must
// neither reach a kernel with the wrong number of features or the wrong kind of targets, nor scale every input
// into NaN, nor have predict read a class or a target the model has no output for.
void check_input_record(const LoadedRun& run, std::int64_t inputs, std::int64_t outputs,
                        const InputRecordPlace& record) {
  const std::string& file = record.file;
  const std::string& damaged = record.damaged;
  auto place = [&](const std::string& key) { return record.prefix + key; };
  const std::string& loss = run.config.loss;
  if (!loss_is_classification(loss)) {
    if (run.num_classes != 0)
      throw SpecError(file, place("data.num_classes"),
                      fmt::format("{}{} classes, where a run of loss {} has none", damaged, run.num_classes, loss));
    // Such a run read one target per row, from its label column, for its one output.
    if (outputs != 1)
      throw SpecError(
          (run.dir / "model.json").string(), "",
          fmt::format("damaged run: the model has {} outputs, where a run of loss {} (as {} records) has one", outputs,
                      loss, file));
  } else if (run.num_classes < 1 || run.num_classes > outputs) {
    throw SpecError(file, place("data.num_classes"),
                    fmt::format("{}{} classes, where a run of loss {} on this model has 1 to {}", damaged,
                                run.num_classes, loss, outputs));
  }
  if (static_cast<std::int64_t>(run.feature_names.size()) != inputs)
    throw SpecError(
        file, place("data.feature_names"),
        fmt::format("{}{} feature names for a model of {} inputs", damaged, run.feature_names.size(), inputs));
  if (!run.standardized) return;
  const Standardizer& s = run.standardizer;
  if (static_cast<std::int64_t>(s.mean.size()) != inputs || s.std.size() != s.mean.size())
    throw SpecError(
        file, place("preprocessing"),
        fmt::format("{}{} means and {} scales for a model of {} inputs", damaged, s.mean.size(), s.std.size(), inputs));
  for (std::size_t i = 0; i < s.mean.size(); ++i) {
    if (!std::isfinite(s.mean[i]))
      throw SpecError(file, place(fmt::format("preprocessing.mean[{}]", i)), damaged + "not a finite number");
    // Standardizer::fit gives 1 to a constant column: a scale is never 0, and one below the smallest normal
    // float would be read as 0 where denormals are flushed.
    if (!std::isfinite(s.std[i]) || s.std[i] < std::numeric_limits<float>::min())
      throw SpecError(file, place(fmt::format("preprocessing.std[{}]", i)),
                      fmt::format("{}a scale must be a positive finite number, got {}", damaged, s.std[i]));
  }
}

}  // namespace

LoadedRun load_run(const std::filesystem::path& dir, int inter_op_threads, int intra_op_threads,
                   const std::string& weights) {
  const std::string d = dir.string();
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) throw SpecError(d, "", "no such run directory");
  if (!std::filesystem::is_directory(dir, ec))
    throw SpecError(d, "", "not a run directory: expected the directory that train wrote");
  // Every file of the run is read under it, so none comes from a run that replaces it meanwhile.
  const RunLock lock = RunLock::acquire(dir, RunLock::Mode::kRead);
  if (!std::filesystem::exists(dir / "model.json", ec))
    throw SpecError(d, "", "not a run directory: model.json is missing");
  const bool finished = std::filesystem::exists(dir / "summary.json", ec);
  const bool checkpointed = std::filesystem::exists(dir / "checkpoint.safetensors", ec);
  if (!finished && !checkpointed)
    throw SpecError(d, "",
                    "not a run directory: summary.json (a finished run) and checkpoint.safetensors (an interrupted "
                    "one) are both missing");
  std::filesystem::path weights_path = dir / (finished ? "weights.safetensors" : "checkpoint.safetensors");
  if (!weights.empty())
    weights_path = std::filesystem::path(weights).is_absolute() ? std::filesystem::path(weights) : dir / weights;
  if (!std::filesystem::exists(weights_path, ec))
    throw SpecError(weights_path.string(), "",
                    weights.empty() ? "not a run directory: weights.safetensors is missing (give --weights to use "
                                      "another file of the run, such as checkpoint.safetensors)"
                                    : "cannot open file: No such file or directory (--weights is relative to the run "
                                      "directory)");

  LoadedRun run;
  run.dir = dir;
  const InputRecordPlace record = finished ? load_finished_run(run, (dir / "summary.json").string())
                                           : load_interrupted_run(run, dir / "checkpoint.safetensors");
  run.config.output = d;
  run.config.inter_op_threads = inter_op_threads;
  run.config.intra_op_threads = intra_op_threads;
  // Predicting and evaluating need one replica, on the device the first replica trained on.
  TrainConfig one = run.config;
  if (one.strategy.mirrored() && !one.strategy.devices.empty()) one.device = one.strategy.devices[0];
  one.strategy = StrategyConfig{};
  run.model = build_model(one);
  const auto& net = run.model->net();
  check_input_record(run, net.input_shape().num_elements(), net.output_shape().num_elements(), record);

  SafetensorsFile file = load_safetensors(weights_path);
  // A training checkpoint also holds the optimizer's state and the callbacks' tensors: only the weights count.
  if (is_training_checkpoint(file)) {
    std::vector<NamedTensor> kept;
    for (const auto& v : net.variables())
      if (const Tensor* t = file.find(v->name())) kept.push_back({v->name(), *t});
    file.tensors = std::move(kept);
  }
  check_against(file, variable_values(net.variables()), weights_path.string());
  check_finite(file, weights_path);
  assign_from(file, net.variables());
  run.weights = weights_path;
  return run;
}

void check_output_keeps_inputs(const std::string& output, const std::string& flag,
                               const std::vector<std::string>& inputs) {
  if (output.empty() || output == "-") return;
  namespace fs = std::filesystem;
  std::error_code ec;
  // Where the bytes land: a link is followed, as write_file_atomic follows it.
  const fs::path target = final_target(output);
  for (const std::string& input : inputs)
    if (!input.empty() && fs::equivalent(target, input, ec) && !ec)
      throw SpecError("", flag,
                      output + (output == input ? " is" : " leads to " + input + ",") +
                          " the file this command reads; write the output under another name");
  const fs::path dir = fs::absolute(target, ec).parent_path();
  if (ec) return;
  const bool run = holds_run(dir, RunEvidence::kTrained);
  const std::string name = target.filename().string();
  if (run && is_run_file(name, run_file_names(dir, TrainConfig{})))
    throw SpecError("", flag,
                    output + " is the file " + name + " of the run in " + dir.string() +
                        "; write the output outside the run or under another name");
}

RunInput read_run_input(const LoadedRun& run, const std::string& csv_path,
                        const std::vector<std::string>& keep_columns) {
  const bool header = run.config.data.header;
  CsvOptions options{.header = header, .text_columns = keep_columns, .number_columns = {}};
  if (run.num_classes > 0) options.text_columns.push_back(run.label);
  // Other columns of a file with a header are none of our business; a headerless file's are all features.
  auto missing_column = [&](const std::string& name) {
    return SpecError(
        csv_path, "line 1",
        "missing column \"" + name + "\" (the model was trained on: " + join_first(run.feature_names) + ")");
  };
  if (header) {
    options.number_columns = run.feature_names;
    options.number_columns.push_back(run.label);
    // Checked as soon as the header is read: `yes 1 | tensorctl predict --input -` is refused at once.
    // A set of the features, not of the columns: a header of millions of names costs no more than its cells.
    options.check_header = [&](const std::vector<std::string>& columns) {
      std::unordered_set<std::string_view> missing(run.feature_names.begin(), run.feature_names.end());
      for (const std::string& name : columns) missing.erase(name);
      for (const std::string& name : run.feature_names)
        if (missing.contains(name)) throw missing_column(name);
    };
  }
  // The file is read whole, then parsed to floats and kept text: a quarter of what the model may take.
  options.max_bytes = static_cast<std::size_t>(memory_limit_bytes() / 4);
  options.max_bytes_reason = "a quarter of the memory limit: this machine's memory, or TENSORCTL_MEMORY_LIMIT";
  CsvTable table = read_csv(csv_path, options);
  const std::int64_t f = static_cast<std::int64_t>(run.feature_names.size());
  // A headerless file of the features alone: its columns are the features, in order.
  if (!header && static_cast<std::int64_t>(table.columns.size()) == f) table.columns = run.feature_names;
  auto where = [&](std::int64_t r) { return "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]); };
  // Without names, a column past the ones the run knows cannot be told from a shifted feature: refuse it.
  auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::ranges::find(names, name) != names.end();
  };
  if (!header)
    for (const std::string& name : table.columns)
      if (name != run.label && !listed(run.feature_names, name) && !listed(keep_columns, name))
        throw SpecError(csv_path, where(0),
                        fmt::format("{} cells, but a row without a header holds the model's {} features, in order, "
                                    "and at most the label as column {}; column {} is neither (or keep it with "
                                    "--keep-columns {})",
                                    table.columns.size(), f, run.label, name, name));
  std::vector<int> cols;
  for (const auto& name : run.feature_names) {
    int c = table.column_index(name);
    if (c < 0) throw missing_column(name);
    // A feature read as text (also kept, or a headerless file's renamed column) must still be numbers.
    if (table.is_text(c))
      for (std::int64_t r = 0; r < table.rows; ++r)
        if (std::isnan(table.at(r, c)))
          throw SpecError(csv_path, where(r),
                          "column \"" + name + "\": expected a finite number, got \"" + table.text_at(r, c) + "\"");
    cols.push_back(c);
  }
  RunInput in;
  for (const auto& name : keep_columns) {
    const int c = table.column_index(name);
    if (c < 0)
      throw SpecError(
          csv_path, "line 1",
          "no column \"" + name + "\" to keep (--keep-columns; the columns are " + join_first(table.columns, 16) + ")");
    in.kept_names.push_back(name);
    in.kept.push_back(table.text[static_cast<std::size_t>(c)]);
  }
  const int label_col = table.column_index(run.label);
  in.rows = table.rows;
  Tensor x = Tensor::empty(DType::kF32, Shape{table.rows, f});
  for (std::int64_t r = 0; r < table.rows; ++r)
    for (std::int64_t j = 0; j < f; ++j)
      x.mutable_data<float>()[r * f + j] = table.at(r, cols[static_cast<std::size_t>(j)]);
  Tensor scaled_x = run.standardized ? run.standardizer.apply(x) : x;
  // A float like 3.4e38 is read as written, but scaled by a small deviation it leaves the floats.
  for (std::int64_t r = 0; r < table.rows; ++r)
    for (std::int64_t j = 0; j < f; ++j)
      if (!std::isfinite(scaled_x.data<float>()[r * f + j])) {
        const auto col = static_cast<std::size_t>(j);
        throw SpecError(csv_path, where(r),
                        fmt::format("column \"{}\": {:.9g} lies so far from the training data (mean {:.6g}, "
                                    "deviation {:.6g}) that its scaled value overflows a float",
                                    run.feature_names[col], x.data<float>()[r * f + j], run.standardizer.mean[col],
                                    run.standardizer.std[col]));
      }
  in.x = shape_for_model(scaled_x, run.model->net());
  in.row_lines = table.row_lines;
  if (label_col >= 0 && table.rows > 0) {
    Dataset labelled;
    labelled.name = std::filesystem::path(csv_path).stem().string();
    labelled.feature_names = run.feature_names;
    const CsvDataOptions labels{.header = header, .named_labels = !run.class_names.empty(), .classes = run.class_names};
    set_labels(labelled, table, csv_path, label_col, run.num_classes > 0, labels);
    const std::int64_t outputs = run.model->net().output_shape().num_elements();
    if (run.num_classes > 0 && labelled.num_classes > outputs)
      for (std::int64_t r = 0; r < table.rows; ++r)
        if (const std::int32_t y = labelled.y.data<std::int32_t>()[r]; y >= outputs)
          throw SpecError(
              csv_path, where(r),
              fmt::format("label {} does not fit the model's {} outputs ({} {}); labels must lie in 0..{}", y, outputs,
                          (run.dir / "model.json").string(), last_layer_key(run.model->net()), outputs - 1));
    labelled.x = in.x;
    in.labelled = std::move(labelled);
  }
  return in;
}

void check_finite_outputs(const Tensor& outputs, const RunInput& in, const std::string& csv_path) {
  const std::int64_t n = in.rows;
  const std::int64_t width = n ? outputs.num_elements() / n : 0;
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t j = 0; j < width; ++j)
      if (const float v = outputs.data<float>()[r * width + j]; !std::isfinite(v))
        throw SpecError(csv_path, "line " + std::to_string(in.row_lines[static_cast<std::size_t>(r)]),
                        fmt::format("the model's output {} for this row is {}: the row's values lie too far from the "
                                    "data the model was trained on",
                                    j, v));
}

}  // namespace tctl
