// A run directory's history.csv (RunLayout::history): the header row, then one row per finished epoch, the
// epoch's number, its training then validation metrics (val_ prefixed) and its seconds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "models/train/trainer.h"

namespace tctl {

// `v` as history.csv writes a number: six significant digits, %g style (test.csv holds its data exactly:
// append_csv_float, models/data/csv.h).
std::string csv_number(double v);
// csv_number appended to `out`, without a string of its own.
void append_csv_number(std::string& out, double v);

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
  void resume(std::int64_t next_epoch, const std::vector<EpochResult>& recorded);

  // The row of an epoch that ended.
  void add(const EpochResult& r);

  // Writes the rows added since the last flush; with `sync`, to the disk (before a checkpoint counts them).
  // The first rows of a run create the file whole.
  void flush(bool sync = true);

 private:
  static constexpr std::size_t kBufferBytes = 64 * 1024;
  std::filesystem::path path_;
  bool created_ = false;  // the file holds its header
  std::string buffer_;    // rows not yet written
};

}  // namespace tctl
