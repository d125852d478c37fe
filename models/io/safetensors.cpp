#include "models/io/safetensors.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/errors.h"
#include "models/io/atomic_file.h"

namespace tctl {

namespace {

// A std::map-backed object: parsing stays O(n log n) in the number of keys (ordered_json looks keys up
// linearly, quadratic for a hostile 100 MB header). Entries are sorted by offset afterwards anyway.
using nlohmann::json;

// The reference reader's limit (MAX_HEADER_SIZE in the Rust crate); a larger N is a corrupt or hostile file.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests object > entry > shape array; anything deeper is refused while parsing, so that a
// header of 100 MB of '[' cannot make the parser allocate gigabytes.
constexpr int kMaxHeaderDepth = 3;

// Format dtypes we do not hold in a Tensor; named so the refusal can say "not supported" rather than "unknown".
constexpr std::string_view kUnsupportedDtypes[] = {"F64",     "F16",     "BF16",    "I16",     "I8",  "U8",
                                                   "BOOL",    "U16",     "U32",     "U64",     "C64", "F8_E4M3",
                                                   "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4"};

// Files are little-endian; on a big-endian host each element is reversed in place (both directions).
void swap_to_little_endian(char* data, std::size_t bytes, std::size_t element_size) {
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i + element_size <= bytes; i += element_size)
      std::reverse(data + i, data + i + element_size);
  }
}

// A JSON value for messages, cut to 60 characters.
std::string brief(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 60 ? text : text.substr(0, 60) + "...";
}

std::string tensor_where(const std::string& name) { return "tensor " + quote_for_message(name); }

// "[begin,end]": valid JSON for the writer, and short in messages.
std::string offsets_string(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + "," + std::to_string(end) + "]";
}

// Up to eight names, for "the file has: ..." hints.
template <class Names>
std::string name_list(const Names& names) {
  std::string out;
  std::size_t shown = 0;
  for (const auto& name : names) {
    if (shown == 8) return out + ", ... (" + std::to_string(names.size()) + " in all)";
    if (shown++) out += ", ";
    out += quote_for_message(name);
  }
  return out.empty() ? "nothing" : out;
}

std::optional<DType> parse_dtype(const std::string& name) {
  for (DType t : {DType::kF32, DType::kI32, DType::kI64})
    if (dtype_safetensors_name(t) == name) return t;
  return std::nullopt;
}

// One validated header entry, before its bytes are copied.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;
  std::uint64_t end;
};

class HeaderReader {
 public:
  HeaderReader(const std::string& file, std::uint64_t buffer_bytes) : file_(file), buffer_bytes_(buffer_bytes) {}

