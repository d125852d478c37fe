#include "models/record/run_files.h"

#include <exception>

#include "models/io/run_layout.h"
#include "models/io/safetensors.h"
#include "models/io/spec_reader.h"
#include "models/record/training_state.h"

namespace tctl {

std::vector<std::string> run_file_names(const std::filesystem::path& dir, const TrainConfig& c) {
  const RunLayout run(dir);
  std::vector<std::string> names = RunLayout::file_names();
  RunLayout::add_callback_files(c.to_json(), names);
  try {
    RunLayout::add_callback_files(parse_json_file(run.summary().string()).value("config", nlohmann::json()), names);
  } catch (const std::exception&) {
  }
  try {
    SafetensorsFile file;
    RunLayout::add_callback_files(read_training_checkpoint(run.checkpoint(), file).config, names);
  } catch (const std::exception&) {
  }
  return names;
}

}  // namespace tctl
