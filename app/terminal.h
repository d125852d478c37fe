// Terminal output: Keras-style progress lines, tables, number formatting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "models/train/model.h"
#include "models/train/trainer.h"

namespace tctl::app {

// "1,234,567"
std::string thousands(std::int64_t n);
// `word` as /bin/sh reads it back: as is when it holds only characters the shell leaves alone, else
// single-quoted (the commands tensorctl prints for the user to run: train's resume line, sweep's best trial).
std::string shell_word(const std::string& word);
// "10.14 MB" in 1024 steps, as Keras prints parameter memory.
std::string human_bytes(double bytes);
// " - accuracy: 0.9722 - loss: 0.0912", names sorted as Keras 3 prints them; `prefix` goes before each name.
std::string metrics_text(const MetricValues& values, const std::string& prefix = "");
// "3ms/step", "412us/step", "1s/step".
std::string per_step(double seconds_per_step);
// The nodes that run on the CPU instead of the device they asked for, to stderr: the first three lines
// (Model::placement_warnings), then how many more, with `more` in brackets after the count when given.
void print_placement_warnings(const std::vector<std::string>& warnings, const std::string& more = "");

// Whether `fd` is a terminal that redraws a line (carriage returns, erase to the end of the line): a terminal
// whose TERM is not "dumb" (Emacs' shell buffers, some CI logs set it to get plain lines).
bool live_terminal(int fd);
// Whether colour escapes may be written: NO_COLOR unset or empty (https://no-color.org).
bool colour_allowed();

// Prints fit progress the way Keras 3 does: "Epoch e/E", then a line per epoch; on a terminal the line
// redraws itself after every step with a 20-character bar.
class ProgressPrinter {
 public:
  ProgressPrinter(std::FILE* out, std::int64_t epochs);
  void on_step(std::int64_t step, std::int64_t steps, const MetricValues& running);
  void on_epoch(const EpochResult& r);
  // A resumed run starts counting at its checkpoint's epoch.
  void start_at(std::int64_t epoch) { current_epoch_ = epoch; }

 private:
  std::FILE* out_;
  std::int64_t epochs_;
  bool live_;
  const char* green_;  // the bar's colour escapes, empty under NO_COLOR
  const char* plain_;
  std::int64_t current_epoch_ = 1;
  bool header_printed_ = false;
  double epoch_start_ = 0.0;
};

// A box-drawn table like Keras 3's summary; `right_aligned` marks columns to right-align.
std::string box_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                      const std::vector<bool>& right_aligned);

// How many columns the tables printed on stdout may take: $COLUMNS when it holds a positive number (as
// Python's shutil.get_terminal_size reads it), else the terminal's width when stdout is one, else 0: no
// limit, so piped output keeps every column.
std::size_t output_width();

struct TableColumn {
  std::string header;
  bool right_aligned = false;
  // When the table is too wide, columns with the highest rank are left out first; 0: never left out.
  int drop_rank = 0;
  // Narrows the column when the table is too wide: its header and cells end before the first occurrence of
  // this text ("0.123 [0.100-0.150]" with " [" becomes "0.123"). Empty: not narrowed.
  std::string narrow_at;
  // A left-aligned text column may be cut (with "…") down to this width before any column is left out; 0:
  // only as a last resort.
  std::size_t cut_to = 0;
};

struct FittedTable {
  std::string text;
  std::vector<std::string> left_out;  // headers of the columns left out, in table order
};

// A box table, as box_table, within `max_width` columns (0: no limit). When the full table is wider, it
// tries, in turn until it fits: less padding, the narrowed form of the columns that have one, cutting the
// columns that allow it, leaving columns out by drop rank, and last cutting the widest left-aligned
// column's cells (with "…").
FittedTable fit_table(const std::vector<TableColumn>& columns, const std::vector<std::vector<std::string>>& rows,
                      std::size_t max_width);
// fit_table within output_width(), followed by a line naming the columns left out, if any, and saying that
// `--json` has them.
std::string table_for_output(const std::vector<TableColumn>& columns,
                             const std::vector<std::vector<std::string>>& rows);

// One line on stderr showing how far a long command has come, redrawn in place, when stderr is a terminal;
// nothing otherwise, so logs and pipes see only the results. Cleared by clear() and when destroyed.
class StatusLine {
 public:
  StatusLine();
  ~StatusLine();
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;
  // "[step/steps] text, Ns elapsed", cut to the terminal's width.
  void show(std::size_t step, std::size_t steps, const std::string& text);
  void clear();

 private:
  bool live_;
  bool shown_ = false;
  double start_;
};

}  // namespace tctl::app
