// The subcommands. Each add_* function registers its subcommand on the CLI11 app and returns the function
// to run when it was chosen; that function returns the process exit status.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace tctl::app {

using Command = std::function<int()>;

Command add_train_command(CLI::App& app);
Command add_predict_command(CLI::App& app);
Command add_evaluate_command(CLI::App& app);
Command add_summary_command(CLI::App& app);
Command add_race_check_command(CLI::App& app);
Command add_profile_command(CLI::App& app);
Command add_import_keras_command(CLI::App& app);

}  // namespace tctl::app
