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
// Named, not anonymous: ArrayRows::Impl holds its types, which a unity build (scripts/test.sh's sanitizer
// passes) would otherwise warn of (-Wsubobject-linkage).
namespace arrays_detail {

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

// Where an array's elements lie in its file's bytes, once the header is read and the size checked.
struct ArrayLayout {
  std::vector<std::int64_t> shape;
  ElementType type;
  std::size_t start = 0;  // the first element's byte
  std::int64_t count = 0;
};

// The elements after the header: exactly the bytes the shape and type declare.
ArrayLayout checked_layout(std::string_view bytes, std::size_t start, std::vector<std::int64_t> shape,
                           const ElementType& t, const std::string& file) {
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
  return {std::move(shape), t, start, n};
}

// Elements [first, first + n) of the array laid out in `bytes` as float32, into `out`.
void convert(std::string_view bytes, const ArrayLayout& a, std::int64_t first, std::int64_t n, float* out) {
  if (n == 0) return;  // `out` and the bytes may be null then, which memcpy may not be given
  const ElementType& t = a.type;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + a.start) + first * t.size;
  // The types data comes in most (MNIST's bytes, NumPy's float32) without a switch per element.
  if (t.kind == Kind::kFloat && t.size == 4 && !t.big_endian) {
    std::memcpy(out, p, static_cast<std::size_t>(n) * sizeof(float));
  } else if (t.kind == Kind::kUnsigned && t.size == 1) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = element_at(t, p + i * t.size);
  }
}

ArrayFile array_file(std::string_view bytes, const ArrayLayout& a) {
  ArrayFile out;
  out.shape = a.shape;
  out.integral = a.type.kind != Kind::kFloat;
  out.type = a.type.name;
  out.values.resize(static_cast<std::size_t>(a.count));
  convert(bytes, a, 0, a.count, out.values.data());
  return out;
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

ArrayLayout npy_layout(std::string_view bytes, const std::string& file) {
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
  return checked_layout(bytes, start + static_cast<std::size_t>(header_len), std::move(shape), npy_type(descr, file),
                        file);
}

// --- IDX ---

ArrayLayout idx_layout(std::string_view bytes, const std::string& file) {
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
  return checked_layout(bytes, start, std::move(shape), t, file);
}

// The array `key` of a .npz archive (np.savez, np.savez_compressed: a zip of KEY.npy members), or its only one
// when `key` is empty, uncompressed into `member`. Errors in the member name it: "data.npz (x_train.npy)", the
// name `place` is set to.
ArrayLayout npz_layout(std::string_view bytes, const std::string& file, const std::string& key, std::string& member,
                       std::string& place) {
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
  const std::string name = chosen + ".npy";
  // The largest .npy member a reader could want: kMaxElements of eight bytes, and its header.
  member = zip.read(name, static_cast<std::size_t>(kMaxElements) * 8 + (std::size_t{1} << 20));
  place = fmt::format("{} ({})", file, name);
  if (!member.starts_with(std::string_view("\x93NUMPY", 6)))
    throw SpecError(place, "header", "a .npz member that is no .npy array");
  return npy_layout(member, place);
}

// The file at `path`, mapped read-only, unmapped when it goes.

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

// The elements per row of an array of `shape` with rows (1 for a [N] array); a scalar is refused.
std::int64_t per_row(const std::vector<std::int64_t>& shape, const std::string& path) {
  if (shape.empty()) throw SpecError(path, "header", "a scalar holds no rows: an array of data has a first axis");
  std::int64_t w = 1;
  for (std::size_t k = 1; k < shape.size(); ++k) w *= shape[k];
  return w;
}

// The array in `bytes` (a whole .npy, .npz or IDX file), told by its first bytes: its layout, in `bytes` or in
// `member` (a .npz member uncompressed), and `place`, the name its errors give.
ArrayLayout locate(std::string_view& bytes, const std::string& file, const std::string& key, std::string& member,
                   std::string& place) {
  place = file;
  if (looks_like_zip(bytes)) {
    ArrayLayout a = npz_layout(bytes, file, key, member, place);
    bytes = member;
    return a;
  }
  if (!key.empty())
    throw SpecError(file, "",
                    fmt::format("an array named \"{}\" was asked for, but only a .npz file holds named "
                                "arrays",
                                key));
  if (bytes.substr(0, 6) == std::string_view("\x93NUMPY", 6)) return npy_layout(bytes, file);
  if (bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0) return idx_layout(bytes, file);
  throw SpecError(file, "header",
                  bytes.empty() ? std::string("the file is empty")
                                : "neither a NumPy .npy or .npz file nor an IDX file (by its first bytes)");
}

// Refuses a value of `x` (elements [first, first + n) of an array `width` wide) that is not finite.
void check_finite(const float* x, std::int64_t first, std::int64_t n, std::int64_t width, const std::string& path) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      throw SpecError(path, element_place(static_cast<std::size_t>(first + i), width),
                      fmt::format("expected a finite number, got {}", static_cast<double>(x[i])));
}

// A data set's features and labels as two arrays: checked against each other, and y made labels or targets.
// x's values are read by the caller.
struct ArrayPair {
  const ArrayRows& x;
  std::int64_t width = 0;
  ArrayFile y;
  std::int64_t targets = 0;