  Entry read_entry(const std::string& name, const json& value) const {
    const std::string where = tensor_where(name);
    if (!value.is_object()) fail(where, "entry must be an object, got " + std::string(value.type_name()));
    Entry e{.name = name, .dtype = read_dtype(where, member(where, value, "dtype")), .shape = {}, .begin = 0, .end = 0};

    const json& shape = member(where, value, "shape");
    if (!shape.is_array()) fail(where, "\"shape\" must be an array, got " + std::string(shape.type_name()));
    if (shape.size() > static_cast<std::size_t>(Shape::kMaxRank))
      fail(where,
           "rank " + std::to_string(shape.size()) + " is above the supported " + std::to_string(Shape::kMaxRank));
    std::vector<std::int64_t> dims;
    for (const json& d : shape) {
      std::uint64_t dim = read_count(where, "\"shape\"", d);
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(where, "dimension " + std::to_string(dim) + " is too large");
      dims.push_back(static_cast<std::int64_t>(dim));
    }
    e.shape = Shape(std::span<const std::int64_t>(dims));

    const json& offsets = member(where, value, "data_offsets");
    if (!offsets.is_array() || offsets.size() != 2)
      fail(where, "\"data_offsets\" must be an array [begin, end], got " + brief(offsets));
    e.begin = read_count(where, "\"data_offsets\"", offsets[0]);
    e.end = read_count(where, "\"data_offsets\"", offsets[1]);
    const std::string range = offsets_string(e.begin, e.end);
    if (e.end < e.begin) fail(where, "data_offsets " + range + " end before they begin");
    if (e.end > buffer_bytes_)
      fail(where, "data_offsets " + range + " run past the data buffer (" + std::to_string(buffer_bytes_) + " bytes)");

    // Overflow-checked size, multiplied left to right as the reference reader (checked_mul) and
    // Shape::num_elements do: no prefix product may overflow, so [0, 2^40, 2^40] is an empty tensor while
    // [2^40, 2^40, 0] is refused, and Shape::num_elements is safe on every shape we accept.
    std::uint64_t elements = 1;
    for (std::int64_t d : dims) {
      if (d != 0 && elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / d))
        fail(where, "shape " + e.shape.to_string() + " is too large: its element count overflows");
      elements *= static_cast<std::uint64_t>(d);
    }
    if (elements > std::numeric_limits<std::uint64_t>::max() / dtype_size(e.dtype))
      fail(where, "shape " + e.shape.to_string() + " is too large: its byte size overflows");
    const std::uint64_t needed = elements * dtype_size(e.dtype);
    if (e.end - e.begin != needed)
      fail(where, "data_offsets " + range + " span " + std::to_string(e.end - e.begin) + " bytes, but " +
                      std::string(dtype_name(e.dtype)) + " " + e.shape.to_string() + " needs " +
                      std::to_string(needed));
    return e;
  }

  std::map<std::string, std::string> read_metadata(const json& value) const {
    if (!value.is_object())
      fail("header", "\"__metadata__\" must be an object of strings, got " + std::string(value.type_name()));
    std::map<std::string, std::string> out;
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string())
        fail("header", "\"__metadata__\" value for " + quote_for_message(key) + " must be a string, got " +
                           std::string(v.type_name()));
      out[key] = v.get<std::string>();
    }
    return out;
  }

  [[noreturn]] void fail(const std::string& where, const std::string& message) const {
    throw SpecError(file_, where, message);
  }

 private:
  const json& member(const std::string& where, const json& entry, const char* key) const {
    auto it = entry.find(key);
    if (it == entry.end()) fail(where, std::string("missing \"") + key + "\"");
    return *it;
  }

  DType read_dtype(const std::string& where, const json& value) const {
    if (!value.is_string()) fail(where, "\"dtype\" must be a string, got " + std::string(value.type_name()));
    const std::string name = value.get<std::string>();
    if (auto t = parse_dtype(name)) return *t;
    if (std::find(std::begin(kUnsupportedDtypes), std::end(kUnsupportedDtypes), name) != std::end(kUnsupportedDtypes))
      fail(where, "dtype " + quote_for_message(name) + " is not supported (tensorctl reads F32, I32 and I64)");
    fail(where, "unknown dtype " + quote_for_message(name) +
                    " (known: F32, I32, I64, F64, F16, BF16, I16, I8, U8, BOOL, ...)");
  }

  // A non-negative JSON integer. nlohmann stores non-negative literals as unsigned and negative ones as signed;
  // 3.0 or 1e3 are floats and refused, as the reference reader refuses them.
  std::uint64_t read_count(const std::string& where, const char* what, const json& v) const {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer()) fail(where, std::string(what) + " holds a negative value " + brief(v));
    fail(where, std::string(what) + " must hold non-negative integers, got " + brief(v));
  }

  const std::string& file_;
  std::uint64_t buffer_bytes_;
};

json parse_header(std::string_view text, const std::string& file) {
  // Also refuses a key repeated in one object: nlohmann keeps the last, so a tensor named twice would load one of
  // two values silently.
  std::vector<std::set<std::string>> keys;  // of each object open now, innermost last
  json::parser_callback_t limit_depth = [&file, &keys](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxHeaderDepth)
      throw SpecError(file, "header", "JSON nests deeper than a safetensors header can");
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      throw SpecError(file, "header", "the key " + quote_for_message(parsed.get<std::string>()) + " appears twice");
    return true;
  };
  // nlohmann stops at a NUL byte as if the input ended there, so "{}\0garbage" would pass. JSON allows no raw
  // NUL anywhere, inside strings included.
  if (auto nul = text.find('\0'); nul != std::string_view::npos)
    throw SpecError(file, "header", "invalid JSON: NUL byte at header offset " + std::to_string(nul));
  try {
    return json::parse(text.begin(), text.end(), limit_depth);
  } catch (const nlohmann::json::exception& e) {
    // A syntax error is a parse_error, a number beyond a double's range ("1e400") an out_of_range.
    // nlohmann's text starts "[json.exception.parse_error.101] parse error at line 1, column 5: ..." and quotes
    // the bytes it last read, which may be newlines or broken UTF-8: keep the error one printable line.
    std::string message = e.what();
    if (auto pos = message.find("] "); pos != std::string::npos) message = message.substr(pos + 2);
    for (char& c : message)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    throw SpecError(file, "header", "invalid JSON: " + message);
  }
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const NamedTensor& t : tensors)
    if (t.name == name) return &t.value;
  return nullptr;
}

