// tensorctl: define, train, run and inspect neural networks from JSON specs. The one place errors are
// caught: a user's mistake exits 2, a runtime failure 1, each with one line on stderr.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <string>

#include "app/commands.h"
#include "core/errors.h"
#include "core/mpi_world.h"
#include "core/op_registry.h"
#include "core/placement.h"

namespace {

// Every error is one line: a message from a library may carry newlines, which would split it, and a path or
// an argument may carry terminal escapes.
std::string one_line(const std::string& message) {
  std::string s = tctl::printable_line(message);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int print_error(const std::string& message, int status) {
  std::fprintf(stderr, "error: %s\n", one_line(message).c_str());
  return status;
}

// Set by SIGPIPE: a write found a pipe whose reader had gone. The handler only stores to a lock-free atomic,
// which is async-signal-safe; the write then fails with EPIPE.
std::atomic<bool> g_broken_pipe{false};
extern "C" void on_broken_pipe(int) { g_broken_pipe.store(true, std::memory_order_relaxed); }

// Standard output is checked once, at the end: a full device fails the command even when every printf before
// "succeeded" into the buffer. Closing it flushes and reports deferred errors too. A reader that went away
// (`tensorctl predict ... | head`) ends the command quietly with 141, the status a shell reports for coreutils'
// tools that SIGPIPE ended, once its work (a run directory, say) is done.
int finish_stdout(int status) {
  int error = 0;
  if (std::fflush(stdout) != 0) error = errno;
  const bool failed_before = std::ferror(stdout) != 0;
  if (std::fclose(stdout) != 0 && error == 0) error = errno;
  // A command that failed has said so in its one line (a write to stdout that failed included).
  if ((error == 0 && !failed_before) || status != 0) return status;
  if (error == EPIPE || (error == 0 && g_broken_pipe.load(std::memory_order_relaxed))) return 128 + SIGPIPE;
  // An earlier write that failed leaves only the error flag, not its reason.
  return print_error(
      std::string("cannot write standard output: ") + (error != 0 ? std::strerror(error) : "write error"),
      status == 0 ? 1 : status);
}

// A standard stream the caller closed (`>&-`) leaves its number free, and the next file opened takes it: the
// CUDA driver's device files at start-up, say, after which "standard output" was /dev/nvidiactl and writes
// failed with EINVAL. Each closed one gets /dev/null opened the wrong way round (standard input for writing,
// the outputs for reading), so the number stays taken and its reads and writes still fail with EBADF.
void hold_closed_standard_streams() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int held = ::open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
    if (held >= 0 && held != fd) {
      ::dup2(held, fd);
      ::close(held);
    }
  }
}

// A closed pipe and a file past its size limit then fail the write with EPIPE and EFBIG instead of a signal
// that ends the process mid-write (a run directory half written): a file past its limit becomes a message
// and exit 1, a closed standard output a quiet 141 at the end.
void survive_failed_writes() {
  struct sigaction pipe_action {};
  pipe_action.sa_handler = on_broken_pipe;
  sigemptyset(&pipe_action.sa_mask);
  sigaction(SIGPIPE, &pipe_action, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

using Commands = std::map<CLI::App*, tctl::app::Command>;

Commands add_commands(CLI::App& app) {
  Commands commands;
  auto add = [&](tctl::app::Command (*fn)(CLI::App&)) {
    std::size_t before = app.get_subcommands({}).size();
    tctl::app::Command c = fn(app);
    commands[app.get_subcommands({})[before]] = std::move(c);
  };
  add(tctl::app::add_train_command);
  add(tctl::app::add_predict_command);
  add(tctl::app::add_evaluate_command);
  add(tctl::app::add_summary_command);
  add(tctl::app::add_race_check_command);
  add(tctl::app::add_profile_command);
  add(tctl::app::add_import_keras_command);
  add(tctl::app::add_devices_command);
  add(tctl::app::add_graph_command);
  add(tctl::app::add_export_command);
  add(tctl::app::add_sweep_command);
  add(tctl::app::add_init_command);
  add(tctl::app::add_plot_command);
  add(tctl::app::add_lr_find_command);
  add(tctl::app::add_tune_command);
  return commands;
}

// CLI11's refusal of the command line as one line of ours, naming the --help to read.
int parse_error_status(const CLI::ParseError& e, const Commands& commands, const std::string& known, int argc) {
  std::string hint = "tensorctl --help";
  for (const auto& [sub, run] : commands)
    if (sub->parsed()) hint = "tensorctl " + sub->get_name() + " --help";
  if (argc == 1) return print_error("a command is required (known: " + known + "); see " + hint, 2);
  // CLI11 starts its sentences with a capital ("The following argument was not expected"); ours do not.
  std::string message = one_line(e.what());
  if (message.size() > 1 && std::isupper(static_cast<unsigned char>(message[0])) &&
      std::islower(static_cast<unsigned char>(message[1])))
    message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
  return print_error(message + " (see " + hint + ")", 2);
}

// Runs the parsed command; an exception becomes its one line and the exit status.
int run_command(Commands& commands) {
  int status = 2;
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) status = run();
  } catch (const tctl::SpecError& e) {
    status = print_error(e.what(), 2);
  } catch (const tctl::PlacementError& e) {
    // --strict-placement refused a device the spec or flags asked for: the user's choice, as a bad spec.
    status = print_error(e.what(), 2);
  } catch (const std::bad_alloc&) {
    status = print_error("out of memory", 1);
  } catch (const std::exception& e) {
    status = print_error(e.what(), 1);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  hold_closed_standard_streams();
  survive_failed_writes();
  // Every kernel linked in belongs to a defined op (an internal error otherwise, found before any work).
  tctl::check_op_registry();
  CLI::App app{"tensorctl: define, train, run and inspect neural networks from JSON specs", "tensorctl"};
  app.set_version_flag("--version", std::string("tensorctl ") + TENSORCTL_VERSION);
  app.require_subcommand(1);
  Commands commands = add_commands(app);

  std::string known;
  bool known_command = false;
  for (const auto& [sub, run] : commands) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    known_command = known_command || (argc > 1 && sub->get_name() == argv[1]);
  }
  // CLI11 reports a misspelt command as "A subcommand is required"; say what was wrong instead.
  if (argc > 1 && argv[1][0] != '-' && !known_command)
    return print_error(std::string("unknown command \"") + argv[1] + "\" (known: " + known + ")", 2);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return finish_stdout(app.exit(e));  // --help, --version
  } catch (const CLI::ParseError& e) {
    return parse_error_status(e, commands, known, argc);
  }
  int status = run_command(commands);
  // A multi-worker run's processes leave MPI together when they all succeed, or when `train` stopped on a
  // signal (130, 143, 129), which every rank agreed to stop at the same step: Open MPI's MPI_Finalize waits for
  // every rank, so a worker does not leave (and mpirun end the job) while rank 0 still writes the checkpoint
  // and its report; stdout is written out first. One that fails exits without, which makes mpirun end the
  // others.
  const bool together = status == 0 || status == 128 + SIGINT || status == 128 + SIGTERM || status == 128 + SIGHUP;
  status = finish_stdout(status);
  if (!together) return status;
  // A rank that stopped after the last all-reduce would hold MPI_Finalize for good: mpi_finalize waits for
  // the others against the timeout, and a rank missing by then fails this one too.
  try {
    tctl::mpi_finalize();
  } catch (const std::exception& e) {
    return print_error(e.what(), 1);
  }
  return status;
}
