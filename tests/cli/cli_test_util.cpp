#include "cli/cli_test_util.h"

#include <cstdio>

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>

#include <doctest/doctest.h>

#include "core/errors.h"

extern char** environ;

namespace tctl::cli_test {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "tensorctl_cli_XXXXXX").string();
  char* made = ::mkdtemp(pattern.data());
  REQUIRE_MESSAGE(made != nullptr, "cannot create a temporary directory");
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void TempDir::write(const std::string& name, const std::string& text) const {
  const fs::path p = path_ / name;
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << text;
  REQUIRE_MESSAGE(f.good(), "cannot write " << p);
}

std::set<std::string> TempDir::listing() const {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(path_)) out.insert(fs::relative(e.path(), path_).string());
  return out;
}

std::string quoted(const fs::path& path) {
  std::string out = "'";
  for (char c : path.string()) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

fs::path source_path(const std::string& relative) { return fs::path(TENSORCTL_SOURCE_DIR) / relative; }

std::string read_text(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = line.find(',', start);
    cells.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return cells;
    start = comma + 1;
  }
}

nlohmann::json parse_json(const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FAIL_CHECK("not JSON: " << e.what() << "\n" << text);
    return nullptr;
  }
}

nlohmann::json read_json(const fs::path& path) { return parse_json(read_text(path)); }

ScopedEnv::ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
  if (const char* v = std::getenv(name_.c_str())) saved_ = v;
  setenv(name_.c_str(), value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (saved_)
    setenv(name_.c_str(), saved_->c_str(), 1);
  else
    unsetenv(name_.c_str());
}

std::size_t widest_table_line(const std::string& text) {
  std::size_t widest = 0;
  for (const std::string& line : split_lines(text)) {
    // Box tables' lines start with one of the corner or bar characters, all of them U+25xx (E2 94/95 xx).
    if (line.size() < 3 || (line.compare(0, 2, "\xE2\x94") != 0 && line.compare(0, 2, "\xE2\x95") != 0)) continue;
    std::size_t n = 0;
    for (unsigned char c : line) n += (c & 0xC0) != 0x80;
    widest = std::max(widest, n);
  }
  return widest;
}

CommandResult run_tensorctl(const std::string& args, const fs::path& cwd) {
  // The captures live outside `cwd`, so they never show up in its listing.
  static TempDir captures;
  static int counter = 0;
  const fs::path out = captures / ("out" + std::to_string(counter));
  const fs::path err = captures / ("err" + std::to_string(counter));
  ++counter;
  // exec: the binary replaces the shell, so a signal that kills it reaches our wait status unchanged.
  const std::string command = "cd " + quoted(cwd) + " && exec " + quoted(TENSORCTL_BINARY) + " " + args + " >" +
                              quoted(out) + " 2>" + quoted(err) + " </dev/null";
  const int raw = std::system(command.c_str());
  CommandResult r;
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  if (raw != -1 && WIFSIGNALED(raw)) r.status = 128 + WTERMSIG(raw);
  r.out = read_text(out);
  r.err = read_text(err);
  INFO("tensorctl " << args);
  INFO("stderr: " << r.err);
  check_no_crash(r);
  return r;
}

std::optional<CommandResult> run_piped_and_on_terminal(const std::string& args, const fs::path& cwd) {
  CommandResult piped = run_tensorctl(args, cwd);
  REQUIRE(piped.status == 0);
  CHECK(piped.err.empty());
  if (run_shell_command("command -v script", cwd).status != 0) {
    MESSAGE("skipped the terminal half: util-linux's script(1), which gives a command a terminal, is not installed");
    return std::nullopt;
  }
  CommandResult tty = run_shell_command(
      "script -qec " + quoted(fs::path(std::string(TENSORCTL_BINARY) + " " + args)) + " /dev/null", cwd);
  INFO("on a terminal: tensorctl " << args << "\n" << tty.out);
  check_no_crash(tty);
  REQUIRE(tty.status == 0);
  return tty;
}