  ArrayPair(const ArrayRows& x_rows, const std::string& x_path, const std::string& y_path, const std::string& y_key,
            const std::string& file_for_errors, const std::string& where)
      : x(x_rows), width(per_row(x.shape(), x_path)), y(load_array(y_path, y_key)), targets(per_row(y.shape, y_path)) {
    const std::int64_t n = x.shape()[0];
    if (y.shape[0] != n)
      throw SpecError(file_for_errors, where,
                      fmt::format("x ({}) has {} rows, y ({}) has {}", x_path, n, y_path, y.shape[0]));
    if (n == 0) throw SpecError(x_path, "header", "the array has no rows");
    if (width == 0) throw SpecError(x_path, "header", "each row holds no element: there are no features");
  }

  // Everything of the data set but x: name, feature names and labels.
  void set_meta(Dataset& data, const std::string& x_path, const std::string& y_path, bool classification) const {
    const std::int64_t n = x.shape()[0];
    data.name = std::filesystem::path(x_path).stem().string();
    for (std::int64_t f = 0; f < width; ++f) data.feature_names.push_back("x" + std::to_string(f));
    if (!classification) {
      for (std::size_t i = 0; i < y.values.size(); ++i)
        if (!std::isfinite(y.values[i]))
          throw SpecError(y_path, element_place(i, targets),
                          fmt::format("expected a finite number, got {}", static_cast<double>(y.values[i])));
      data.y = Tensor::from_floats(Shape{n, targets}, y.values);
      return;
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
  }
};

}  // namespace arrays_detail

using namespace arrays_detail;

struct ArrayRows::Impl {
  MappedFile map;
  std::string member;
  std::string_view bytes;
  ArrayLayout layout;
  std::string place;
  explicit Impl(const std::string& path) : map(path), bytes(map.bytes()) {}
};

ArrayRows::ArrayRows(const std::string& path, const std::string& key) : impl_(std::make_unique<Impl>(path)) {
  impl_->layout = locate(impl_->bytes, path, key, impl_->member, impl_->place);
  // Read once, front to back (a streamed run's first pass, or the whole array into memory).
  if (impl_->member.empty() && !impl_->bytes.empty())
    (void)::madvise(const_cast<char*>(impl_->bytes.data()), impl_->bytes.size(), MADV_SEQUENTIAL);
}

ArrayRows::~ArrayRows() = default;

const std::vector<std::int64_t>& ArrayRows::shape() const { return impl_->layout.shape; }

void ArrayRows::read_elements(std::int64_t first, std::int64_t n, float* out) const {
  TCTL_CHECK(first >= 0 && n >= 0 && first + n <= impl_->layout.count,
             "ArrayRows::read_elements: elements out of range");
  convert(impl_->bytes, impl_->layout, first, n, out);
}

bool looks_like_array_file(std::string_view head) {
  return head.starts_with(std::string_view("\x93NUMPY", 6)) || looks_like_zip(head) ||
         (head.size() >= 4 && head[0] == 0 && head[1] == 0);
}

ArrayFile decode_array(std::string_view bytes, const std::string& file, const std::string& key) {
  std::string member, place;
  const ArrayLayout a = locate(bytes, file, key, member, place);
  return array_file(bytes, a);
}

ArrayFile load_array(const std::string& path, const std::string& key) {
  const MappedFile file(path);
  return decode_array(file.bytes(), path, key);
}

Dataset load_array_dataset(const std::string& x_path, const std::string& y_path, bool classification,
                           const std::string& file_for_errors, const std::string& where, const std::string& x_key,
                           const std::string& y_key) {
  const ArrayRows x(x_path, x_key);
  const ArrayPair pair(x, x_path, y_path, y_key, file_for_errors, where);
  const std::int64_t n = x.shape()[0];
  Dataset data;
  // Converted once, straight into the features' tensor.
  data.x = Tensor::empty(DType::kF32, Shape{n, pair.width});
  x.read_elements(0, n * pair.width, data.x.mutable_data<float>());
  check_finite(data.x.data<float>(), 0, n * pair.width, pair.width, x_path);
  pair.set_meta(data, x_path, y_path, classification);
  return data;
}

RowCache::Source array_rows_source(const std::string& x_path, const std::string& y_path, bool classification,
                                   const std::string& file_for_errors, const std::string& where,
                                   const std::string& x_key, const std::string& y_key) {
  std::string identity;
  const std::string x_file = RowCache::file_identity(x_path), y_file = RowCache::file_identity(y_path);
  if (!x_file.empty() && !y_file.empty())
    identity = fmt::format("arrays\n{}{}\n{}{}\n{}\n", x_file, x_key, y_file, y_key, classification);
  return {.stem = std::filesystem::path(x_path).stem().string(),
          .identity = std::move(identity),
          .write = [=](RowCache::RowSink& sink, Dataset& meta) {
            const ArrayRows x(x_path, x_key);
            const ArrayPair pair(x, x_path, y_path, y_key, file_for_errors, where);
            for (std::int64_t f = 0; f < pair.width; ++f) meta.feature_names.push_back("x" + std::to_string(f));
            // 8 MiB of rows at a time (at least one): the memory a streamed run holds while it writes the cache.
            const std::int64_t n = x.shape()[0];
            const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{8} << 20) / 4 / pair.width);
            std::vector<float> rows(static_cast<std::size_t>(std::min(block, n) * pair.width));
            for (std::int64_t first = 0; first < n; first += block) {
              const std::int64_t count = std::min(block, n - first);
              x.read_elements(first * pair.width, count * pair.width, rows.data());
              check_finite(rows.data(), first * pair.width, count * pair.width, pair.width, x_path);
              sink.add(rows.data(), count);
            }
            meta.feature_names.clear();
            pair.set_meta(meta, x_path, y_path, classification);
          }};
}

}  // namespace tctl
