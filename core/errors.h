// Errors and invariant checks shared by every layer of tensorctl.
//
// Three kinds of failure, three exits (see DESIGN.md "Errors"):
//   SpecError    a user's mistake in a spec, config, flag or data file: one line, exit 2, nothing written.
//   RuntimeError a failure while running (I/O, numeric guard, device): exit 1.
//   TCTL_CHECK   a broken internal invariant: prints file, line and condition, then aborts. Never for input.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tctl {

// Base of every error tensorctl throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A user's mistake. `file` is the file the value came from (may be empty for a flag), `where` the place
// inside it: a JSON path like `layers[2].units`, `line 14` of a CSV, or a flag name.
class SpecError : public Error {
 public:
  SpecError(std::string file, std::string where, const std::string& message);
  const std::string& file() const { return file_; }
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  std::string where_;
  std::string message_;
};

// Shapes or dtypes that do not fit an op, found while a graph is built. Models turn it into a SpecError that
// names the layer; it carries the node name so the message can say which op refused.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A failure while running: I/O, a device, a numeric guard.
class RuntimeError : public Error {
 public:
  using Error::Error;
};

// The numeric guard: a gradient (or another value a kernel refuses to consume) holds NaN or infinity.
// Thrown before anything is written, so the variables it would have updated are unchanged.
class NonFiniteError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// Text from a user's file, quoted for a message: in double quotes, with quotes, backslashes, control
// characters (C1 included) and the Unicode line separators escaped (\n, \u001b, \u009b, \u2028...) and bytes
// that are not well-formed UTF-8 (overlong forms and surrogates included) shown as \xNN, cut to 100 bytes at a
// character boundary with "..." after. A hostile file may hold a megabyte-long cell or terminal escapes, and an
// error stays one readable line.
std::string quote_for_message(std::string_view text);
// Whether `text` holds a control character (below 0x20, DEL, or a C1 control U+0080..U+009F): names that
// tables and messages print must not.
bool has_control_character(std::string_view text);
// `text` made safe to print as one line on a terminal: line breaks and tabs become spaces, and every other
// control character (C0, DEL, C1) and each byte that is not well-formed UTF-8 is written as an escape
// (\u001b, \xff) as quote_for_message writes it. The last guard before an error reaches the terminal, for text
// no reader quoted (a path, a library's message): it can neither split the line nor drive the terminal.
std::string printable_line(std::string_view text);

// The offset of the first byte of `text` that is not part of well-formed UTF-8 (as quote_for_message judges
// it), or nullopt when all of it is. Names and paths that go into a run's JSON files must be UTF-8.
std::optional<std::size_t> first_non_utf8(std::string_view text);

[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);

}  // namespace tctl

// Aborts with file, line and condition in every build. For invariants only, never for user input.
#define TCTL_CHECK(cond, msg)                                 \
  do {                                                        \
    if (!(cond)) [[unlikely]]                                 \
      ::tctl::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (false)

// The same check for hot loops, compiled out of Release builds.
#ifdef NDEBUG
#define TCTL_DCHECK(cond, msg) \
  do {                         \
  } while (false)
#else
#define TCTL_DCHECK(cond, msg) TCTL_CHECK(cond, msg)
#endif

// Clang thread-safety annotation; empty under g++, it documents which mutex guards a member.
#if defined(__clang__)
#define TCTL_GUARDED_BY(x) __attribute__((guarded_by(x)))
#else
#define TCTL_GUARDED_BY(x)
#endif