std::string encode_safetensors(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  // The header is written by hand, "__metadata__" first and then the tensors in the order given, like the
  // reference writer, so the header reads in the same order as the data.
  std::string text = "{";
  if (!metadata.empty()) text += "\"__metadata__\":" + json(metadata).dump();
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    TCTL_CHECK(t.value.defined(), "tensor \"" + t.name + "\" is undefined");
    TCTL_CHECK(t.name != "__metadata__" && seen.insert(t.name).second, "duplicate tensor name \"" + t.name + "\"");
    const std::uint64_t bytes = t.value.bytes();
    const auto dims = t.value.shape().dims();
    if (text.size() > 1) text += ",";
    text += json(t.name).dump() + ":{\"dtype\":\"" + std::string(dtype_safetensors_name(t.value.dtype())) +
            "\",\"shape\":" + json(std::vector<std::int64_t>(dims.begin(), dims.end())).dump() +
            ",\"data_offsets\":" + offsets_string(offset, offset + bytes) + "}";
    offset += bytes;
  }
  text += "}";
  // Spaces after the JSON are valid JSON whitespace and make the buffer start 8-byte aligned, so a reader
  // that maps the file can view F32/I64 data in place.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff));
  out += text;
  for (const NamedTensor& t : tensors) {
    const std::size_t at = out.size();
    // A weight on another device comes to the host first (after the work queued on it).
    const Tensor host = t.value.to(cpu_device());
    out.append(static_cast<const char*>(host.raw_data()), host.bytes());
    swap_to_little_endian(out.data() + at, t.value.bytes(), dtype_size(t.value.dtype()));
  }
  return out;
}

void save_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode_safetensors(tensors, metadata));
}

namespace {

// decode_safetensors, given the header already parsed when load_safetensors has read it first.
SafetensorsFile decode(std::string_view bytes, const std::string& file_for_errors, const json* parsed_header) {
  if (bytes.size() < 8)
    throw SpecError(file_for_errors, "header",
                    "file is " + std::to_string(bytes.size()) + " bytes, too short for a safetensors header");
  std::uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i)
    header_bytes |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (header_bytes > kMaxHeaderBytes)
    throw SpecError(file_for_errors, "header",
                    "header length " + std::to_string(header_bytes) + " is above the 100 MB limit (corrupt file?)");
  if (header_bytes > bytes.size() - 8)
    throw SpecError(file_for_errors, "header",
                    "header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                        std::to_string(bytes.size()) + " bytes)");
  const std::string_view data = bytes.substr(8 + header_bytes);

  json parsed_here;
  const json& header = parsed_header != nullptr
                           ? *parsed_header
                           : (parsed_here = parse_header(bytes.substr(8, header_bytes), file_for_errors));
  if (!header.is_object())
    throw SpecError(file_for_errors, "header", "must be a JSON object, got " + std::string(header.type_name()));

  HeaderReader reader(file_for_errors, data.size());
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = reader.read_metadata(value);
      continue;
    }
    entries.push_back(reader.read_entry(name, value));
  }

  // Stable, so empty tensors sharing an offset stay in name order.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      reader.fail(tensor_where(e.name), "data_offsets " + offsets_string(e.begin, e.end) + " overlap tensor " +
                                            quote_for_message(previous->name) + " at " +
                                            offsets_string(previous->begin, previous->end));
    if (e.begin > covered)
      reader.fail(tensor_where(e.name), "data_offsets " + offsets_string(e.begin, e.end) + " leave bytes " +
                                            offsets_string(covered, e.begin) + " of the data buffer unused");
    covered = e.end;
    previous = &e;
  }
  if (covered != data.size())
    reader.fail("header", "tensors cover " + std::to_string(covered) + " bytes of a " + std::to_string(data.size()) +
                              "-byte data buffer");

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.dtype, e.shape);
    if (e.end > e.begin) std::memcpy(t.mutable_data<char>(), data.data() + e.begin, e.end - e.begin);
    swap_to_little_endian(t.mutable_data<char>(), t.bytes(), dtype_size(e.dtype));
    out.tensors.push_back({e.name, std::move(t)});
  }
  return out;
}

