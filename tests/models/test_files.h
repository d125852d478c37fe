// Scratch files for the models tests: one folder per test process, so parallel runs never collide.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tctl::testing {

inline std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("tctl_models_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `contents` to scratch_dir()/name and returns the path.
inline std::string write_scratch_file(const std::string& name, const std::string& contents) {
  auto p = scratch_dir() / name;
  std::ofstream(p, std::ios::binary) << contents;
  return p.string();
}

}  // namespace tctl::testing
