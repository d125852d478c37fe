// tensorctl plot RUN... -o curves.svg: the runs' history.csv as training curves, one panel per figure (the
// loss, then each metric), training solid and validation dashed, a colour per run, written as SVG by our own
// small writer: a picture to look at without TensorBoard.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/svg.h"
#include "core/errors.h"
#include "models/data/csv.h"
#include "models/io/atomic_file.h"

namespace tctl::app {

namespace {

namespace fs = std::filesystem;

struct PlotFlags {
  std::vector<std::string> runs;
  std::string output;
};

// One run's history: its name and each column's values by epoch.
struct History {
  std::string name;
  std::vector<double> epochs;
  std::vector<std::pair<std::string, std::vector<double>>> columns;  // loss, accuracy, val_loss, ...
  const std::vector<double>* column(const std::string& name) const {
    for (const auto& [n, v] : columns)
      if (n == name) return &v;
    return nullptr;
  }
};

// The run directories `path` stands for: itself when it holds a history, else its folders that do (a
// sweep's trials, the folds of train --folds), sorted.
std::vector<fs::path> run_dirs(const fs::path& path) {
  if (fs::exists(path / "history.csv")) return {path};
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (fs::exists(e.path() / "history.csv")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  if (out.empty())
    throw SpecError(path.string(), "", "no history.csv here or in its folders: not a run directory, sweep or folds");
  return out;
}

History read_history(const fs::path& dir) {
  const CsvTable table = read_csv((dir / "history.csv").string());
  History h;
  h.name = dir.string();
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    std::vector<double> values;
    for (std::int64_t r = 0; r < table.rows; ++r) values.push_back(table.at(r, static_cast<int>(c)));
    if (table.columns[c] == "epoch")
      h.epochs = std::move(values);
    else if (table.columns[c] != "seconds" && table.columns[c] != "learning_rate")
      h.columns.emplace_back(table.columns[c], std::move(values));
  }
  if (h.epochs.empty()) throw SpecError((dir / "history.csv").string(), "", "no epoch rows to plot");
  return h;
}

constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
constexpr double kWidth = 720, kPanel = 260, kLeft = 70, kRight = 20, kTop = 30, kBottom = 40;

// One panel at `top`: the figure's training and validation curves of every run.
std::string panel(const std::string& figure, const std::vector<History>& runs, double top) {
  double lo = 1e300, hi = -1e300, last_epoch = 1;
  for (const History& h : runs) {
    last_epoch = std::max(last_epoch, h.epochs.back());
    for (const std::string& name : {figure, "val_" + figure})
      if (const auto* v = h.column(name))
        for (double x : *v)
          if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  }
  if (lo > hi) lo = 0, hi = 1;
  if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += pad;
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = top + kTop, y1 = top + kPanel - kBottom;
  auto px = [&](double epoch) { return x0 + (epoch - 1) / std::max(last_epoch - 1, 1.0) * (x1 - x0); };
  auto py = [&](double v) { return y1 - (v - lo) / (hi - lo) * (y1 - y0); };
  std::string out = fmt::format(R"(<g class="panel" data-figure="{}">)"
                                "\n"
                                R"(<text x="{}" y="{}" font-size="14" font-weight="bold">{}</text>)"
                                "\n"
                                R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)"
                                "\n",
                                figure, x0, top + 20, figure, x0, y0, x1 - x0, y1 - y0);
  out += value_ticks(lo, hi, x0, x1, py);
  // Epoch 1, then the multiples of a round step.
  const double epoch_step = std::max(1.0, tick_step(last_epoch - 1, 8));
  for (double e = 1; e <= last_epoch; e = e == 1 && epoch_step > 1 ? epoch_step : e + epoch_step)
    out += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" text-anchor="middle">{}</text>)"
                       "\n",
                       px(e), y1 + 16, e);
  out += fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="middle">epoch</text>)"
                     "\n",
                     (x0 + x1) / 2, y1 + 32);
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (const bool validation : {false, true})
      if (const auto* v = runs[i].column(validation ? "val_" + figure : figure)) {
        std::string points;
        int count = 0;
        double last_x = 0, last_y = 0;
        for (std::size_t k = 0; k < v->size(); ++k)
          if (std::isfinite((*v)[k])) {
            last_x = px(runs[i].epochs[k]);
            last_y = py((*v)[k]);
            points += fmt::format("{:.1f},{:.1f} ", last_x, last_y);
            ++count;
          }
        const char* colour = kColours[i % std::size(kColours)];
        out += fmt::format(R"(<polyline class="curve" data-run="{}" data-series="{}" fill="none" stroke="{}" )"
                           R"(stroke-width="1.5"{} points="{}"/>)"
                           "\n",
                           runs[i].name, validation ? "validation" : "training", colour,
                           validation ? R"( stroke-dasharray="5,3")" : "", points);
        // A line through one point draws nothing: a run of one epoch gets a dot (hollow for validation).
        if (count == 1)
          out += fmt::format(R"(<circle class="point" cx="{:.1f}" cy="{:.1f}" r="3" stroke="{}" fill="{}"/>)"
                             "\n",
                             last_x, last_y, colour, validation ? "white" : colour);
      }
  return out + "</g>\n";
}

int run_plot(const PlotFlags& f) {
  if (!f.output.ends_with(".svg"))
    throw SpecError("", "-o", fmt::format("{}: the picture is SVG; name a file ending in .svg", f.output));
  std::vector<History> runs;
  for (const std::string& r : f.runs)
    for (const fs::path& dir : run_dirs(r)) runs.push_back(read_history(dir));
  for (History& h : runs) h.name = svg_escaped(h.name);
  std::vector<std::string> figures;  // the loss first, then the metrics, in the histories' order
  for (const History& h : runs)
    for (const auto& [name, values] : h.columns)
      if (!name.starts_with("val_") && std::find(figures.begin(), figures.end(), name) == figures.end())
        figures.push_back(name);
  const double legend = 24.0 * static_cast<double>(runs.size()) + 30;
  const double height = kPanel * static_cast<double>(figures.size()) + legend;
  std::string svg = svg_open(kWidth, height);
  for (std::size_t i = 0; i < figures.size(); ++i)
    svg += panel(svg_escaped(figures[i]), runs, kPanel * static_cast<double>(i));
  double y = kPanel * static_cast<double>(figures.size()) + 10;
  svg += fmt::format(R"(<text x="{}" y="{}" font-size="12">solid: training, dashed: validation</text>)"
                     "\n",
                     kLeft, y);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    y += 24;
    svg += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="3"/>)"
                       R"(<text x="{}" y="{}" font-size="12">{}</text>)"
                       "\n",
                       kLeft, y - 4, kLeft + 30, y - 4, kColours[i % std::size(kColours)], kLeft + 40, y, runs[i].name);
  }
  svg += "</svg>\n";
  write_file_atomic(f.output, svg);
  std::printf("%s\n", fmt::format("Plotted {} run{} ({}) to {}", runs.size(), runs.size() == 1 ? "" : "s",
                                  fmt::join(figures, ", "), f.output)
                          .c_str());
  return 0;
}

void define_flags(CLI::App& cmd, PlotFlags& flags) {
  cmd.add_option("runs", flags.runs, "Run directories, or folders of them (a sweep's, train --folds')")->required();
  cmd.add_option("-o,--output", flags.output, "The picture to write (.svg)")->required();
}

}  // namespace

Command add_plot_command(CLI::App& app) {
  return add_command<PlotFlags>(app, "plot", "Draw runs' training curves (loss and metrics per epoch) as SVG",
                                define_flags, run_plot);
}

}  // namespace tctl::app
