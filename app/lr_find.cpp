// tensorctl lr-find CONFIG: the learning-rate range test (models/train/lr_finder.h) on a config's model and
// training rows, its suggestion printed with the train command that uses it, and the curve written as CSV,
// JSON and SVG into a folder of its own. The config's run directory is not touched.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/svg.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "models/io/atomic_file.h"
#include "models/io/run_layout.h"
#include "models/record/config_override.h"
#include "models/record/prepared_data.h"
#include "models/train/lr_finder.h"
#include "models/train/model_builder.h"

namespace tctl::app {

namespace {

namespace fs = std::filesystem;

struct LrFindFlags {
  std::string config;
  std::vector<std::string> set;
  double start = 1e-7, end = 10.0;
  std::int64_t steps = 100;
  std::string output;
};

constexpr double kWidth = 720, kHeight = 420, kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;

// The smoothed loss against the rate on a logarithmic axis, each step's loss faint behind it, the
// suggestion marked.
std::string curve_svg(const LrFindResult& r, const std::string& title) {
  // From the lowest loss to the highest smoothed one before the lowest: the diverging tail leaves the top.
  double lo = 1e300, hi = -1e300;
  for (std::size_t i = 0; i < r.points.size(); ++i) {
    lo = std::min({lo, r.points[i].smoothed, r.points[i].loss});
    if (static_cast<std::int64_t>(i) <= r.lowest) hi = std::max(hi, r.points[i].smoothed);
  }
  if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += pad;
  const double lr0 = std::log10(r.points.front().learning_rate), lr1 = std::log10(r.points.back().learning_rate);
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kTop, y1 = kHeight - kBottom;
  auto px = [&](double rate) { return x0 + (std::log10(rate) - lr0) / std::max(lr1 - lr0, 1e-12) * (x1 - x0); };
  auto py = [&](double v) { return y1 - (std::clamp(v, lo, hi) - lo) / (hi - lo) * (y1 - y0); };
  std::string svg = svg_open(kWidth, kHeight);
  svg += fmt::format(R"(<text x="{}" y="24" font-size="14" font-weight="bold">{}</text>)"
                     "\n"
                     R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)"
                     "\n",
                     x0, svg_escaped(title), x0, y0, x1 - x0, y1 - y0);
  svg += value_ticks(lo, hi, x0, x1, py);
  for (double e = std::ceil(lr0); e <= lr1; e += 1)
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">1e{}</text>)"
                       "\n",
                       px(std::pow(10.0, e)), y1 + 16, e);
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">learning rate</text>)"
                     "\n",
                     (x0 + x1) / 2, y1 + 36);
  std::string raw, smoothed;
  for (const LrFindPoint& p : r.points) {
    raw += fmt::format("{:.1f},{:.1f} ", px(p.learning_rate), py(p.loss));
    smoothed += fmt::format("{:.1f},{:.1f} ", px(p.learning_rate), py(p.smoothed));
  }
  svg += fmt::format(R"(<polyline class="curve" data-series="loss" fill="none" stroke="#bbb" points="{}"/>)"
                     "\n"
                     R"(<polyline class="curve" data-series="smoothed" fill="none" stroke="#1f77b4" )"
                     R"(stroke-width="2" points="{}"/>)"
                     "\n",
                     raw, smoothed);
  if (r.suggested >= 0) {
    const LrFindPoint& s = r.points[static_cast<std::size_t>(r.suggested)];
    svg += fmt::format(R"(<line class="suggestion" x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="#d62728" )"
                       R"(stroke-dasharray="4,3"/><circle cx="{0:.1f}" cy="{3:.1f}" r="4" fill="#d62728"/>)"
                       R"(<text x="{4:.1f}" y="{5}" font-size="12" fill="#d62728">suggested {6:.2g}</text>)"
                       "\n",
                       px(s.learning_rate), y0, y1, py(s.smoothed), px(s.learning_rate) + 6, y0 + 16, s.learning_rate);
  }
  return svg + "</svg>\n";
}

void write_results(const fs::path& dir, const LrFindResult& r, const std::string& title) {
  std::string csv = "learning_rate,loss,smoothed_loss\n";
  for (const LrFindPoint& p : r.points)
    csv += fmt::format("{:.9g},{:.9g},{:.9g}\n", p.learning_rate, p.loss, p.smoothed);
  auto rate_of = [&](std::int64_t i) -> nlohmann::json {
    return i < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.points[static_cast<std::size_t>(i)].learning_rate);
  };
  const nlohmann::json summary{{"suggested_learning_rate", rate_of(r.suggested)},
                               {"lowest_loss_learning_rate", rate_of(r.lowest)},
                               {"steps", r.points.size()},
                               {"diverged", r.diverged}};
  fs::create_directories(dir);
  write_file_atomic(dir / "lr_find.csv", csv);
  write_file_atomic(dir / "lr_find.json", summary.dump(2) + "\n");
  write_file_atomic(dir / "lr_find.svg", curve_svg(r, title));
}

