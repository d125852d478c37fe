// The subcommands. Each add_* function registers its subcommand on the CLI11 app and returns the function
// to run when it was chosen; that function returns the process exit status.
#pragma once

#include <functional>
#include <memory>

#include <CLI/CLI.hpp>

namespace tctl::app {

using Command = std::function<int()>;

// Registers subcommand `name`: `define` adds its flags, bound to one Flags that lives as long as the
// Command, which runs `run` on them.
template <class Flags>
Command add_command(CLI::App& app, const char* name, const char* help, void (*define)(CLI::App&, Flags&),
                    int (*run)(const Flags&)) {
  auto flags = std::make_shared<Flags>();
  define(*app.add_subcommand(name, help), *flags);
  return [flags, run] { return run(*flags); };
}

Command add_train_command(CLI::App& app);
Command add_predict_command(CLI::App& app);
Command add_evaluate_command(CLI::App& app);
Command add_summary_command(CLI::App& app);
Command add_race_check_command(CLI::App& app);
Command add_profile_command(CLI::App& app);
Command add_import_keras_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_graph_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_init_command(CLI::App& app);
Command add_plot_command(CLI::App& app);
Command add_lr_find_command(CLI::App& app);
Command add_tune_command(CLI::App& app);

}  // namespace tctl::app
