#include "models/data/hdf5_file.h"

#include <hdf5.h>
#include <hdf5_hl.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/errors.h"

namespace tctl {

namespace {

// libhdf5 prints a stack of every error to stderr by default; our messages say what went wrong instead.
void silence_hdf5() {
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
}

// Closes an HDF5 handle when it leaves scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

H5O_type_t object_type(hid_t file, const std::string& path) {
  if (path.empty()) return H5O_TYPE_GROUP;
  // Each link along the path must exist before H5Oget_info_by_name may be asked about the last.
  std::size_t at = 0;
  while (at != std::string::npos) {
    at = path.find('/', at + 1);
    const std::string prefix = path.substr(0, at);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return H5O_TYPE_UNKNOWN;
  }
  H5O_info_t info;
  if (H5Oget_info_by_name(file, path.c_str(), &info, H5P_DEFAULT) < 0) return H5O_TYPE_UNKNOWN;
  return info.type;
}

}  // namespace

bool looks_like_hdf5(std::string_view bytes) { return bytes.starts_with("\x89HDF\r\n\x1a\n"); }

Hdf5File::Hdf5File(std::string_view bytes, std::string file) : file_(std::move(file)) {
  silence_hdf5();
  if (!looks_like_hdf5(bytes)) throw SpecError(file_, "", "not an HDF5 file (by its first bytes)");
  // Flags 0: libhdf5 copies the image and opens the copy read-only, so `bytes` may go once this returns.
  file_id_ = H5LTopen_file_image(const_cast<char*>(bytes.data()), bytes.size(), 0);
  if (file_id_ < 0) throw SpecError(file_, "", "an HDF5 file libhdf5 cannot read");
}

Hdf5File::~Hdf5File() {
  if (file_id_ >= 0) H5Fclose(file_id_);
}

bool Hdf5File::is_dataset(const std::string& path) const { return object_type(file_id_, path) == H5O_TYPE_DATASET; }

bool Hdf5File::is_group(const std::string& path) const { return object_type(file_id_, path) == H5O_TYPE_GROUP; }

std::vector<std::string> Hdf5File::members(const std::string& path) const {
  std::vector<std::string> out;
  if (!is_group(path)) return out;
  const Handle group(H5Gopen2(file_id_, path.empty() ? "/" : path.c_str(), H5P_DEFAULT), H5Gclose);
  if (!group.ok()) return out;
  H5G_info_t info;
  if (H5Gget_info(group.get(), &info) < 0) return out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) continue;
    std::string name(static_cast<std::size_t>(n) + 1, '\0');
    H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<std::size_t>(n));
    out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Hdf5Dataset Hdf5File::read(const std::string& path, std::int64_t max_elements) const {
  if (!is_dataset(path)) throw SpecError(file_, path, "no such dataset");
  const Handle set(H5Dopen2(file_id_, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!set.ok()) throw SpecError(file_, path, "cannot open the dataset");
  const Handle type(H5Dget_type(set.get()), H5Tclose);
  const H5T_class_t kind = H5Tget_class(type.get());
  if (kind != H5T_FLOAT && kind != H5T_INTEGER)
    throw SpecError(file_, path, "a dataset that holds no numbers (weights are floats)");
  const Handle space(H5Dget_space(set.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 8) throw SpecError(file_, path, "a dataset of an unreadable shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  Hdf5Dataset out;
  std::int64_t n = 1;
  for (hsize_t d : dims) {
    if (d > static_cast<hsize_t>(max_elements) || (d > 0 && n > max_elements / static_cast<std::int64_t>(d)))
      throw SpecError(file_, path, fmt::format("a dataset of more than {} elements", max_elements));
    n *= static_cast<std::int64_t>(d);
    out.shape.push_back(static_cast<std::int64_t>(d));
  }
  out.values.resize(static_cast<std::size_t>(n));
  if (n > 0 && H5Dread(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data()) < 0)
    throw SpecError(file_, path, "cannot read the dataset's values (damaged, or of a type libhdf5 cannot convert)");
  return out;
}

std::optional<std::vector<std::string>> Hdf5File::strings(const std::string& path, const std::string& name) const {
  const std::string object = path.empty() ? "/" : path;
  if (!path.empty() && object_type(file_id_, path) == H5O_TYPE_UNKNOWN) return std::nullopt;
  if (H5Aexists_by_name(file_id_, object.c_str(), name.c_str(), H5P_DEFAULT) <= 0) return std::nullopt;
  const Handle attr(H5Aopen_by_name(file_id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) return std::nullopt;
  const Handle type(H5Aget_type(attr.get()), H5Tclose);
  const Handle space(H5Aget_space(attr.get()), H5Sclose);
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  // An empty list is stored as an empty float array (numpy's type for []), as Keras' weight_names of a layer
  // without weights is.
  if (count == 0) return std::vector<std::string>{};
  if (H5Tget_class(type.get()) != H5T_STRING)
    throw SpecError(file_, object + "@" + name, "an attribute that holds no text");
  if (count < 0 || count > (1 << 20)) throw SpecError(file_, object + "@" + name, "an unreadable attribute");
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.get()) > 0) {
    std::vector<char*> items(static_cast<std::size_t>(count), nullptr);
    const Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memory.get(), H5T_VARIABLE);
    if (H5Aread(attr.get(), memory.get(), items.data()) < 0)
      throw SpecError(file_, object + "@" + name, "cannot read the attribute");
    for (char* item : items) out.emplace_back(item != nullptr ? item : "");
    H5Dvlen_reclaim(memory.get(), space.get(), H5P_DEFAULT, items.data());
    return out;
  }
  const std::size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (std::size_t{64} << 20) / static_cast<std::size_t>(std::max<hssize_t>(count, 1)))
    throw SpecError(file_, object + "@" + name, "an attribute too large to read");
  std::string buffer(size * static_cast<std::size_t>(count), '\0');
  if (H5Aread(attr.get(), type.get(), buffer.data()) < 0)
    throw SpecError(file_, object + "@" + name, "cannot read the attribute");
  for (hssize_t i = 0; i < count; ++i) {
    std::string item = buffer.substr(static_cast<std::size_t>(i) * size, size);
    item.resize(std::min(item.size(), item.find('\0')));  // fixed-length strings are padded with NULs
    out.push_back(item);
  }
  return out;
}

}  // namespace tctl
