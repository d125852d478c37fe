#include "app/terminal.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "models/nn/memory_budget.h"

namespace tctl::app {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Display width of UTF-8 text: counts code points, which is right for the box and bar characters used here.
std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string repeat(const std::string& s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}
}  // namespace

std::string thousands(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string human_bytes(double bytes) { return byte_size_text(bytes); }

std::string metrics_text(const MetricValues& values, const std::string& prefix) {
  MetricValues sorted = values;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (const auto& [name, v] : sorted) {
    bool tiny = std::abs(v) <= 1e-3 && v != 0.0;
    out += fmt::format(" - {}{}: {}", prefix, name, tiny ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v));
  }
  return out;
}

std::string per_step(double s) {
  if (s >= 1.0) return fmt::format("{:.0f}s/step", s);
  if (s >= 1e-3) return fmt::format("{:.0f}ms/step", s * 1e3);
  return fmt::format("{:.0f}us/step", s * 1e6);
}

ProgressPrinter::ProgressPrinter(std::FILE* out, std::int64_t epochs)
    : out_(out), epochs_(epochs), live_(isatty(fileno(out)) != 0) {}

void ProgressPrinter::on_step(std::int64_t step, std::int64_t steps, const MetricValues& running) {
  if (!header_printed_) {
    std::fprintf(out_, "Epoch %lld/%lld\n", static_cast<long long>(current_epoch_), static_cast<long long>(epochs_));
    header_printed_ = true;
    epoch_start_ = now_seconds();
  }
  if (!live_) return;
  const double elapsed = now_seconds() - epoch_start_;
  const int done = static_cast<int>(20 * step / std::max<std::int64_t>(steps, 1));
  const double eta = elapsed / static_cast<double>(step) * static_cast<double>(steps - step);
  const int width = static_cast<int>(std::to_string(steps).size());
  std::fprintf(out_, "\r%*lld/%lld \033[32m%s\033[0m%s %.0fs %s%s\033[K", width, static_cast<long long>(step),
               static_cast<long long>(steps), repeat("━", static_cast<std::size_t>(done)).c_str(),
               repeat("━", static_cast<std::size_t>(20 - done)).c_str(), step == steps ? elapsed : eta,
               per_step(elapsed / static_cast<double>(step)).c_str(), metrics_text(running).c_str());
  std::fflush(out_);
}

void ProgressPrinter::on_epoch(const EpochResult& r) {
  if (!header_printed_)
    std::fprintf(out_, "Epoch %lld/%lld\n", static_cast<long long>(r.epoch), static_cast<long long>(epochs_));
  std::string text = metrics_text(r.train) + metrics_text(r.validation, "val_");
  const double step_time = r.seconds / static_cast<double>(std::max<std::int64_t>(r.steps, 1));
  if (live_) {
    std::fprintf(out_, "\r%lld/%lld \033[32m%s\033[0m %.0fs %s%s\033[K\n", static_cast<long long>(r.steps),
                 static_cast<long long>(r.steps), repeat("━", 20).c_str(), r.seconds, per_step(step_time).c_str(),
                 text.c_str());
  } else {
    std::fprintf(out_, "%lld/%lld - %.0fs - %s%s\n", static_cast<long long>(r.steps), static_cast<long long>(r.steps),
                 r.seconds, per_step(step_time).c_str(), text.c_str());
  }
  std::fflush(out_);
  current_epoch_ = r.epoch + 1;
  header_printed_ = false;
}

std::string box_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                      const std::vector<bool>& right_aligned) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    w[c] = display_width(header[c]);
    for (const auto& r : rows) w[c] = std::max(w[c], display_width(r[c]));
    w[c] += 2;
  }
  auto rule = [&](const char* l, const char* m, const char* r, const char* h) {
    std::string s = l;
    for (std::size_t c = 0; c < w.size(); ++c) s += repeat(h, w[c] + 2) + (c + 1 < w.size() ? m : r);
    return s + "\n";
  };
  auto line = [&](const std::vector<std::string>& cells, const char* bar) {
    std::string s = bar;
    for (std::size_t c = 0; c < w.size(); ++c) {
      std::string pad(w[c] - display_width(cells[c]), ' ');
      s += " " + (right_aligned[c] ? pad + cells[c] : cells[c] + pad) + " " + bar;
    }
    return s + "\n";
  };
  std::string out = rule("┏", "┳", "┓", "━") + line(header, "┃") + rule("┡", "╇", "┩", "━");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out += line(rows[i], "│");
    out += i + 1 < rows.size() ? rule("├", "┼", "┤", "─") : rule("└", "┴", "┘", "─");
  }
  return out;
}

}  // namespace tctl::app
