// Terminal output: Keras-style progress lines, tables, number formatting.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "models/train/model.h"
#include "models/train/trainer.h"

namespace tctl::app {

// "1,234,567"
std::string thousands(std::int64_t n);
// "10.14 MB" in 1024 steps, as Keras prints parameter memory.
std::string human_bytes(double bytes);
// " - accuracy: 0.9722 - loss: 0.0912", names sorted as Keras 3 prints them; `prefix` goes before each name.
std::string metrics_text(const MetricValues& values, const std::string& prefix = "");
// "3ms/step", "412us/step", "1s/step".
std::string per_step(double seconds_per_step);

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
  std::int64_t current_epoch_ = 1;
  bool header_printed_ = false;
  double epoch_start_ = 0.0;
};

// A box-drawn table like Keras 3's summary; `right_aligned` marks columns to right-align.
std::string box_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                      const std::vector<bool>& right_aligned);

}  // namespace tctl::app
