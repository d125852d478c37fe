#include "models/nn/memory_budget.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "core/errors.h"
#include "models/scoped_env.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using testing::check_spec_error;
using testing::ScopedEnv;

std::int64_t limit_for(const char* value) {
  ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", value);
  return memory_limit_bytes();
}

TEST_CASE("TENSORCTL_MEMORY_LIMIT takes bytes, or K, M, G or T in either case, in powers of 1024") {
  CHECK(limit_for("100") == 100);
  CHECK(limit_for("3k") == 3 * 1024);
  CHECK(limit_for("512M") == std::int64_t{512} << 20);
  CHECK(limit_for("1G") == std::int64_t{1} << 30);
  CHECK(limit_for("1g") == std::int64_t{1} << 30);
  CHECK(limit_for("4T") == std::int64_t{4} << 40);
  CHECK(limit_for("4611686018427387904") == std::int64_t{1} << 62);
  CHECK(limit_for("4194304T") == std::int64_t{1} << 62);
  // Set but empty is unset: the machine's limit.
  std::int64_t machine = 0;
  {
    ScopedEnv restore("TENSORCTL_MEMORY_LIMIT", "");
    ::unsetenv("TENSORCTL_MEMORY_LIMIT");
    machine = memory_limit_bytes();
  }
  CHECK(limit_for("") == machine);
}

TEST_CASE("a TENSORCTL_MEMORY_LIMIT that is not a limit is refused, naming it, the value and the form") {
  // Each of these used to fall back to the machine's memory without a word.
  for (const char* value : {"1.5G", "1GB", "1 G", " 1G", "1G ", "+1G", "1e3", "0", "0K", "-1", "abc", "G", "1KK",
                            "4611686018427387905", "4194305T", "99999999999999999999"}) {
    INFO("TENSORCTL_MEMORY_LIMIT=" << value);
    const SpecError e = check_spec_error([&] { limit_for(value); }, "", "TENSORCTL_MEMORY_LIMIT", {});
    CHECK(e.message() ==
          "expected a whole number of bytes from 1 to 2^62, or one with a K, M, G or T suffix (powers "
          "of 1024, either case: 512M, 8g), got \"" +
              std::string(value) + "\"");
  }
}

}  // namespace
}  // namespace tctl
