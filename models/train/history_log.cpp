#include "models/train/history_log.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <string_view>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/text.h"
#include "models/io/atomic_file.h"

namespace tctl {

namespace {

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

}  // namespace

std::string csv_number(double v) {
  std::string out;
  append_csv_number(out, v);
  return out;
}

void append_csv_number(std::string& out, double v) {
  // A whole number below 10^6 in magnitude is what %.6g prints as its digits ("-0" for minus zero): written
  // here without the formatter, which wrote test.csv's cells at a fraction of its time (bench/csv_load.sh;
  // figures in bench/README.md) until test.csv took exact digits (append_csv_float).
  if (std::abs(v) < 1e6 && v == std::trunc(v)) {
    char digits[16];
    if (std::signbit(v)) out += '-';
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, static_cast<std::int64_t>(std::abs(v)));
    out.append(digits, end);
    return;
  }
  fmt::format_to(std::back_inserter(out), "{:.6g}", v);
}

void HistoryLog::resume(std::int64_t next_epoch, const std::vector<EpochResult>& recorded) {
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

void HistoryLog::add(const EpochResult& r) {
  if (!created_ && buffer_.empty()) buffer_ = history_header(r);
  buffer_ += history_row(r);
  if (buffer_.size() >= kBufferBytes) flush(false);
}

void HistoryLog::flush(bool sync) {
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

}  // namespace tctl