int spawn_tensorctl(const std::string& args, const fs::path& cwd, const fs::path& out, const fs::path& err) {
  const std::string command = "cd " + quoted(cwd) + " && exec " + quoted(TENSORCTL_BINARY) + " " + args + " >" +
                              quoted(out) + " 2>" + quoted(err) + " </dev/null";
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  return pid;
}

int wait_exit(int pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

CommandResult run_shell_command(const std::string& command, const fs::path& cwd) {
  const std::string line = "cd " + quoted(cwd) + " && (" + command + ") </dev/null 2>&1";
  FILE* pipe = popen(line.c_str(), "r");
  REQUIRE(pipe != nullptr);
  CommandResult r;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) r.out.append(buffer, n);
  const int raw = pclose(pipe);
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  return r;
}

void check_no_crash(const CommandResult& r) {
  CHECK_MESSAGE(r.status >= 0, "the command did not run");
  CHECK_MESSAGE(r.status < 128, "killed by signal " << r.status - 128);
  for (const char* sign : {"internal check failed", "terminate called", "Aborted", "Segmentation fault",
                           "AddressSanitizer", "runtime error:", "Stack trace", "what():"})
    CHECK_MESSAGE(r.err.find(sign) == std::string::npos, "stderr shows a crash: " << sign);
}

namespace {
void check_one_error_line(const CommandResult& r, const std::vector<std::string>& needles) {
  const auto lines = split_lines(r.err);
  CHECK_MESSAGE(lines.size() == 1, "stderr should be one line, got " << lines.size());
  CHECK_MESSAGE(r.err.ends_with("\n"), "stderr should end with a newline");
  CHECK(r.err.starts_with("error: "));
  // Whatever the input held, the line is as printable_line leaves it: no control character (a terminal escape,
  // a carriage return, C1), no line separator and no byte that is not UTF-8.
  const std::string line = r.err.ends_with("\n") ? r.err.substr(0, r.err.size() - 1) : r.err;
  CHECK_MESSAGE(tctl::printable_line(line) == line, "stderr holds a control character or a byte not UTF-8");
  for (const auto& n : needles) CHECK_MESSAGE(r.err.find(n) != std::string::npos, "stderr lacks: " << n);
}
}  // namespace

void check_user_error(const CommandResult& r, const std::vector<std::string>& needles) {
  INFO("stderr: " << r.err);
  CHECK(r.status == 2);
  CHECK_MESSAGE(r.out.empty(), "stdout should be empty, got: " << r.out);
  check_one_error_line(r, needles);
}

void check_user_error_in_output(const CommandResult& r, const std::vector<std::string>& needles) {
  INFO("stdout and stderr: " << r.out);
  CHECK(r.status == 2);
  check_one_error_line(CommandResult{.status = r.status, .out = "", .err = r.out}, needles);
}

void check_runtime_error(const CommandResult& r, const std::vector<std::string>& needles) {
  INFO("stderr: " << r.err);
  CHECK(r.status == 1);
  // The run had begun: the placement warnings printed before its first step may come first.
  CommandResult last = r;
  while (last.err.starts_with("warning: ") && last.err.find('\n') != std::string::npos) {
    CHECK(tctl::printable_line(last.err.substr(0, last.err.find('\n'))) == last.err.substr(0, last.err.find('\n')));
    last.err.erase(0, last.err.find('\n') + 1);
  }
  check_one_error_line(last, needles);
}

CommandResult expect_user_error(const TempDir& dir, const std::string& args, const std::vector<std::string>& needles) {
  const auto before = dir.listing();
  CommandResult r = run_tensorctl(args, dir.path());
  INFO("tensorctl " << args);
  check_user_error(r, needles);
  CHECK_MESSAGE(dir.listing() == before, "the command wrote files although it failed");
  return r;
}

}  // namespace tctl::cli_test
