// `tensorctl plot` end to end: a sweep's trials and a run drawn as SVG, checked by its structure (one panel
// per figure, one curve per run and series with a point per epoch, the tags closed); a folder without a
// history and a picture that is not SVG are refused.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {

TEST_CASE("plot draws each run's training and validation curves, a panel per figure, as SVG") {
  TempDir dir;
  const std::string config = quoted(source_path("configs/digits_mlp.json"));
  REQUIRE(
      run_tensorctl("sweep " + config + " --grid layers[1].units=16,32 --set epochs=3 -o sweep", dir.path()).status ==
      0);
  REQUIRE(run_tensorctl("train " + config + " --epochs 5 --output run --quiet", dir.path()).status == 0);
  const CommandResult r = run_tensorctl("plot sweep run -o curves.svg", dir.path());
  INFO(r.out, r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == "Plotted 3 runs (loss, accuracy) to curves.svg\n");
  const std::string svg = read_text(dir / "curves.svg");
  CHECK(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(svg.ends_with("</svg>\n"));
  CHECK(occurrences(svg, "<g ") == occurrences(svg, "</g>"));
  CHECK(occurrences(svg, "class=\"panel\"") == 2);
  // 3 runs x (training, validation) x (loss, accuracy).
  CHECK(occurrences(svg, "<polyline") == 12);
  CHECK(occurrences(svg, "data-run=\"sweep/trial-001\" data-series=\"validation\"") == 2);
  // A point per epoch: the run of 5 epochs.
  const std::size_t at = svg.find("data-run=\"run\" data-series=\"training\"");
  REQUIRE(at != std::string::npos);
  const std::size_t points = svg.find("points=\"", at) + 8;
  CHECK(occurrences(svg.substr(points, svg.find('"', points) - points), ",") == 5);
  // The picture in docs/commands/plot.md: the same command on two trials of 15 epochs.
  const std::string shipped = read_text(source_path("docs/commands/plot-sample.svg"));
  CHECK(occurrences(shipped, "<polyline") == 8);
  CHECK(occurrences(shipped, "class=\"panel\"") == 2);
  CHECK(occurrences(shipped, "<g ") == occurrences(shipped, "</g>"));
  CHECK(occurrences(svg, "<circle") == 0);
  // A run of one epoch: a line through one point draws nothing, so each series gets a dot.
  REQUIRE(run_tensorctl("train " + config + " --epochs 1 --output one --quiet", dir.path()).status == 0);
  REQUIRE(run_tensorctl("plot one -o one.svg", dir.path()).status == 0);
  CHECK(occurrences(read_text(dir / "one.svg"), "<circle class=\"point\"") == 4);
  expect_user_error(dir, "plot run -o curves.png", {"-o: curves.png: the picture is SVG"});
  expect_user_error(dir, "plot sweep/trial-001.log -o c.svg", {"no history.csv"});
}

}  // namespace tctl::cli_test
