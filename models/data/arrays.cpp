#include "models/data/arrays.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "models/data/zip_archive.h"

namespace tctl {
namespace {

static_assert(std::endian::native == std::endian::little, "the readers copy little-endian elements as they are");

// An array's elements at most: a 64 GiB float32 tensor, as the model's tensors.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 34;
constexpr std::size_t kMaxArrayRank = 16;

// An element type: its size, and how one element at p (in the file's byte order) becomes a float.
enum class Kind { kBool, kSigned, kUnsigned, kFloat };
struct ElementType {
  Kind kind;
  int size;
  bool big_endian;
  std::string name;
};

float element_at(const ElementType& t, const unsigned char* p) {
  unsigned char b[8];
  for (int i = 0; i < t.size; ++i) b[i] = t.big_endian ? p[t.size - 1 - i] : p[i];
  auto as = [&]<class T>(T) {
    T v;
    std::memcpy(&v, b, sizeof v);
    return static_cast<float>(v);
  };
  switch (t.kind) {
    case Kind::kBool:
      return b[0] != 0 ? 1.0f : 0.0f;
    case Kind::kSigned:
      return t.size == 1   ? as(std::int8_t{})
             : t.size == 2 ? as(std::int16_t{})
             : t.size == 4 ? as(std::int32_t{})
                           : as(std::int64_t{});
    case Kind::kUnsigned:
      return t.size == 1   ? as(std::uint8_t{})
             : t.size == 2 ? as(std::uint16_t{})
             : t.size == 4 ? as(std::uint32_t{})
                           : as(std::uint64_t{});
    case Kind::kFloat:
      return t.size == 4 ? as(float{}) : as(double{});
  }
  return 0.0f;
}

// The element count of `shape`, refused past kMaxElements. The product of the non-zero dimensions is held to
// the same bound, so a shape with a zero in it cannot carry dimensions whose product overflows (a row's
// width, say).
std::int64_t element_count(const std::vector<std::int64_t>& shape, const std::string& file) {
  std::int64_t nonzero = 1;
  bool empty = false;
  for (std::int64_t d : shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (nonzero > kMaxElements / d)
      throw SpecError(
          file, "header",
          fmt::format("shape ({}) holds more than the 2^34 elements tensorctl reads", fmt::join(shape, ", ")));
    nonzero *= d;
  }
  return empty ? 0 : nonzero;
}

// The elements after the header: exactly the bytes the shape and type declare.
ArrayFile elements(std::string_view bytes, std::size_t start, std::vector<std::int64_t> shape, const ElementType& t,
                   const std::string& file) {
  const std::int64_t n = element_count(shape, file);
  const std::uint64_t want = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(t.size);
  const std::uint64_t have = bytes.size() - start;
  if (have < want)
    throw SpecError(file, "header",
                    fmt::format("shape ({}) of {} needs {} bytes of elements, the file has {} after its header",
                                fmt::join(shape, ", "), t.name, want, have));
  if (have > want)
    throw SpecError(file, "header",
                    fmt::format("the file runs on past the {} bytes of elements its header declares", want));
  ArrayFile a;
  a.shape = std::move(shape);
  a.integral = t.kind != Kind::kFloat;
  a.type = t.name;
  a.values.resize(static_cast<std::size_t>(n));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + start);
  for (std::int64_t i = 0; i < n; ++i) a.values[static_cast<std::size_t>(i)] = element_at(t, p + i * t.size);
  return a;
}

// --- .npy ---

// A cursor over the header dict's text: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
struct DictText {
  std::string_view s;
  std::size_t i = 0;
  const std::string& file;