// The learning rates a range test may span: float32 holds their ratio, 1e18, with room to spare.
constexpr double kLowestRate = 1e-12, kHighestRate = 1e6;

// The folder the results go to, refused before any training: a file in its place, or a run directory (whose
// files tensorctl manages and locks: the results would be files --overwrite refuses to delete).
void check_results_folder(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw SpecError("", "-o", dir.string() + " is a file; give a folder for lr_find.svg, .csv and .json");
  if (RunLayout(dir).holds_run(RunEvidence::kAnyMarker))
    throw SpecError("", "-o", dir.string() + " is a run directory; give the range test a folder of its own");
}

int run_lr_find(const LrFindFlags& f) {
  if (!(f.start > 0.0 && f.end > f.start))
    throw SpecError("", "--start-lr",
                    fmt::format("expected 0 < --start-lr < --end-lr, got {:g} and {:g}", f.start, f.end));
  // The rates and their ratio, the factor each step scales the rate by, must stay float32 numbers.
  for (const auto& [flag, rate] : {std::pair{"--start-lr", f.start}, std::pair{"--end-lr", f.end}})
    if (!(rate >= kLowestRate && rate <= kHighestRate))
      throw SpecError(
          "", flag, fmt::format("expected a learning rate in [{:g}, {:g}], got {:g}", kLowestRate, kHighestRate, rate));
  const fs::path dir =
      f.output.empty() ? fs::path("runs") / (fs::path(f.config).stem().string() + "-lr-find") : fs::path(f.output);
  check_results_folder(dir);
  std::vector<ConfigOverride> overrides;
  for (const std::string& s : f.set) overrides.push_back(parse_override(s));
  TrainConfig c = load_train_config(f.config, overrides);
  // A constant rate of --start-lr, which each step scales; the rows held in memory to be drawn from.
  c.optimizer.learning_rate = f.start;
  c.optimizer.schedule = ScheduleConfig{};
  c.data.stream = DataConfig::Stream::kOff;
  std::unique_ptr<Model> model = build_model(c);
  const PreparedData data = prepare_data(c, model->net());
  const LrFindOptions options{.start = f.start, .end = f.end, .steps = f.steps};
  const LrFindResult r = find_learning_rate(*model, data.train, c.batch_size, options);
  std::printf("%s\n", fmt::format("Learning-rate range test of {}: {} steps of batch {} from {:.2g} to {:.2g}{}",
                                  f.config, r.points.size(), c.batch_size, f.start,
                                  r.points.empty() ? f.start : r.points.back().learning_rate,
                                  r.diverged ? ", stopped where the loss diverged" : "")
                          .c_str());
  if (r.suggested < 0) {
    std::printf("No suggestion: the smoothed loss never fell (widen --start-lr and --end-lr, or take more --steps)\n");
  } else {
    const LrFindPoint& s = r.points[static_cast<std::size_t>(r.suggested)];
    const LrFindPoint& low = r.points[static_cast<std::size_t>(r.lowest)];
    std::printf("%s\n", fmt::format("Suggested learning rate: {:.2g} (the steepest fall of the smoothed loss, {:.4f})",
                                    s.learning_rate, s.smoothed)
                            .c_str());
    std::printf("%s\n", fmt::format("Lowest smoothed loss: {:.4f} at {:.2g}", low.smoothed, low.learning_rate).c_str());
    std::printf("%s\n", fmt::format("Try: tensorctl train {} --set optimizer.learning_rate={:.2g}",
                                    shell_word(f.config), s.learning_rate)
                            .c_str());
  }
  write_results(dir, r, "learning-rate range test of " + f.config);
  std::printf("%s\n", fmt::format("Curve in {} (lr_find.svg, lr_find.csv, lr_find.json)", dir.string()).c_str());
  return 0;
}

void define_flags(CLI::App& cmd, LrFindFlags& flags) {
  cmd.add_option("config", flags.config, "Train config (JSON)")->required();
  cmd.add_option("--set", flags.set, "KEY=VALUE: override a config or model spec key (repeatable), as train's")
      ->allow_extra_args(false);
  cmd.add_option("--start-lr", flags.start, "The first step's learning rate (1e-7)");
  cmd.add_option("--end-lr", flags.end, "The last step's learning rate (10)");
  cmd.add_option("--steps", flags.steps, "Steps, the rate raised exponentially between them (100)")
      ->check(integer_in(5, 100000));
  cmd.add_option("-o,--output", flags.output, "Folder for lr_find.svg, .csv and .json (runs/<config stem>-lr-find)")
      ->check(output_path());
}

}  // namespace

Command add_lr_find_command(CLI::App& app) {
  return add_command<LrFindFlags>(app, "lr-find",
                                  "Find a learning rate: the range test's loss curve and a suggested rate",
                                  define_flags, run_lr_find);
}

}  // namespace tctl::app
