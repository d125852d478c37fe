// tensorctl init DATA.csv --label COLUMN: a train config and a model spec that train on the CSV at once, from
// its columns: the label's values decide classification or regression (or --task does), the other columns
// are the features, and the model is a small MLP with early stopping, as Ludwig's minimal config gives one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/data/csv.h"
#include "models/data/dataset.h"
#include "models/io/atomic_file.h"
#include "models/record/train_config.h"

namespace tctl::app {

namespace {

namespace fs = std::filesystem;

struct InitFlags {
  std::string csv, label, task, output;
  bool overwrite = false;
};

// Labels read as classes when --task leaves it open: any label that is no number, or whole numbers of at
// most this many distinct values (a regression target takes many).
constexpr std::size_t kMaxGuessedClasses = 20;

// Whether the label column holds classes: --task says, or names, or whole numbers of few distinct values.
bool labels_are_classes(const CsvTable& table, int label, const std::string& task) {
  if (!task.empty()) return task == "classification";
  std::set<std::string> distinct;
  bool numbers = true, whole = true;
  for (std::int64_t r = 0; r < table.rows; ++r) {
    distinct.insert(table.text_at(r, label));
    const float v = table.at(r, label);
    numbers = numbers && !std::isnan(v);
    whole = whole && !std::isnan(v) && v == std::floor(v);
  }
  return !numbers || (whole && distinct.size() <= kMaxGuessedClasses);
}

// The spec: Dense(64, relu), Dropout(0.1), Dense(32, relu), then the head.
// Ordered, as a person would write them: the keys in the order given, not sorted.
nlohmann::ordered_json starter_spec(const std::string& name, std::size_t features, bool classes, std::size_t count) {
  using J = nlohmann::ordered_json;
  J head =
      classes ? J{{"type", "Dense"}, {"units", count}, {"activation", "softmax"}} : J{{"type", "Dense"}, {"units", 1}};
  return {{"name", name},
          {"input_shape", {features}},
          {"layers",
           {{{"type", "Dense"}, {"units", 64}, {"activation", "relu"}},
            {{"type", "Dropout"}, {"rate", 0.1}},
            {{"type", "Dense"}, {"units", 32}, {"activation", "relu"}},
            head}}};
}

int run_init(const InitFlags& f) {
  CsvTable table = read_csv(f.csv, CsvOptions{.text_columns = {f.label}});
  const int label = table.column_index(f.label);
  if (label < 0)
    throw SpecError("", "--label",
                    fmt::format("no column \"{}\" in {} (columns: {})", f.label, f.csv, join(table.columns)));
  if (table.columns.size() < 2) throw SpecError(f.csv, "", "only the label column: no features are left");
  if (table.rows < 10) throw SpecError(f.csv, "", fmt::format("{} rows: too few to split and train on", table.rows));
  const bool classes = labels_are_classes(table, label, f.task);
  // The labels read as train will read them, so a config train would refuse (a class id of -1 or 2.5, an
  // empty label, a regression target that is no number) is refused here, at its line, before any file; the
  // classes are then the outputs train will need: one per name, or per id up to the largest.
  const Dataset data = load_csv_dataset(f.csv, f.label, classes, f.csv, "--label");
  const auto outputs = static_cast<std::size_t>(data.num_classes);
  const fs::path config = f.output.empty() ? fs::path(fs::path(f.csv).stem().string() + ".json") : fs::path(f.output);
  const fs::path spec = config.parent_path() / (config.stem().string() + ".model.json");
  for (const fs::path& p : {config, spec}) {
    std::error_code ec;
    if (fs::exists(p, ec) && !f.overwrite)
      throw SpecError(p.string(), "", "exists already: give another -o, or --overwrite to replace it");
  }
  const std::string stem = config.stem().string();
  const std::size_t features = table.columns.size() - 1;
  // The CSV as the config's folder sees it.
  std::error_code ec;
  const fs::path base = config.parent_path().empty() ? fs::path(".") : config.parent_path();
  const std::string csv =
      fs::absolute(f.csv, ec).lexically_normal().lexically_relative(fs::absolute(base, ec).lexically_normal()).string();
  const nlohmann::ordered_json c{
      {"model", spec.filename().string()},
      {"data",
       {{"csv", ec || csv.empty() ? fs::absolute(f.csv).string() : csv},
        {"label", f.label},
        {"test_split", 0.2},
        {"validation_split", 0.1}}},
      {"loss", classes ? "sparse_categorical_crossentropy" : "mse"},
      {"optimizer", {{"type", "adam"}, {"learning_rate", 0.001}}},
      {"metrics", {classes ? "accuracy" : "mae"}},
      {"epochs", 100},
      {"batch_size", 32},
      {"seed", 1},
      {"callbacks", {{{"type", "EarlyStopping"}, {"patience", 10}, {"restore_best_weights", true}}}}};
  if (!config.parent_path().empty()) fs::create_directories(config.parent_path(), ec);
  write_file_atomic(spec, starter_spec(stem, features, classes, outputs).dump(2) + "\n");
  write_file_atomic(config, c.dump(2) + "\n");
  std::printf("%s\n", fmt::format("{}: {} rows, {} features, label \"{}\": {}", f.csv, table.rows, features, f.label,
                                  classes ? fmt::format("{} classes (classification)", outputs)
                                          : std::string("numbers (regression)"))
                          .c_str());
  std::printf("Wrote %s and %s; train with: tensorctl train %s\n", config.string().c_str(), spec.string().c_str(),
              config.string().c_str());
  return 0;
}

void define_flags(CLI::App& cmd, InitFlags& flags) {
  cmd.add_option("csv", flags.csv, "The data: a CSV file of numbers with a header row")
      ->required()
      ->check(non_empty("a CSV file"));
  cmd.add_option("--label", flags.label, "The column to predict")->required()->check(non_empty("a column name"));
  cmd.add_option("--task", flags.task,
                 "classification or regression (left out: classes when the labels are names, or whole numbers of at "
                 "most 20 values)")
      ->check(CLI::IsMember({"classification", "regression"}));
  cmd.add_option("-o,--output", flags.output,
                 "The config to write (default: <csv name>.json here); the model spec "
                 "goes beside it as <name>.model.json");
  cmd.add_flag("--overwrite", flags.overwrite, "Replace the config and spec when they exist");
}

}  // namespace

Command add_init_command(CLI::App& app) {
  return add_command<InitFlags>(app, "init", "Write a train config and model spec that train on a CSV at once",
                                define_flags, run_init);
}

}  // namespace tctl::app
