// Scratch files for the models tests: one folder per test process, so parallel runs never collide.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

// A fresh empty directory per test case under the system's temporary folder, removed at the end.
struct TempDir {
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("tctl_test_dir." + std::to_string(::getpid()) + "." + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The names directly inside, in no particular order.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    return out;
  }

  std::filesystem::path path;
};

}  // namespace tctl::testing
