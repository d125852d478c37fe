#include "app/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "core/text.h"
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

std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("_-./:=+,@%", ch) != nullptr;
  });
  if (plain) return word;
  std::string out = "'";
  for (char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

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

void print_placement_warnings(const std::vector<std::string>& warnings, const std::string& more) {
  constexpr std::size_t kShown = 3;
  for (std::size_t i = 0; i < warnings.size() && i < kShown; ++i)
    std::fprintf(stderr, "warning: %s\n", warnings[i].c_str());
  if (warnings.size() > kShown)
    std::fprintf(stderr, "warning: ... and %zu more nodes run on cpu instead%s\n", warnings.size() - kShown,
                 more.empty() ? "" : (" (" + more + ")").c_str());
}

bool live_terminal(int fd) {
  if (isatty(fd) == 0) return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::string_view(term) != "dumb";
}

bool colour_allowed() {
  const char* no_colour = std::getenv("NO_COLOR");
  return no_colour == nullptr || *no_colour == '\0';
}

ProgressPrinter::ProgressPrinter(std::FILE* out, std::int64_t epochs)
    : out_(out),
      epochs_(epochs),
      live_(live_terminal(fileno(out))),
      green_(colour_allowed() ? "\033[32m" : ""),
      plain_(colour_allowed() ? "\033[0m" : "") {}

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
  std::fprintf(out_, "\r%*lld/%lld %s%s%s%s %.0fs %s%s\033[K", width, static_cast<long long>(step),
               static_cast<long long>(steps), green_, repeat("━", static_cast<std::size_t>(done)).c_str(), plain_,
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
    std::fprintf(out_, "\r%lld/%lld %s%s%s %.0fs %s%s\033[K\n", static_cast<long long>(r.steps),
                 static_cast<long long>(r.steps), green_, repeat("━", 20).c_str(), plain_, r.seconds,
                 per_step(step_time).c_str(), text.c_str());
  } else {
    std::fprintf(out_, "%lld/%lld - %.0fs - %s%s\n", static_cast<long long>(r.steps), static_cast<long long>(r.steps),
                 r.seconds, per_step(step_time).c_str(), text.c_str());
  }
  std::fflush(out_);
  current_epoch_ = r.epoch + 1;
  header_printed_ = false;
}

namespace {

// The cell widths of a table, padding not included.
std::vector<std::size_t> content_widths(const std::vector<std::string>& header,
                                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    w[c] = display_width(header[c]);
    for (const auto& r : rows) w[c] = std::max(w[c], display_width(r[c]));
  }
  return w;
}

// Each cell is its content plus `pad` spaces, with one more space on each side and a bar after.
std::size_t table_width(const std::vector<std::size_t>& content, std::size_t pad) {
  std::size_t total = 1;
  for (std::size_t w : content) total += w + pad + 3;
  return total;
}

std::string render_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& right_aligned, std::size_t pad) {
  std::vector<std::size_t> w = content_widths(header, rows);
  for (auto& x : w) x += pad;
  auto rule = [&](const char* l, const char* m, const char* r, const char* h) {
    std::string s = l;
    for (std::size_t c = 0; c < w.size(); ++c) s += repeat(h, w[c] + 2) + (c + 1 < w.size() ? m : r);
    return s + "\n";
  };
  auto line = [&](const std::vector<std::string>& cells, const char* bar) {
    std::string s = bar;
    for (std::size_t c = 0; c < w.size(); ++c) {
      std::string fill(w[c] - display_width(cells[c]), ' ');
      s += " " + (right_aligned[c] ? fill + cells[c] : cells[c] + fill) + " " + bar;
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

// The first `n` code points of UTF-8 text.
std::string first_code_points(const std::string& s, std::size_t n) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (seen++ == n) return s.substr(0, i);
  }
  return s;
}

// Text cut to `width` code points, its last one "…" when anything was cut.
std::string cut_to(const std::string& s, std::size_t width) {
  if (display_width(s) <= width) return s;
  return width == 0 ? "" : first_code_points(s, width - 1) + "…";
}

std::size_t terminal_columns(int fd) {
  winsize ws{};
  if (isatty(fd) == 0 || ioctl(fd, TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

}  // namespace

std::string box_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                      const std::vector<bool>& right_aligned) {
  return render_table(header, rows, right_aligned, 2);
}

std::size_t output_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    std::size_t n = 0;
    const char* end = columns + std::strlen(columns);
    auto [ptr, ec] = std::from_chars(columns, end, n);
    if (ec == std::errc() && ptr == end && n > 0) return n;
  }
  return terminal_columns(STDOUT_FILENO);
}

