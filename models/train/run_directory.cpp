#include "models/train/run_directory.h"

#include <algorithm>

#include "core/errors.h"
#include "models/io/atomic_file.h"
#include "models/io/run_layout.h"
#include "models/io/spec_reader.h"
#include "models/train/training_checkpoint.h"

namespace tctl {

namespace {

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
    // A data cache (models/data/row_cache.h) is kept: the data's, not the run's, and reused by the next run.
    if (name != RunLayout::kLockFile && !stale && !RunLayout::is_data_cache(name)) entries.push_back(e.path());
  }
  if (ec) throw RuntimeError("cannot read run directory " + d + ": " + ec.message());
  if (entries.empty()) {
    if (!check_only) remove_stale_temporaries(dir, names);
    return;
  }
  const bool run = RunLayout(dir).holds_run(RunEvidence::kAnyMarker);
  // The message suggests only what can work: --resume needs a checkpoint, which a run that failed in its
  // first epoch never wrote (it leaves model.json alone), and --overwrite needs a run.
  if (!overwrite && std::filesystem::exists(RunLayout(dir).checkpoint(), ec))
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
    const bool ours =
        std::filesystem::is_directory(status) ? RunLayout::is_log_dir(e) : std::filesystem::is_regular_file(status);
    if (!ours || !RunLayout::is_run_file(e.filename().string(), names))
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

}  // namespace

// The directory's write lock, for a new run (made ready by clear_run_directory once locked) or a resumed one
// (whose checkpoint is read only once locked; a refused resume leaves no lock file it created).
RunLock own_run_directory(const TrainConfig& c, bool resuming, bool overwrite) {
  const std::filesystem::path dir = c.output;
  if (resuming) {
    std::error_code ec;
    // A missing directory or a file is refused by resume_from_checkpoint, with its reason.
    if (!std::filesystem::is_directory(dir, ec)) return RunLock();
    return RunLock::acquire(dir, RunLock::Mode::kWrite);
  }
  try {
    clear_run_directory(dir, c, overwrite, true);
  } catch (const SpecError&) {
    // What another writer is doing to the directory right now (its temporaries, files it has not written
    // yet) is no reason to give: name the writer.
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) (void)RunLock::acquire(dir, RunLock::Mode::kRead);
    throw;
  }
  create_run_directory(dir);
  RunLock lock = RunLock::acquire(dir, RunLock::Mode::kWrite);
  clear_run_directory(dir, c, overwrite, false);
  return lock;
}

}  // namespace tctl