  [[noreturn]] void fail(const std::string& what) const {
    throw SpecError(file, "header", fmt::format("{} at character {} of the header dict", what, i + 1));
  }
  void skip_space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  bool take(char c) {
    skip_space();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(fmt::format("expected '{}'", c));
  }
  std::string quoted() {
    skip_space();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) fail("expected a quoted string");
    const char q = s[i++];
    const std::size_t end = s.find(q, i);
    if (end == std::string_view::npos) fail("a string without its closing quote");
    std::string out(s.substr(i, end - i));
    i = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {std::string_view("False"), false}})
      if (s.substr(i, word.size()) == word) {
        i += word.size();
        return value;
      }
    fail("expected True or False");
  }
  std::int64_t integer() {
    skip_space();
    std::int64_t v = 0;
    const std::size_t begin = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) fail("a dimension too large");
      v = v * 10 + (s[i++] - '0');
    }
    if (i == begin) fail("expected a dimension, a whole number");
    if (i < s.size() && s[i] == 'L') ++i;  // Python 2's long
    return v;
  }
  std::vector<std::int64_t> tuple() {
    expect('(');
    std::vector<std::int64_t> out;
    while (!take(')')) {
      if (out.size() == kMaxArrayRank) fail(fmt::format("more than {} dimensions", kMaxArrayRank));
      out.push_back(integer());
      if (!take(',')) {
        expect(')');
        break;
      }
    }
    return out;
  }
};

ElementType npy_type(const std::string& descr, const std::string& file) {
  if (descr.size() < 3) throw SpecError(file, "header", fmt::format("descr '{}' is not a NumPy element type", descr));
  const char order = descr[0], code = descr[1];
  int size = 0;
  for (std::size_t k = 2; k < descr.size(); ++k) {
    if (descr[k] < '0' || descr[k] > '9' || size > 8) {
      size = 0;
      break;
    }
    size = size * 10 + (descr[k] - '0');
  }
  const bool one_byte = size == 1;
  const bool byte_order_ok = order == '<' || order == '=' || (one_byte && order == '|');
  static const std::pair<std::string_view, const char*> kNames[] = {
      {"b1", "bool"},   {"i1", "int8"},  {"u1", "uint8"},  {"i2", "int16"},   {"u2", "uint16"}, {"i4", "int32"},
      {"u4", "uint32"}, {"i8", "int64"}, {"u8", "uint64"}, {"f4", "float32"}, {"f8", "float64"}};
  for (const auto& [suffix, name] : kNames) {
    if (descr.substr(1) != suffix) continue;
    if (order == '>' && !one_byte)
      throw SpecError(file, "header",
                      fmt::format("descr '{}' is big-endian: save the array as little-endian (a.astype('<{}'))", descr,
                                  descr.substr(1)));
    if (!byte_order_ok) break;
    const Kind kind = code == 'b'   ? Kind::kBool
                      : code == 'i' ? Kind::kSigned
                      : code == 'u' ? Kind::kUnsigned
                                    : Kind::kFloat;
    return {kind, size, false, name};
  }
  throw SpecError(file, "header",
                  fmt::format("descr '{}' is not an element type tensorctl reads (bool, int8 to int64, uint8 to "
                              "uint64, float32, float64)",
                              descr));
}

ArrayFile decode_npy(std::string_view bytes, const std::string& file) {
  if (bytes.size() < 10) throw SpecError(file, "header", "the file ends inside NumPy's 10-byte preamble");
  const int major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3)
    throw SpecError(file, "header",
                    fmt::format("NumPy format version {}.{} is not one tensorctl reads (1.0 to 3.0)", major, minor));
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) throw SpecError(file, "header", "the file ends inside the header's length");
  std::uint64_t header_len = 0;
  for (std::size_t k = 0; k < len_bytes; ++k)
    header_len |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[8 + k])) << (8 * k);
  const std::size_t start = 8 + len_bytes;
  if (header_len > bytes.size() - start)
    throw SpecError(file, "header",
                    fmt::format("the header claims {} bytes, the file has {} after its preamble", header_len,
                                bytes.size() - start));
  DictText d{bytes.substr(start, static_cast<std::size_t>(header_len)), 0, file};
  std::string descr;
  bool fortran = false, have_descr = false, have_order = false, have_shape = false;
  std::vector<std::int64_t> shape;
  d.expect('{');
  while (!d.take('}')) {
    const std::string key = d.quoted();
    d.expect(':');
    if (key == "descr" && !have_descr) {
      d.skip_space();
      if (d.i < d.s.size() && d.s[d.i] == '[')
        d.fail("descr is a list of fields: a structured array, which tensorctl does not read");
      descr = d.quoted();
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      fortran = d.boolean();
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      shape = d.tuple();
      have_shape = true;
    } else {
      d.fail(fmt::format("key '{}' is not one of a .npy header's (descr, fortran_order, shape) or comes twice", key));
    }
    if (!d.take(',')) {
      d.expect('}');
      break;
    }
  }
  d.skip_space();
  if (d.i != d.s.size()) d.fail("text after the header dict");
  if (!have_descr || !have_order || !have_shape) d.fail("the dict lacks one of descr, fortran_order and shape");
  if (fortran && shape.size() > 1)
    throw SpecError(file, "header",
                    "fortran_order is True (a column-major array): save np.ascontiguousarray(a) instead");
  return elements(bytes, start + static_cast<std::size_t>(header_len), std::move(shape), npy_type(descr, file), file);
}

