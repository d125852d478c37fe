// tensorctl graph: the traced graph as DOT that Graphviz parses, with Graphviz's own node and edge counts
// equal to the graph's; JSON with the same counts; SVG rendered by dot; mistakes refused.
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

// Runs a shell command in `dir` and returns its output, failing the test when it exits non-zero.
std::string shell_output(const fs::path& dir, const std::string& command) {
  const CommandResult r = run_shell_command(command, dir);
  CHECK_MESSAGE(r.status == 0, command << "\n" << r.out);
  return r.out;
}

// Graphviz is installed by scripts/setup.sh; a machine without it (the GPU machine) skips what needs it.
bool have_graphviz() { return std::system("command -v dot >/dev/null 2>&1 && command -v gc >/dev/null 2>&1") == 0; }

std::int64_t count_of(const std::string& text, const std::string& needle) {
  std::int64_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("graph") {
  TEST_CASE("graph writes DOT that Graphviz parses, its node and edge counts those of the traced graph") {
    for (const auto& [config, training] :
         std::vector<std::pair<std::string, bool>>{{"configs/digits_mlp.json", false},
                                                   {"configs/digits_mlp.json", true},
                                                   {"configs/digits_cnn.json", true},
                                                   {"configs/bigrams_lstm.json", true}}) {
      CAPTURE(config);
      CAPTURE(training);
      TempDir d;
      const std::string flags = quoted(source_path(config)) + (training ? " --training" : "");
      CommandResult json = run_tensorctl("graph " + flags + " --format json", d.path());
      REQUIRE(json.status == 0);
      const nlohmann::json g = parse_json(json.out);
      const auto& nodes = g.at("nodes");
      std::int64_t data_edges = 0, control_edges = 0;
      std::set<std::string> phases;
      for (const auto& n : nodes) {
        data_edges += static_cast<std::int64_t>(n.at("inputs").size());
        control_edges += static_cast<std::int64_t>(n.at("control_inputs").size());
        phases.insert(n.at("phase").get<std::string>());
        CHECK(n.at("device") == "cpu");
      }
      CHECK(g.at("counts").at("nodes") == nodes.size());
      CHECK(g.at("counts").at("data_edges") == data_edges);
      CHECK(g.at("counts").at("control_edges") == control_edges);
      CHECK(phases ==
            (training ? std::set<std::string>{"forward", "backward", "update"} : std::set<std::string>{"forward"}));

      CommandResult dot = run_tensorctl("graph " + flags + " -o graph.dot", d.path());
      REQUIRE(dot.status == 0);
      CHECK(dot.out.empty());
      CHECK(dot.err.find(std::to_string(nodes.size()) + " nodes") != std::string::npos);
      const std::string text = read_text(d / "graph.dot");
      CHECK(count_of(text, "style=dashed") == control_edges);
      CHECK(count_of(text, "subgraph cluster_") >= 3);
      // The training graph shows the updates writing the variables.
      CHECK((count_of(text, "\\nwrites ") > 0) == training);
      if (!have_graphviz()) {
        MESSAGE("Graphviz is not installed (scripts/setup.sh installs it): its count of the DOT skipped");
        continue;
      }
      // Graphviz's gc counts what dot parsed: "  NODES  EDGES name (file)".
      std::istringstream counts(shell_output(d.path(), "gc -n -e graph.dot"));
      std::int64_t gc_nodes = -1, gc_edges = -1;
      counts >> gc_nodes >> gc_edges;
      CHECK(gc_nodes == static_cast<std::int64_t>(nodes.size()));
      CHECK(gc_edges == data_edges + control_edges);
      shell_output(d.path(), "dot -Tcanon graph.dot >/dev/null");
    }
  }

  TEST_CASE("graph --format svg renders with Graphviz; without dot it fails, writing nothing") {
    if (!have_graphviz()) {
      MESSAGE("Graphviz is not installed (scripts/setup.sh installs it): skipped");
      return;
    }
    TempDir d;
    const std::string spec = quoted(source_path("configs/models/iris_mlp.json"));
    CommandResult svg = run_tensorctl("graph " + spec + " --training --format svg -o g.svg", d.path());
    REQUIRE(svg.status == 0);
    const std::string text = read_text(d / "g.svg");
    CHECK(text.find("<svg") != std::string::npos);
    CHECK(text.find("dense/FusedMatMul") != std::string::npos);
    const auto before = d.listing();
    const std::string path = std::getenv("PATH");
    setenv("PATH", "/nonexistent", 1);
    CommandResult missing = run_tensorctl("graph " + spec + " --format svg -o other.svg", d.path());
    setenv("PATH", path.c_str(), 1);
    check_runtime_error(missing, {"--format svg runs Graphviz's dot, which could not be started"});
    CHECK(d.listing() == before);
  }

  TEST_CASE("a model spec ending in a ReLU or a sigmoid has an inference graph; its training graph needs a loss") {
    TempDir d;
    for (const std::string activation : {"relu", "sigmoid"}) {
      CAPTURE(activation);
      // The default loss, cross-entropy, was traced with the inference graph and refused the model, exit 2.
      d.write("spec.json", R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 2, "activation": ")" +
                               activation + R"("}]})");
      CommandResult r = run_tensorctl("graph spec.json --format json", d.path());
      CHECK(r.status == 0);
      CHECK(r.err.empty());
      const nlohmann::json g = parse_json(r.out);
      std::set<std::string> ops;
      for (const auto& n : g.at("nodes")) ops.insert(n.at("op").get<std::string>());
      CHECK(ops.contains("Placeholder"));
      CHECK(ops.contains("FusedMatMul"));
      // The training graph needs a loss: the message says the spec names none, rather than blame a "loss" key.
      expect_user_error(d, "graph spec.json --training",
                        {"spec.json: --training: a model spec names no loss, and the default,",
                         "does not fit this model's output; give a train config with its loss"});
    }
  }

  TEST_CASE("graph refuses an unknown format and a missing spec, writing nothing") {
    TempDir d;
    expect_user_error(d, "graph " + quoted(source_path("configs/iris_mlp.json")) + " --format png -o g.png",
                      {"--format: unknown format \"png\" (known: dot, json, svg)"});
    expect_user_error(d, "graph missing.json -o g.dot", {"missing.json"});
  }
}

}  // namespace tctl::cli_test
