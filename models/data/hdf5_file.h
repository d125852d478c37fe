// An HDF5 file read with Debian's libhdf5 (the serial build), from memory: Keras keeps a model's weights in
// HDF5 (a .keras archive's model.weights.h5, a legacy whole-model .h5 file). Only what reading weights needs:
// groups' members, float datasets, string attributes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tctl {

struct Hdf5Dataset {
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // converted to float32 by libhdf5, whatever the stored float type
};

class Hdf5File {
 public:
  // Opens the HDF5 file image `bytes` (copied: libhdf5 keeps its own); `file` names it in errors.
  // SpecError(file, "", ...) when the bytes are no HDF5 file.
  Hdf5File(std::string_view bytes, std::string file);
  ~Hdf5File();
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  const std::string& file() const { return file_; }
  // Whether `path` ("layers/dense/vars/0") names a dataset; a group.
  bool is_dataset(const std::string& path) const;
  bool is_group(const std::string& path) const;
  // The names of a group's members, sorted; empty when `path` is no group.
  std::vector<std::string> members(const std::string& path) const;
  // A dataset of numbers as float32. SpecError(file, path, ...) when it is missing, not numbers, or larger than
  // `max_elements`.
  Hdf5Dataset read(const std::string& path, std::int64_t max_elements) const;
  // A string attribute of the object at `path` ("" for the root), fixed- or variable-length; nullopt when
  // absent. A list attribute (h5py writes lists of names as fixed-length string arrays) gives its items.
  std::optional<std::vector<std::string>> strings(const std::string& path, const std::string& name) const;

 private:
  std::int64_t file_id_ = -1;
  std::string file_;
};

// Whether `bytes` begin with HDF5's signature (at offset 0, where every file Keras writes has it).
bool looks_like_hdf5(std::string_view bytes);

}  // namespace tctl