// --- IDX ---

ArrayFile decode_idx(std::string_view bytes, const std::string& file) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
  ElementType t{Kind::kUnsigned, 1, true, "uint8"};
  switch (byte(2)) {
    case 0x08:
      break;
    case 0x09:
      t = {Kind::kSigned, 1, true, "int8"};
      break;
    case 0x0B:
      t = {Kind::kSigned, 2, true, "int16"};
      break;
    case 0x0C:
      t = {Kind::kSigned, 4, true, "int32"};
      break;
    case 0x0D:
      t = {Kind::kFloat, 4, true, "float32"};
      break;
    case 0x0E:
      t = {Kind::kFloat, 8, true, "float64"};
      break;
    default:
      throw SpecError(file, "header", fmt::format("IDX type byte 0x{:02X} is none of IDX's types", byte(2)));
  }
  const std::size_t rank = byte(3);
  if (rank == 0 || rank > kMaxArrayRank)
    throw SpecError(file, "header",
                    fmt::format("IDX rank {} is not one tensorctl reads (1 to {})", rank, kMaxArrayRank));
  const std::size_t start = 4 + 4 * rank;
  if (bytes.size() < start) throw SpecError(file, "header", "the file ends inside its dimensions");
  std::vector<std::int64_t> shape(rank);
  for (std::size_t k = 0; k < rank; ++k) {
    std::uint32_t v = 0;
    for (std::size_t b = 0; b < 4; ++b) v = v << 8 | byte(4 + 4 * k + b);
    shape[k] = v;
  }
  return elements(bytes, start, std::move(shape), t, file);
}

// The file at `path`, mapped read-only, unmapped when it goes.
// The array `key` of a .npz archive (np.savez, np.savez_compressed: a zip of KEY.npy members), or its only one
// when `key` is empty. Errors in the member name it: "data.npz (x_train.npy)".
ArrayFile decode_npz(std::string_view bytes, const std::string& file, const std::string& key) {
  const ZipArchive zip(bytes, file);
  std::vector<std::string> keys;
  for (const std::string& name : zip.names())
    if (name.ends_with(".npy")) keys.push_back(name.substr(0, name.size() - 4));
  std::string chosen = key;
  if (key.empty()) {
    if (keys.size() != 1)
      throw SpecError(file, "",
                      fmt::format("a .npz file of {} arrays ({}): name the one to read (x_key, y_key)", keys.size(),
                                  fmt::join(keys, ", ")));
    chosen = keys.front();
  } else if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    throw SpecError(file, "",
                    fmt::format("no array \"{}\" in this .npz file (it holds: {})", key, fmt::join(keys, ", ")));
  }
  const std::string member = chosen + ".npy";
  // The largest .npy member a reader could want: kMaxElements of eight bytes, and its header.
  const std::string npy = zip.read(member, static_cast<std::size_t>(kMaxElements) * 8 + (std::size_t{1} << 20));
  const std::string place = fmt::format("{} ({})", file, member);
  if (!npy.starts_with(std::string_view("\x93NUMPY", 6)))
    throw SpecError(place, "header", "a .npz member that is no .npy array");
  return decode_npy(npy, place);
}

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw SpecError(path, "", std::string("cannot open file: ") + std::strerror(errno));
    struct stat st {};
    const bool stat_ok = ::fstat(fd, &st) == 0;
    if (!stat_ok || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw SpecError(path, "", "not a regular file: an array is read through a memory map");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data_ == MAP_FAILED) {
        const int error = errno;
        ::close(fd);
        throw SpecError(path, "", std::string("cannot map file: ") + std::strerror(error));
      }
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_ != nullptr && data_ != MAP_FAILED) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {static_cast<const char*>(data_), data_ != nullptr ? size_ : 0}; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

