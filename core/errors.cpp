#include "core/errors.h"

#include <cstdio>
#include <cstdlib>

namespace tctl {

namespace {
std::string compose(const std::string& file, const std::string& where, const std::string& message) {
  std::string out;
  if (!file.empty()) out += file + ": ";
  if (!where.empty()) out += where + ": ";
  return out + message;
}
}  // namespace

SpecError::SpecError(std::string file, std::string where, const std::string& message)
    : Error(compose(file, where, message)), file_(std::move(file)), where_(std::move(where)), message_(message) {}

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "tensorctl: internal check failed at %s:%d: %s (%s)\n", file, line, condition, message.c_str());
  std::abort();
}

}  // namespace tctl
