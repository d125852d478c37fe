// An environment variable set for one scope of a test (TENSORCTL_MEMORY_LIMIT, TCTL_CPU_BF16 for the commands a
// CLI test starts), restored after.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace tctl::testing {

// Sets `name` to `value` for its lifetime, then restores the previous value, or its absence. Not thread-safe,
// as setenv is not.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace tctl::testing
