// A zip archive read from memory with Debian's libzip: NumPy's .npz files (one .npy per array) and Keras 3's
// .keras files (config.json, model.weights.h5) are zip archives.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tctl {

class ZipArchive {
 public:
  // Reads the archive's directory from `bytes`, which must outlive the archive; `file` names it in errors.
  // SpecError(file, "", ...) when the bytes are no zip archive libzip can read.
  ZipArchive(std::string_view bytes, std::string file);
  // Reads the archive's directory from the file at `path`, whose members are then read from the file as asked.
  explicit ZipArchive(const std::string& path);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  // The members' names, in the archive's order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const;
  // A member uncompressed, read in chunks so that a size the directory misstates allocates nothing ahead:
  // SpecError(file, name, ...) when it is missing, damaged (its CRC differs) or longer than `limit` bytes.
  std::string read(const std::string& name, std::size_t limit) const;

 private:
  void* zip_ = nullptr;  // zip_t*, kept out of this header
  std::string file_;
  std::vector<std::string> names_;

  void list_members();
};

// Whether `bytes` begin as a zip archive does (a local file header, or the end record of an empty archive).
bool looks_like_zip(std::string_view bytes);

}  // namespace tctl