FittedTable fit_table(const std::vector<TableColumn>& columns, const std::vector<std::vector<std::string>>& rows,
                      std::size_t max_width) {
  std::vector<std::string> header;
  std::vector<bool> right;
  for (const auto& c : columns) {
    header.push_back(c.header);
    right.push_back(c.right_aligned);
  }
  std::vector<std::vector<std::string>> cells = rows;
  auto width = [&](std::size_t pad) { return table_width(content_widths(header, cells), pad); };
  if (max_width == 0 || width(2) <= max_width) return {render_table(header, cells, right, 2), {}};
  if (width(0) <= max_width) return {render_table(header, cells, right, 0), {}};

  // Narrowed columns.
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const std::string& at = columns[c].narrow_at;
    if (at.empty()) continue;
    auto narrow = [&](std::string& s) { s = s.substr(0, s.find(at)); };
    narrow(header[c]);
    for (auto& r : cells) narrow(r[c]);
  }
  // Text cut where a column allows it.
  for (std::size_t c = 0; c < columns.size() && width(0) > max_width; ++c) {
    if (columns[c].cut_to == 0) continue;
    const std::size_t w = content_widths(header, cells)[c];
    const std::size_t over = width(0) - max_width;
    const std::size_t target = std::max(columns[c].cut_to, w > over ? w - over : 0);
    for (auto& r : cells) r[c] = cut_to(r[c], target);
  }
  // Columns left out, the highest rank first (the rightmost of equal ranks).
  std::vector<std::size_t> kept(columns.size());
  for (std::size_t c = 0; c < kept.size(); ++c) kept[c] = c;
  auto drop = [&](std::size_t k) {
    header.erase(header.begin() + static_cast<std::ptrdiff_t>(k));
    right.erase(right.begin() + static_cast<std::ptrdiff_t>(k));
    for (auto& r : cells) r.erase(r.begin() + static_cast<std::ptrdiff_t>(k));
    kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(k));
  };
  while (width(0) > max_width) {
    std::size_t victim = kept.size();
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const int rank = columns[kept[k]].drop_rank;
      if (rank > 0 && (victim == kept.size() || rank >= columns[kept[victim]].drop_rank)) victim = k;
    }
    if (victim == kept.size()) break;
    drop(victim);
  }
  // The widest left-aligned column, cut (to no fewer than 8 characters).
  if (width(0) > max_width) {
    const std::vector<std::size_t> w = content_widths(header, cells);
    std::size_t widest = w.size();
    for (std::size_t k = 0; k < w.size(); ++k)
      if (!right[k] && (widest == w.size() || w[k] > w[widest])) widest = k;
    if (widest < w.size()) {
      const std::size_t over = width(0) - max_width;
      const std::size_t target = std::max<std::size_t>(8, w[widest] > over ? w[widest] - over : 0);
      header[widest] = cut_to(header[widest], target);
      for (auto& r : cells) r[widest] = cut_to(r[widest], target);
    }
  }
  FittedTable out{render_table(header, cells, right, 0), {}};
  for (std::size_t c = 0; c < columns.size(); ++c)
    if (std::find(kept.begin(), kept.end(), c) == kept.end()) out.left_out.push_back(columns[c].header);
  return out;
}

std::string table_for_output(const std::vector<TableColumn>& columns,
                             const std::vector<std::vector<std::string>>& rows) {
  const std::size_t width = output_width();
  FittedTable t = fit_table(columns, rows, width);
  if (t.left_out.empty()) return t.text;
  std::vector<std::string> quoted;
  for (const auto& h : t.left_out) quoted.push_back("\"" + h + "\"");
  return t.text + fmt::format("({} left out to fit {} columns; --json has every figure)\n", join(quoted), width);
}

StatusLine::StatusLine() : live_(live_terminal(STDERR_FILENO)), start_(now_seconds()) {}

StatusLine::~StatusLine() { clear(); }

void StatusLine::show(std::size_t step, std::size_t steps, const std::string& text) {
  if (!live_) return;
  std::string line = fmt::format("[{}/{}] {}, {:.0f}s elapsed", step, steps, text, now_seconds() - start_);
  const std::size_t columns = terminal_columns(STDERR_FILENO);
  // One column short of the width: a line that fills it wraps on some terminals.
  if (columns > 1) line = cut_to(line, columns - 1);
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void StatusLine::clear() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace tctl::app
