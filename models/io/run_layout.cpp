#include "models/io/run_layout.h"

#include <algorithm>

namespace tctl {

const std::vector<std::string>& RunLayout::file_names() {
  static const std::vector<std::string> names{kModelFile,    kWeightsFile,    kHistoryFile, kSummaryFile,
                                              kTestRowsFile, kCheckpointFile, kLockFile};
  return names;
}

bool RunLayout::holds_run(RunEvidence evidence) const {
  std::error_code ec;
  auto has = [&](const char* name) { return std::filesystem::exists(dir_ / name, ec); };
  if (evidence == RunEvidence::kAnyMarker) return has(kModelFile) || has(kSummaryFile) || has(kCheckpointFile);
  return has(kModelFile) && (has(kWeightsFile) || has(kSummaryFile) || has(kCheckpointFile));
}

void RunLayout::add_callback_files(const nlohmann::json& config, std::vector<std::string>& names) {
  if (!config.is_object() || !config.contains("callbacks") || !config.at("callbacks").is_array()) return;
  for (const auto& cb : config.at("callbacks"))
    for (const char* key : {"filename", "log_dir"})
      if (cb.is_object() && cb.contains(key) && cb.at(key).is_string()) names.push_back(cb.at(key));
}

bool RunLayout::is_run_file(const std::string& entry, const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return entry == n || entry.starts_with(n + ".tmp."); });
}

bool RunLayout::is_data_cache(const std::string& entry) {
  return entry.ends_with(".rows") || entry.find(".rows.tmp.") != std::string::npos;
}

bool RunLayout::is_log_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& part : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = part.path().filename().string();
    if ((name != "train" && name != "validation") || !part.is_directory(ec) || part.is_symlink(ec)) return false;
    for (const auto& f : std::filesystem::directory_iterator(part.path(), ec))
      if (!f.is_regular_file(ec) || f.is_symlink(ec) || !f.path().filename().string().starts_with(kEventFilePrefix))
        return false;
  }
  return !ec;
}

}  // namespace tctl
