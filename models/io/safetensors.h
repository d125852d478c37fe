// Checkpoints: named tensors in the safetensors format (REFERENCE.md "safetensors"), readable by Python's
// `safetensors` package and by us.
//
// Layout: 8 bytes little-endian u64 N, then N bytes of JSON header, then one byte buffer holding every tensor
// row-major and little-endian. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin,
// end)} (offsets relative to the buffer) and may carry "__metadata__", a map of string to string.
// We read and write the dtypes F32, I32 and I64; files holding any other dtype are refused by name.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "core/variable.h"

namespace tctl {

// One tensor and the name it is stored under (for model weights, the Variable's name).
struct NamedTensor {
  std::string name;
  Tensor value;
};

// The current values of `vars`, each under its variable's name (what a weights file or checkpoint holds).
std::vector<NamedTensor> variable_values(const std::vector<std::shared_ptr<Variable>>& vars);

// The serialised bytes of `tensors` (in that order in the data buffer, and in that order in the header) and
// `metadata` (written as "__metadata__" only when non-empty). The header is padded with spaces so the data
// starts at an offset that is a multiple of 8; tensors are packed back to back after it (readers copy, so a
// tensor after an odd number of 4-byte elements need not be 8-aligned).
// Every tensor must be defined and live on the CPU; names must be unique and not "__metadata__" (broken
// invariants abort, since names come from the program, not the user). Thread-safe; copies the tensors' bytes.
std::string encode_safetensors(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// encode_safetensors written to `path` through write_file_atomic: readers see the old file or the new one,
// never a torn one. Throws RuntimeError when the file cannot be written.
void save_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A decoded file. Owns its tensors (CPU, fresh 64-byte-aligned buffers, no view into the file bytes).
struct SafetensorsFile {
  // Sorted by data offset (empty tensors sharing an offset by name), so a file we wrote comes back in the order
  // it was written.
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr. Linear in the number of tensors; the pointer lives as long as
  // `tensors` is not modified.
  const Tensor* find(const std::string& name) const;
};

// Decodes and validates `bytes`. Every defect is a SpecError whose file is `file_for_errors` and whose place
// is `header` or `tensor "<name>"`; decoding never reads outside `bytes` and never aborts. Refused:
// - fewer than 8 bytes; a header length beyond the file or above 100 MB;
// - a header that is not valid JSON, not an object, or nested deeper than a safetensors header can be;
// - an entry that is not an object, or whose dtype, shape or data_offsets is missing or of the wrong JSON type;
// - unknown dtypes, and known ones we do not support (F16, BF16, ...), by name;
// - negative dimensions, rank above Shape::kMaxRank, sizes that overflow (multiplied left to right, as the
//   reference reader does);
// - offsets with end < begin, outside the buffer, overlapping, leaving gaps, or not covering the whole buffer;
//   end - begin different from the element count times the dtype size;
// - "__metadata__" that is not an object of strings.
// Keys other than dtype, shape and data_offsets inside an entry are ignored, as the reference reader does.
// Thread-safe.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& file_for_errors);

// read_file + decode_safetensors, with `path` as the file in errors (SpecError for a missing file too).
SafetensorsFile load_safetensors(const std::filesystem::path& path);

// Checks that `file` holds exactly the tensors of `expected` (for loading weights into a model): each expected
// name present with the same dtype and shape, and nothing else. Only the dtypes and shapes of `expected` are
// read. Throws SpecError(`file_for_errors`, `tensor "<name>"`, ...) for the first problem: a missing tensor,
// a dtype or shape mismatch (naming both), or a tensor the model does not have.
void check_against(const SafetensorsFile& file, const std::vector<NamedTensor>& expected,
                   const std::string& file_for_errors);

// Assigns each of `vars` the tensor of its name in `file`; check_against must have passed for them.
void assign_from(const SafetensorsFile& file, const std::vector<std::shared_ptr<Variable>>& vars);

}  // namespace tctl