// The data bytes a parsed header accounts for: the largest end among its entries' data_offsets, or nothing when
// an entry's offsets are malformed (decode_safetensors then names the entry, from the header alone).
std::optional<std::uint64_t> declared_data_bytes(const json& header) {
  std::uint64_t end = 0;
  if (!header.is_object()) return std::nullopt;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("data_offsets")) return std::nullopt;
    const json& offsets = entry.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[1].is_number_unsigned()) return std::nullopt;
    end = std::max(end, offsets[1].get<std::uint64_t>());
  }
  return end;
}

}  // namespace

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& file_for_errors) {
  return decode(bytes, file_for_errors, nullptr);
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  const std::string name = path.string();
  // Only the bytes the header accounts for are read: a file padded to gigabytes, or a device that never ends,
  // is refused from its first bytes rather than read into memory whole.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rbe"), &std::fclose);
  if (!file) throw SpecError(name, "", std::string("cannot open file: ") + std::strerror(errno));
  std::string bytes;
  // Appends up to n more bytes; false when the file ends first.
  auto read_up_to = [&](std::uint64_t n) {
    char chunk[1 << 16];
    while (n > 0) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof chunk));
      const std::size_t got = std::fread(chunk, 1, want, file.get());
      bytes.append(chunk, got);
      n -= got;
      if (got == want) continue;
      // A directory opens fine on Linux and fails here with EISDIR.
      if (std::ferror(file.get())) throw SpecError(name, "", std::string("cannot read file: ") + std::strerror(errno));
      return false;
    }
    return true;
  };
  std::optional<json> header;
  if (read_up_to(8)) {
    std::uint64_t header_bytes = 0;
    for (int i = 0; i < 8; ++i)
      header_bytes |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]))
                      << (8 * i);
    if (header_bytes <= kMaxHeaderBytes && read_up_to(header_bytes)) {
      // The header's own errors first (not JSON, nested too deep, a key twice), with parse_header's limits.
      header = parse_header(std::string_view(bytes).substr(8), name);
      const std::optional<std::uint64_t> data = declared_data_bytes(*header);
      struct stat st {};
      if (data && ::fstat(::fileno(file.get()), &st) == 0 && S_ISREG(st.st_mode) &&
          *data > static_cast<std::uint64_t>(st.st_size) - bytes.size())
        throw SpecError(name, "header",
                        fmt::format("the tensors need {} bytes of data, the file has {} after its header", *data,
                                    static_cast<std::uint64_t>(st.st_size) - bytes.size()));
      try {
        if (data && read_up_to(*data) && read_up_to(1))
          throw SpecError(name, "header",
                          fmt::format("the file runs on past the {} bytes its header accounts for", bytes.size() - 1));
      } catch (const std::bad_alloc&) {
        // A device or pipe whose header claims more than memory holds.
        throw RuntimeError(name + ": too large to read into memory (" + std::to_string(bytes.size()) + " bytes read)");
      }
    }
  }
  return decode(bytes, name, header ? &*header : nullptr);
}

void check_against(const SafetensorsFile& file, const std::vector<NamedTensor>& expected,
                   const std::string& file_for_errors) {
  std::vector<std::string> file_names;
  for (const NamedTensor& t : file.tensors) file_names.push_back(t.name);
  std::set<std::string> expected_names;
  for (const NamedTensor& want : expected) {
    expected_names.insert(want.name);
    const std::string where = tensor_where(want.name);
    const std::string want_desc = std::string(dtype_name(want.value.dtype())) + " " + want.value.shape().to_string();
    const Tensor* got = file.find(want.name);
    if (got == nullptr)
      throw SpecError(
          file_for_errors, where,
          "missing from the file; the model expects " + want_desc + " (the file has " + name_list(file_names) + ")");
    if (got->dtype() != want.value.dtype() || !(got->shape() == want.value.shape()))
      throw SpecError(file_for_errors, where,
                      "the file holds " + std::string(dtype_name(got->dtype())) + " " + got->shape().to_string() +
                          ", the model expects " + want_desc);
  }
  for (const NamedTensor& t : file.tensors)
    if (!expected_names.contains(t.name))
      throw SpecError(file_for_errors, tensor_where(t.name),
                      "not a weight of this model (the model has " + name_list(expected_names) + ")");
}

std::vector<NamedTensor> variable_values(const std::vector<std::shared_ptr<Variable>>& vars) {
  std::vector<NamedTensor> out;
  out.reserve(vars.size());
  for (const auto& v : vars) out.push_back({v->name(), v->read()});
  return out;
}

void assign_from(const SafetensorsFile& file, const std::vector<std::shared_ptr<Variable>>& vars) {
  for (const auto& v : vars) v->assign(*file.find(v->name()));
}

}  // namespace tctl