std::string element_place(std::size_t i, std::int64_t width) {
  return fmt::format("element {} (row {})", i, static_cast<std::int64_t>(i) / std::max<std::int64_t>(width, 1));
}

// The elements per row of an array with rows (1 for a [N] array); a scalar is refused.
std::int64_t per_row(const ArrayFile& a, const std::string& path) {
  if (a.shape.empty()) throw SpecError(path, "header", "a scalar holds no rows: an array of data has a first axis");
  std::int64_t w = 1;
  for (std::size_t k = 1; k < a.shape.size(); ++k) w *= a.shape[k];
  return w;
}

}  // namespace

bool looks_like_array_file(std::string_view head) {
  return head.starts_with(std::string_view("\x93NUMPY", 6)) || looks_like_zip(head) ||
         (head.size() >= 4 && head[0] == 0 && head[1] == 0);
}

ArrayFile decode_array(std::string_view bytes, const std::string& file, const std::string& key) {
  if (looks_like_zip(bytes)) return decode_npz(bytes, file, key);
  if (!key.empty())
    throw SpecError(file, "",
                    fmt::format("an array named \"{}\" was asked for, but only a .npz file holds named "
                                "arrays",
                                key));
  if (bytes.substr(0, 6) == std::string_view("\x93NUMPY", 6)) return decode_npy(bytes, file);
  if (bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0) return decode_idx(bytes, file);
  throw SpecError(file, "header",
                  bytes.empty() ? std::string("the file is empty")
                                : "neither a NumPy .npy or .npz file nor an IDX file (by its first bytes)");
}

ArrayFile load_array(const std::string& path, const std::string& key) {
  const MappedFile file(path);
  return decode_array(file.bytes(), path, key);
}

Dataset load_array_dataset(const std::string& x_path, const std::string& y_path, bool classification,
                           const std::string& file_for_errors, const std::string& where, const std::string& x_key,
                           const std::string& y_key) {
  const ArrayFile x = load_array(x_path, x_key);
  const ArrayFile y = load_array(y_path, y_key);
  const std::int64_t width = per_row(x, x_path), targets = per_row(y, y_path);
  const std::int64_t n = x.shape[0];
  if (y.shape[0] != n)
    throw SpecError(file_for_errors, where,
                    fmt::format("x ({}) has {} rows, y ({}) has {}", x_path, n, y_path, y.shape[0]));
  if (n == 0) throw SpecError(x_path, "header", "the array has no rows");
  if (width == 0) throw SpecError(x_path, "header", "each row holds no element: there are no features");
  for (std::size_t i = 0; i < x.values.size(); ++i)
    if (!std::isfinite(x.values[i]))
      throw SpecError(x_path, element_place(i, width),
                      fmt::format("expected a finite number, got {}", static_cast<double>(x.values[i])));
  Dataset data;
  data.name = std::filesystem::path(x_path).stem().string();
  data.x = Tensor::from_floats(Shape{n, width}, x.values);
  for (std::int64_t f = 0; f < width; ++f) data.feature_names.push_back("x" + std::to_string(f));
  if (!classification) {
    for (std::size_t i = 0; i < y.values.size(); ++i)
      if (!std::isfinite(y.values[i]))
        throw SpecError(y_path, element_place(i, targets),
                        fmt::format("expected a finite number, got {}", static_cast<double>(y.values[i])));
    data.y = Tensor::from_floats(Shape{n, targets}, y.values);
    return data;
  }
  if (targets != 1)
    throw SpecError(
        y_path, "header",
        fmt::format("class labels are one per row ([N] or [N, 1]), got shape ({})", fmt::join(y.shape, ", ")));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  std::int32_t largest = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float v = y.values[i];
    if (!(v >= 0.0f && v < static_cast<float>(kMaxClasses) && v == std::floor(v)))
      throw SpecError(
          y_path, element_place(i, 1),
          fmt::format("class labels must be integers in 0..{}, got {}", kMaxClasses - 1, static_cast<double>(v)));
    labels[i] = static_cast<std::int32_t>(v);
    largest = std::max(largest, labels[i]);
  }
  data.y = Tensor::from_ints(Shape{n}, labels);
  data.num_classes = largest + 1;
  return data;
}

}  // namespace tctl
