#include "models/train/run_summary.h"

#include <sys/resource.h>

#include <algorithm>

#include "core/device.h"
#include "models/data/csv.h"
#include "models/data/row_stream.h"
#include "models/train/history_log.h"
#include "models/train/training_run.h"

namespace tctl {

namespace {

nlohmann::json metrics_json(const MetricValues& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values) j[k] = v;
  return j;
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
  const std::string type(strategy_type_name(c.strategy.type));
  if (c.strategy.type == StrategyType::kHogwild) {
    const HogwildTotals h = model.hogwild_totals();
    return {{"type", type},
            {"workers", c.strategy.workers},
            {"locking", std::string(locking_mode_name(c.optimizer.locking))},
            {"steps", h.steps},
            {"updates_expected", h.expected},
            {"updates_applied", h.applied},
            {"lost_updates", h.expected - h.applied},
            {"staleness", h.staleness}};
  }
  if (model.members() <= 1) return {{"type", type}, {"replicas", 1}};
  const AllReduceTotals t = model.all_reduce_totals();
  const double steps = static_cast<double>(std::max<std::int64_t>(t.steps, 1));
  return {{"type", type},
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

}  // namespace

// The rows as CSV, with a header row unless the data had none (so the file reads back as the data did).
void write_dataset_csv(PieceWriter write, const Dataset& d, const std::string& label, bool header,
                       const std::string& text_column) {
  std::string out;
  const bool text = !text_column.empty() || !d.paths.empty();
  if (header) {
    if (text) out += csv_field(d.paths.empty() ? text_column : std::string(kImagePathColumn)) + ",";
    for (const auto& f : d.feature_names)
      if (!text) out += csv_field(f) + ",";
    const std::vector<std::string> targets = target_columns(label, d.num_targets());
    for (std::size_t j = 0; j < targets.size(); ++j) out += (j ? "," : "") + csv_field(targets[j]);
    out += "\n";
  }
  const std::int64_t f = text ? 0 : d.num_features();
  // A streamed part a window at a time, in the windows' order (row_stream.h); one in memory as it is.
  for_each_window(d, [&](const Dataset& w) {
    const std::int64_t targets = w.size() ? w.y.num_elements() / w.size() : 0;
    for (std::int64_t r = 0; r < w.size(); ++r) {
      if (text)
        out.append(
               csv_field(w.paths.empty() ? w.texts[static_cast<std::size_t>(r)] : w.paths[static_cast<std::size_t>(r)]))
            .append(",");
      for (std::int64_t j = 0; j < f; ++j) {
        append_csv_float(out, w.x.data<float>()[r * f + j]);
        out += ',';
      }
      if (w.num_classes > 0) {
        const std::int32_t y = w.y.data<std::int32_t>()[r];
        out += w.class_names.empty() ? std::to_string(y) : csv_field(w.class_names[static_cast<std::size_t>(y)]);
      } else {
        for (std::int64_t j = 0; j < targets; ++j) {
          if (j > 0) out += ',';
          append_csv_float(out, w.y.data<float>()[r * targets + j]);
        }
      }
      out += "\n";
      // A megabyte at a time: the rows never held whole (bench/csv_load.sh).
      if (out.size() >= (std::size_t{1} << 20)) {
        write(out);
        out.clear();
      }
    }
  });
  write(out);
}

std::string dataset_csv(const Dataset& d, const std::string& label, bool header, const std::string& text_column) {
  std::string out;
  write_dataset_csv([&](std::string_view piece) { out.append(piece); }, d, label, header, text_column);
  return out;
}

// What predict and evaluate need to feed the run new rows: summary.json's "data" and "preprocessing", which
// checkpoints record too (TrainingState::inputs).
nlohmann::json input_record(const TrainConfig& c, const PreparedData& data) {
  nlohmann::json preprocessing{
      {"standardize", data.standardized}, {"mean", data.standardizer.mean}, {"std", data.standardizer.std}};
  if (data.images) preprocessing["images"] = data.images->to_json();
  if (data.text) {
    preprocessing["text"] = data.text->options().to_json();
    preprocessing["text"]["vocabulary"] = data.text->vocabulary();
  }
  nlohmann::json record{{"data",
                         {{"feature_names", data.test_raw.feature_names},
                          {"label", c.data.label},
                          {"num_classes", data.test_raw.num_classes},
                          {"classes", data.test_raw.class_names}}},
                        {"preprocessing", preprocessing}};
  // A regression on [N, T] targets; runs of one target (and those from before) have no key.
  if (const std::int64_t targets = data.train.num_targets(); targets > 1) record["data"]["targets"] = targets;
  return record;
}

namespace {

// summary.json's "input": how long the loop waited for its batches (in all, per step, as a share of the
// epochs), and how the data was held: in memory, or streamed a window at a time from its cache.
nlohmann::json input_json(const TrainConfig& c, const PreparedData& data, const TrainOutcome& out) {
  const std::int64_t steps = out.epochs_trained * ((data.train.size() + c.batch_size - 1) / c.batch_size);
  nlohmann::json j{{"wait_seconds", out.input_wait_seconds},
                   {"wait_share", out.train_seconds > 0 ? out.input_wait_seconds / out.train_seconds : 0.0},
                   {"wait_ms_per_step", steps > 0 ? out.input_wait_seconds * 1e3 / static_cast<double>(steps) : 0.0},
                   {"mode", data.streamed ? "stream" : "memory"}};
  if (data.streamed) {
    j["cache"] = data.streamed->cache.string();
    j["cache_reused"] = data.streamed->reused;
    j["window_rows"] = data.streamed->window_rows;
    j["windows"] = window_count(data.train);
  }
  return j;
}

// The most memory this process has held resident so far (getrusage's ru_maxrss, in KiB on Linux).
std::int64_t peak_resident_bytes() {
  rusage usage{};
  return ::getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<std::int64_t>(usage.ru_maxrss) * 1024 : 0;
}

}  // namespace

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
          {"input", input_json(c, data, out)},
          {"peak_resident_bytes", peak_resident_bytes()},
          {"devices", device_memory_json()},
          {"strategy", strategy_json(c, model, out.train_seconds)},
          {"data", inputs.at("data")},
          {"preprocessing", inputs.at("preprocessing")},
          {"config", c.to_json()},
          {"output", c.output}};
}

}  // namespace tctl
