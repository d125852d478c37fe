// tensorctl graph SPEC|CONFIG|RUN_DIR [--training] [--format dot|json|svg] [-o FILE]: the traced dataflow
// graph, as Graphviz DOT (models/io/graph_export.h), as JSON, or rendered to SVG by Graphviz's dot.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "core/errors.h"
#include "core/placement.h"
#include "models/io/atomic_file.h"
#include "models/io/graph_export.h"
#include "models/record/train_config.h"
#include "models/run/output_check.h"
#include "models/train/model_builder.h"

extern char** environ;

namespace tctl::app {

namespace {
struct GraphFlags {
  std::string path;
  bool training = false;
  std::string format = "dot";
  std::string output = "-";
};

// Runs Graphviz's `dot -Tsvg` on `dot_text` and returns the SVG. Temporary files, not pipes: nothing to
// deadlock on, and dot's own errors stay in a file we can quote.
std::string render_svg(const std::string& dot_text) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "tensorctl-graph." + std::to_string(getpid()) + "." + std::to_string(counter++);
  const auto in = dir / (stem + ".dot"), out = dir / (stem + ".svg"), err = dir / (stem + ".err");
  struct Cleanup {
    std::vector<std::filesystem::path> files;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& f : files) std::filesystem::remove(f, ec);
    }
  } cleanup{{in, out, err}};
  write_file_atomic(in, dot_text);
  const std::string in_s = in.string(), out_s = "-o" + out.string();
  std::vector<char*> argv{const_cast<char*>("dot"), const_cast<char*>("-Tsvg"), const_cast<char*>(out_s.c_str()),
                          const_cast<char*>(in_s.c_str()), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "dot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw RuntimeError(std::string("--format svg runs Graphviz's dot, which could not be started: ") +
                       std::strerror(spawned) + " (Debian: apt install graphviz; --format dot writes its input)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = read_file(err, err.string());
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    throw RuntimeError("Graphviz's dot failed to render the graph: " + why);
  }
  return read_file(out, out.string());
}

int run_graph(const GraphFlags& f) {
  if (f.format != "dot" && f.format != "json" && f.format != "svg")
    throw SpecError("", "--format", "unknown format \"" + f.format + "\" (known: dot, json, svg)");
  check_output_path(f.output, "-o");
  const std::string file = model_file_of(f.path);
  TrainConfig c = load_model_file(file);
  check_output_keeps_inputs(f.output, "-o", c.input_files());  // `file` among them
  // The graph is traced, never run: one thread of each kind is plenty.
  c.inter_op_threads = 1;
  c.intra_op_threads = 1;
  // A model spec names no loss, and its inference graph needs none: the default (cross-entropy) refused a model
  // ending in a ReLU or a sigmoid. The training graph does need one.
  std::unique_ptr<Model> model = c.spec_only ? build_model_if_loss_fits(c) : build_model(c);
  if (!model) {
    if (f.training)
      throw SpecError(file, "--training",
                      "a model spec names no loss, and the default, " + c.loss +
                          ", does not fit this model's "
                          "output; give a train config with its loss to see the training graph");
    c.loss.clear();
    c.metrics.clear();
    model = build_model(c);
  }
  const Graph& g = f.training ? model->training_graph() : model->inference_graph();
  const Placement placement = place_all(g, {}, PlacementOptions{});
  GraphExportOptions options;
  options.title = model->net().name() + (f.training ? ": training graph" : ": inference graph");
  for (Device* d : placement.devices) options.devices.push_back(d != nullptr ? d->name() : "");
  std::string text;
  if (f.format == "json")
    text = graph_json(g, options).dump(2) + "\n";
  else if (f.format == "dot")
    text = graph_dot(g, options);
  else
    text = render_svg(graph_dot(g, options));
  write_file_atomic(f.output, text);
  if (f.output != "-") {
    const GraphCounts counts = graph_counts(g);
    std::fprintf(stderr, "wrote %s (%s: %lld nodes, %lld data edges, %lld control edges)\n",
                 printable_line(f.output).c_str(), options.title.c_str(), static_cast<long long>(counts.nodes),
                 static_cast<long long>(counts.data_edges), static_cast<long long>(counts.control_edges));
  }
  return 0;
}

void define_flags(CLI::App& cmd, GraphFlags& flags) {
  cmd.add_option("spec", flags.path, "Model spec, train config, run directory, or Keras model JSON")
      ->required()
      ->check(non_empty("a model spec, train config, run directory or Keras model JSON"));
  cmd.add_flag("--training", flags.training, "The training graph (gradients and updates), not the inference one");
  cmd.add_option("--format", flags.format, "dot (Graphviz), json, or svg (rendered by Graphviz's dot)");
  cmd.add_option("-o,--output", flags.output, "Write here instead of stdout");
}

}  // namespace

Command add_graph_command(CLI::App& app) {
  return add_command<GraphFlags>(app, "graph", "Write a model's traced dataflow graph as DOT, JSON or SVG",
                                 define_flags, run_graph);
}

}  // namespace tctl::app
