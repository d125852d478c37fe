// Helpers for the end-to-end tests of the tensorctl binary: run it in a scratch directory, capture what it
// printed, and check the error contract (DESIGN.md "Errors": one line, exit 2 for a user's mistake, exit 1
// for a runtime failure, nothing written, never a crash).
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tctl::cli_test {

// What one run of the binary did. `status` is the exit status, or 128 + the signal number when a signal
// ended it (so a crash or abort reads as 134, 139, ...).
struct CommandResult {
  int status = -1;
  std::string out;
  std::string err;
};

// A fresh directory under the system temp folder, removed with everything in it when destroyed.
// Not copyable.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Writes `text` to `name` (relative to the directory), creating parent folders.
  void write(const std::string& name, const std::string& text) const;
  // Every file and folder below the directory, as relative paths: compared before and after a command to
  // check that it wrote nothing.
  std::set<std::string> listing() const;

 private:
  std::filesystem::path path_;
};

// Sets an environment variable (which the commands run here inherit) for its lifetime, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// The lines of `text` that are rows or rules of a box table, and the widest of them in characters.
std::size_t widest_table_line(const std::string& text);

// Runs `tensorctl ARGS` with the working directory `cwd` and stdin from /dev/null. `args` is passed to
// /bin/sh as written, so quote paths with spaces (see quoted()).
CommandResult run_tensorctl(const std::string& args, const std::filesystem::path& cwd);

// Runs `tensorctl ARGS` twice: piped, checking it succeeds with nothing on stderr (no progress shown), then
// with a terminal for its stdout and stderr (util-linux's script(1)), checking it succeeds; returns that
// run, `out` holding both streams with their control sequences. nullopt, with a message saying the terminal
// half was skipped, where script(1) is not installed.
std::optional<CommandResult> run_piped_and_on_terminal(const std::string& args, const std::filesystem::path& cwd);

// Starts `tensorctl ARGS` in `cwd` without waiting (the shell that runs it execs it: the pid is tensorctl's),
// stdin from /dev/null, stdout and stderr to the files `out` and `err`. For signals and concurrent runs.
int spawn_tensorctl(const std::string& args, const std::filesystem::path& cwd, const std::filesystem::path& out,
                    const std::filesystem::path& err);
// Waits for a spawned process: its exit status, or 128 + the signal that ended it.
int wait_exit(int pid);

// Runs `command` with /bin/sh in `cwd`, stdin from /dev/null; `out` holds its stdout and stderr together.
// For the tools the tests check tensorctl's output with (Graphviz, python3, a shell pipeline).
CommandResult run_shell_command(const std::string& command, const std::filesystem::path& cwd);

// `path` single-quoted for /bin/sh.
std::string quoted(const std::filesystem::path& path);
// A file of the source tree, e.g. source_path("configs/iris_mlp.json").
std::filesystem::path source_path(const std::string& relative);

std::string read_text(const std::filesystem::path& path);
std::vector<std::string> split_lines(const std::string& text);
// How many times `part` occurs in `text`, overlaps counted.
std::size_t occurrences(const std::string& text, const std::string& part);
std::vector<std::string> split_cells(const std::string& line);
nlohmann::json read_json(const std::filesystem::path& path);
// Parses `text` as JSON; a doctest failure (and null) when it is not.
nlohmann::json parse_json(const std::string& text);

// Checks that the run neither crashed nor aborted: no signal, no "internal check failed", no uncaught
// exception, no sanitizer report.
void check_no_crash(const CommandResult& r);
// Checks a user's mistake: exit 2, nothing on stdout, stderr exactly one line "error: ..." that contains
// every string in `needles`.
void check_user_error(const CommandResult& r, const std::vector<std::string>& needles);
// check_user_error() for a command run by run_shell_command(), whose `out` holds its stdout and stderr together.
void check_user_error_in_output(const CommandResult& r, const std::vector<std::string>& needles);
// Checks a runtime failure: exit 1, stderr one line "error: ..." containing every needle, after the
// placement warnings ("warning: ...") a run prints before its first step, if any.
void check_runtime_error(const CommandResult& r, const std::vector<std::string>& needles);

// Runs `args` in `dir` and checks check_user_error() plus that the directory's listing did not change, so no
// run directory, output file or temporary file was left behind.
CommandResult expect_user_error(const TempDir& dir, const std::string& args, const std::vector<std::string>& needles);

}  // namespace tctl::cli_test
