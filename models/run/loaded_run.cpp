#include "models/run/loaded_run.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/errors.h"
#include "models/io/run_layout.h"
#include "models/io/run_lock.h"
#include "models/io/safetensors.h"
#include "models/io/spec_reader.h"
#include "models/nn/losses.h"
#include "models/record/prepared_data.h"
#include "models/record/training_state.h"

namespace tctl {

namespace {

// A NaN or an infinity in the weights makes every prediction NaN: refused, naming the first.
void check_finite(const SafetensorsFile& file, const std::filesystem::path& path) {
  for (const auto& t : file.tensors)
    if (const auto i = first_bad_element(t.value)) {
      const float v = t.value.data<float>()[*i];
      throw RuntimeError(fmt::format("{}: tensor \"{}\": element {} is {}", path.string(), t.name, *i,
                                     std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf")));
    }
}

// Where a run's record of its inputs lies, and how a damaged one is reported.
struct InputRecordPlace {
  std::string file;    // summary.json or the checkpoint
  std::string prefix;  // the JSON path of the record in it, with a trailing dot, or ""
  std::string damaged;
};

// A text run's vectorizer: its options and vocabulary as input_record writes them.
TextVectorizer read_text_record(SpecReader& pre) {
  SpecReader r = pre.object("text");
  TextOptions t;
  t.column = r.string("column");
  t.standardize = text_standardize_from_name(r.one_of("standardize", text_standardize_names(), ""));
  t.split = text_split_from_name(r.one_of("split", text_split_names(), ""));
  t.max_tokens = r.positive_int("max_tokens");
  t.output_sequence_length = r.positive_int("output_sequence_length");
  std::vector<std::string> vocabulary = r.string_list("vocabulary");
  if (const std::string problem = TextVectorizer::vocabulary_problem(vocabulary); !problem.empty())
    r.fail("vocabulary", problem);
  if (t.max_tokens > kMaxTextTokens || static_cast<std::int64_t>(vocabulary.size()) > t.max_tokens)
    r.fail("vocabulary",
           fmt::format("{} entries, more than max_tokens ({}) or {}", vocabulary.size(), t.max_tokens, kMaxTextTokens));
  r.finish();
  return TextVectorizer::with_vocabulary(t, std::move(vocabulary));
}

// An image run's decoding: its size, colour mode and interpolation as ImageOptions::to_json writes them.
ImageOptions read_images_record(SpecReader& pre) {
  SpecReader r = pre.object("images");
  ImageOptions o;
  const std::vector<std::int64_t> size = r.positive_int_list("image_size");
  if (size.size() != 2 || size[0] > kMaxImageSide || size[1] > kMaxImageSide)
    r.fail("image_size", fmt::format("expected [height, width], each 1 to {}", kMaxImageSide));
  o.height = size[0];
  o.width = size[1];
  o.channels = r.one_of("color_mode", {"rgb", "grayscale"}, "") == "rgb" ? 3 : 1;
  o.interpolation = r.one_of("interpolation", {"bilinear", "nearest"}, "") == "nearest" ? ImageInterpolation::kNearest
                                                                                        : ImageInterpolation::kBilinear;
  r.finish();
  return o;
}

// The inputs' scaling, names and classes, from a record as input_record writes it, each value with its type
// and range checked, so a tampered file is a SpecError naming the key, never nlohmann's message without a
// place nor a conversion out of range (1e39 as an int).
void read_input_record(LoadedRun& run, SpecReader& record) {
  SpecReader pre = record.object("preprocessing");
  run.standardized = pre.boolean("standardize");
  run.standardizer.mean = pre.float_list("mean");
  run.standardizer.std = pre.float_list("std");
  if (pre.has("text")) run.text = read_text_record(pre);
  if (pre.has("images")) run.images = read_images_record(pre);
  SpecReader info = record.object("data");
  run.feature_names = info.string_list("feature_names");
  run.label = info.string("label");
  const std::int64_t classes = info.non_negative_int("num_classes");
  if (classes > std::numeric_limits<int>::max())
    info.fail("num_classes", fmt::format("{} classes, more than any model has outputs", classes));
  run.num_classes = static_cast<int>(classes);
  // Runs of one target, and those from before [N, T] targets, have no "targets".
  if (info.has("targets")) {
    run.targets = info.positive_int("targets");
    if (run.num_classes > 0) info.fail("targets", "a classification run has one label per row");
  }
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
  run.config.model_file = RunLayout(run.dir).model().string();
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
  run.text = data.text;
  run.images = data.images;
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
  run.config.model_file = RunLayout(run.dir).model().string();
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
    // Such a run read a row's targets (one, from its label column, or the T of an array's rows), one per output.
    if (outputs != run.targets)
      throw SpecError(RunLayout(run.dir).model().string(), "",
                      fmt::format("damaged run: the model has {} outputs, where a run of loss {} (as {} records) "
                                  "has {}",
                                  outputs, loss, file, run.targets == 1 ? "one" : std::to_string(run.targets)));
  } else if (run.num_classes < 1 || run.num_classes > outputs) {
    throw SpecError(file, place("data.num_classes"),
                    fmt::format("{}{} classes, where a run of loss {} on this model has 1 to {}", damaged,
                                run.num_classes, loss, outputs));
  }
  if (static_cast<std::int64_t>(run.feature_names.size()) != inputs)
    throw SpecError(
        file, place("data.feature_names"),
        fmt::format("{}{} feature names for a model of {} inputs", damaged, run.feature_names.size(), inputs));
  if (run.text) {
    const std::string key = place("preprocessing.text");
    if (run.text->length() != inputs)
      throw SpecError(file, key + ".output_sequence_length",
                      fmt::format("{}{} ids per row for a model of {} inputs", damaged, run.text->length(), inputs));
    // An id the embedding has no row for would fail the first batch predict runs.
    const std::int64_t ids = run.model->net().input_token_ids();
    if (ids > 0 && static_cast<std::int64_t>(run.text->vocabulary().size()) > ids)
      throw SpecError(file, key + ".vocabulary",
                      fmt::format("{}{} entries, but the model's embedding takes ids below {}", damaged,
                                  run.text->vocabulary().size(), ids));
  }
  if (run.images && run.images->features() != inputs)
    throw SpecError(
        file, place("preprocessing.images"),
        fmt::format("{}images of {} values for a model of {} inputs", damaged, run.images->features(), inputs));
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
  const RunLayout layout(dir);
  if (!std::filesystem::exists(layout.model(), ec))
    throw SpecError(d, "", "not a run directory: model.json is missing");
  const bool finished = std::filesystem::exists(layout.summary(), ec);
  const bool checkpointed = std::filesystem::exists(layout.checkpoint(), ec);
  if (!finished && !checkpointed)
    throw SpecError(d, "",
                    "not a run directory: summary.json (a finished run) and checkpoint.safetensors (an interrupted "
                    "one) are both missing");
  std::filesystem::path weights_path = finished ? layout.weights() : layout.checkpoint();
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
  const InputRecordPlace record =
      finished ? load_finished_run(run, layout.summary().string()) : load_interrupted_run(run, layout.checkpoint());
  run.config.output = d;
  run.config.inter_op_threads = inter_op_threads;
  run.config.intra_op_threads = intra_op_threads;
  // Predicting and evaluating need the network's inference graph alone, on the device the first replica
  // trained on: no optimizer, gradients or replicas.
  const TrainConfig& c = run.config;
  run.model = std::make_unique<Inference>(std::make_shared<Sequential>(Sequential::from_json(
                                              c.model_spec, c.model_file, c.model_path, c.seed, c.optimizer.locking)),
                                          c.inference_options(), inter_op_threads, intra_op_threads);
  const auto& net = run.model->net();
  check_input_record(run, net.input_shape().num_elements(), net.output_shape().num_elements(), record);
  run.binary = loss_is_binary(c.loss);

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

MetricValues evaluate_run(LoadedRun& run, const Dataset& data, std::int64_t batch_size) {
  return run.model->evaluate(data, batch_size);
}

}  // namespace tctl
