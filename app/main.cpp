// tensorctl: define, train, run and inspect neural networks from JSON specs. The one place errors are
// caught: a user's mistake exits 2, a runtime failure 1, each with one line on stderr.
#include <cstdio>
#include <exception>
#include <map>
#include <new>

#include "app/commands.h"
#include "core/errors.h"

int main(int argc, char** argv) {
  CLI::App app{"tensorctl: define, train, run and inspect neural networks from JSON specs", "tensorctl"};
  app.set_version_flag("--version", std::string("tensorctl ") + TENSORCTL_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, tctl::app::Command> commands;
  auto add = [&](tctl::app::Command (*fn)(CLI::App&)) {
    std::size_t before = app.get_subcommands({}).size();
    tctl::app::Command c = fn(app);
    commands[app.get_subcommands({})[before]] = std::move(c);
  };
  add(tctl::app::add_train_command);
  add(tctl::app::add_predict_command);
  add(tctl::app::add_evaluate_command);
  add(tctl::app::add_summary_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
    return 2;
  } catch (const tctl::SpecError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
