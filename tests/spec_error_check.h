// In-process checks of the user-error contract (DESIGN.md "Errors"): a user's mistake is a SpecError that
// names the file, the place (a JSON path, a CSV line, a flag) and what is wrong. Any suite under tests/ may
// include it; tests/cli/cli_test_util.h checks the same contract on the binary (exit 2, one line).
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/errors.h"

namespace tctl::testing {

// Runs `action`, which must throw a SpecError, and returns that error for the caller to look at. When it
// returns normally, the test case fails and ends there; any other exception propagates as it is.
template <class Action>
SpecError catch_spec_error(Action&& action) {
  try {
    action();
  } catch (const SpecError& e) {
    return e;
  }
  FAIL("expected a SpecError");
  return SpecError("", "", "");  // not reached: FAIL ends the test case
}

// Runs `action` and checks that it throws a SpecError naming `file` and `where` whose message contains every
// string of `message_parts`. Returns the error for any further check.
template <class Action>
SpecError check_spec_error(Action&& action, const std::string& file, const std::string& where,
                           const std::vector<std::string>& message_parts) {
  INFO("expected a SpecError in " << file << " at " << where);
  const SpecError e = catch_spec_error(action);
  INFO("error: " << std::string(e.what()));
  CHECK(e.file() == file);
  CHECK(e.where() == where);
  for (const std::string& part : message_parts) {
    CHECK_MESSAGE(e.message().find(part) != std::string::npos, "the message lacks [" << part << "]");
  }
  return e;
}

}  // namespace tctl::testing
