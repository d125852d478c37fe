#include "models/io/safetensors.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/errors.h"
#include "models/test_files.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

namespace fs = std::filesystem;
using testing::catch_spec_error;
using testing::check_spec_error;

const std::string kFile = "run/weights.safetensors";

std::string u64_le(std::uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

// A file with this exact header text and data buffer (no padding), for the refusal cases.
std::string make_file(const std::string& header, const std::string& data = "") {
  return u64_le(header.size()) + header + data;
}

std::uint64_t header_length(const std::string& bytes) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return n;
}

Tensor i64_tensor(const Shape& shape, std::initializer_list<std::int64_t> values) {
  Tensor t = Tensor::empty(DType::kI64, shape);
  std::int64_t* p = t.mutable_data<std::int64_t>();
  for (std::int64_t v : values) *p++ = v;
  return t;
}

bool same_tensor_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.bytes() == b.bytes() &&
         (a.bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0);
}

// Decoding `bytes` must throw SpecError at `where` with `message_part` in its message.
void expect_refused(const std::string& bytes, const std::string& where, const std::string& message_part) {
  check_spec_error([&] { decode_safetensors(bytes, kFile); }, kFile, where, {message_part});
}

using testing::TempDir;

std::vector<NamedTensor> sample_tensors() {
  const float w[] = {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 7.75f};
  const std::int32_t labels[] = {1, -2, 2147483647};
  return {
      {"dense/kernel", Tensor::from_floats({2, 3}, w)},
      {"dense/bias", Tensor::from_floats({1}, std::span<const float>(w, 1))},
      {"labels", Tensor::from_ints({3}, labels)},
      {"step", Tensor::scalar(42.0f)},
      {"count", i64_tensor({}, {-9000000000LL})},
      {"empty", Tensor::zeros(DType::kF32, {0, 3})},
      {"ids", i64_tensor({2}, {1LL << 40, -1})},
  };
}

void check_round_trip(const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  const std::string bytes = encode_safetensors(tensors, metadata);
  const SafetensorsFile file = decode_safetensors(bytes, kFile);
  REQUIRE(file.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO("tensor " << tensors[i].name);
    CHECK(file.tensors[i].name == tensors[i].name);  // same order as written
    CHECK(same_tensor_bytes(file.tensors[i].value, tensors[i].value));
    CHECK(file.tensors[i].value.shares_buffer_with(tensors[i].value) == false);
  }
  CHECK(file.metadata == metadata);
}

TEST_CASE("safetensors round trip: F32, I32, I64, scalars, empty tensors") {
  check_round_trip(sample_tensors(), {});
  check_round_trip(sample_tensors(), {{"format", "pt"}, {"tensorctl.spec", "{\"layers\": [\"é\", \"\\n\"]}"}});
  check_round_trip({}, {});
  check_round_trip({}, {{"only", "metadata"}});
}

TEST_CASE("safetensors round trip keeps exact values") {
  const SafetensorsFile file = decode_safetensors(encode_safetensors(sample_tensors(), {}), kFile);
  CHECK(file.find("labels")->data<std::int32_t>()[2] == 2147483647);
  CHECK(file.find("count")->data<std::int64_t>()[0] == -9000000000LL);
  CHECK(file.find("count")->shape() == Shape{});
  CHECK(file.find("step")->item() == 42.0f);
  CHECK(file.find("dense/kernel")->data<float>()[3] == 1e-30f);
  CHECK(std::signbit(file.find("dense/kernel")->data<float>()[4]));
  CHECK(file.find("empty")->shape() == Shape{0, 3});
  CHECK(file.find("missing") == nullptr);
}

TEST_CASE("safetensors data starts 8-byte aligned for every header length") {
  for (std::size_t name_length = 0; name_length < 24; ++name_length) {
    const float v[] = {1.0f};
    const std::string bytes = encode_safetensors({{std::string(name_length, 'n'), Tensor::from_floats({1}, v)}}, {});
    const std::uint64_t n = header_length(bytes);
    INFO("name length " << name_length);
    CHECK((8 + n) % 8 == 0);
    CHECK(bytes.size() == 8 + n + 4);
    CHECK(bytes[8] == '{');
  }
}

TEST_CASE("safetensors golden bytes for a tiny F32 tensor") {
  const float v[] = {1.0f, -2.0f};
  const std::string bytes = encode_safetensors({{"a", Tensor::from_floats({2}, v)}}, {});
  // 54 bytes of JSON + 2 spaces = 56 = 0x38; 8 + 56 = 64 is a multiple of 8.
  // 1.0f = 0x3F800000 and -2.0f = 0xC0000000, stored little-endian.
  const std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) +
                               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + "  " +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  CHECK(bytes == expected);
}

TEST_CASE("safetensors golden bytes with metadata and an I32 scalar") {
  const std::int32_t v[] = {7};
  const std::string bytes = encode_safetensors({{"b", Tensor::from_ints({}, v)}}, {{"k", "v"}});
  // 78 bytes of JSON + 2 spaces = 80 = 0x50.
  const std::string expected = std::string("\x50\0\0\0\0\0\0\0", 8) +
                               R"({"__metadata__":{"k":"v"},"b":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})" +
                               "  " + std::string("\x07\0\0\0", 4);
  CHECK(bytes == expected);
}

TEST_CASE("decode accepts a hand-written file in another order, without padding") {
  // Header order differs from data order; the tensors come back in data order.
  const std::string bytes = make_file(
      R"({"y":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"x":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("z":{"dtype":"F32","shape":[0],"data_offsets":[8,8],"extra":"ignored"}})",
      std::string("\x00\x00\x80\x3f\x05\x00\x00\x00", 8));
  const SafetensorsFile file = decode_safetensors(bytes, kFile);
  REQUIRE(file.tensors.size() == 3);
  CHECK(file.tensors[0].name == "x");
  CHECK(file.tensors[0].value.item() == 1.0f);
  CHECK(file.tensors[1].name == "y");
  CHECK(file.tensors[1].value.data<std::int32_t>()[0] == 5);
  CHECK(file.tensors[2].name == "z");
  CHECK(file.metadata.empty());
}

TEST_CASE("save_safetensors and load_safetensors go through a file") {
  TempDir dir;
  const fs::path path = dir.path / "model.safetensors";
  save_safetensors(path, sample_tensors(), {{"epoch", "3"}});
  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.tensors.size() == sample_tensors().size());
  CHECK(file.metadata.at("epoch") == "3");
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
  const SpecError e = catch_spec_error([&] { load_safetensors(dir.path / "absent.safetensors"); });
  CHECK(e.file() == (dir.path / "absent.safetensors").string());
  CHECK(e.message().find("cannot open file") == 0);
}

TEST_CASE("load_safetensors reads only what the header accounts for: a padded file or a device is refused early") {
  TempDir dir;
  const fs::path path = dir.path / "w.safetensors";
  save_safetensors(path, sample_tensors());
  const auto size = fs::file_size(path);
  auto message = [&](const fs::path& p) {
    try {
      load_safetensors(p);
    } catch (const SpecError& e) {
      CHECK(e.file() == p.string());
      return e.message();
    }
    return std::string("loaded");
  };
  // Sparse: 3 GB on paper, nothing on disk; read whole, it would take 3 GB of memory.
  fs::resize_file(path, std::uintmax_t{3} << 30);
  CHECK(message(path) == "the file runs on past the " + std::to_string(size) + " bytes its header accounts for");
  fs::resize_file(path, size);
  CHECK(message(path) == "loaded");
  // Offsets far beyond the file are refused from the header, before any data is read.
  const std::string big =
      make_file(R"({"w": {"dtype": "F32", "shape": [250000000000], "data_offsets": [0, 1000000000000]}})");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(big.data(), 1, big.size(), f);
  std::fclose(f);
  CHECK(message(path) == "the tensors need 1000000000000 bytes of data, the file has 0 after its header");
  // Its header length reads 0: an empty header, refused before the zeros after it are read.
  CHECK(message("/dev/zero").find("invalid JSON") != std::string::npos);
  // A header nested a million deep is refused by parse_header's limit before anything is built from it.
  f = std::fopen(path.c_str(), "wb");
  const std::string deep = make_file(std::string(1'000'000, '['), "data");
  std::fwrite(deep.data(), 1, deep.size(), f);
  std::fclose(f);
  CHECK(message(path) == "JSON nests deeper than a safetensors header can");
}

TEST_CASE("decode refuses a file shorter than 8 bytes") {
  for (std::size_t n = 0; n < 8; ++n) expect_refused(std::string(n, '\0'), "header", "too short");
}

TEST_CASE("decode refuses a header length beyond the file or above 100 MB") {
  expect_refused(u64_le(100) + "{}", "header", "runs past the end of the file");
  expect_refused(u64_le(3) + "{}", "header", "runs past the end of the file");
  expect_refused(u64_le(100'000'001) + "{}", "header", "100 MB");
  expect_refused(u64_le(~0ULL) + "{}", "header", "100 MB");
  expect_refused(u64_le(1ULL << 63) + "{}", "header", "100 MB");
}

TEST_CASE("decode refuses a header that is not valid JSON or not an object") {
  expect_refused(make_file("{\"a\":"), "header", "invalid JSON");
  expect_refused(make_file(""), "header", "invalid JSON");
  expect_refused(make_file("{} trailing"), "header", "invalid JSON");
  expect_refused(make_file("{\"a\":\"\xff\"}"), "header", "invalid JSON");  // not UTF-8
  expect_refused(make_file(std::string("{}\0\0", 4)), "header", "invalid JSON");
  expect_refused(make_file("[]"), "header", "must be a JSON object, got array");
  expect_refused(make_file("17"), "header", "must be a JSON object, got number");
  expect_refused(make_file(std::string(1'000'000, '[')), "header", "nests deeper");
  expect_refused(make_file(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})"), "header", "nests deeper");
  // A tensor named twice loaded one of its two values silently; a metadata key likewise.
  const std::string w = R"("w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  expect_refused(make_file("{" + w + ", " + w + "}", std::string(4, '\0')), "header", "the key \"w\" appears twice");
  expect_refused(make_file(R"({"__metadata__": {"a": "1", "a": "2"}})"), "header", "the key \"a\" appears twice");
}

// Found by tests/fuzz/safetensors_fuzz: nlohmann reports a number beyond a double's range as out_of_range, not as
// a parse error, and it escaped the decoder.
TEST_CASE("decode refuses a number beyond a double's range in the header") {
  expect_refused(make_file(R"({"a":1e400})"), "header", "invalid JSON: number overflow parsing '1e400'");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-1e324,4]}})", "abcd"), "header",
                 "number overflow");
}

TEST_CASE("decode refuses entries with missing keys or wrong JSON types") {
  const std::string where = "tensor \"w\"";
  expect_refused(make_file(R"({"w":[1,2]})"), where, "entry must be an object, got array");
  expect_refused(make_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd"), where, "missing \"dtype\"");
  expect_refused(make_file(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"), where, "missing \"shape\"");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"), where, "missing \"data_offsets\"");
  expect_refused(make_file(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "abcd"), where,
                 "\"dtype\" must be a string");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "abcd"), where,
                 "\"shape\" must be an array");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "abcd"), where,
                 "non-negative integers");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[null],"data_offsets":[0,4]}})", "abcd"), where,
                 "non-negative integers");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "abcd"), where,
                 "[begin, end]");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"a":0}}})", "abcd"), where,
                 "[begin, end]");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":["0","4"]}})", "abcd"), where,
                 "non-negative integers");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd"), where,
                 "negative value -4");
}

TEST_CASE("decode refuses unknown and unsupported dtypes by name") {
  expect_refused(make_file(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "abcd"), "tensor \"w\"",
                 "dtype \"F16\" is not supported");
  expect_refused(make_file(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", "abcd"), "tensor \"w\"",
                 "dtype \"BF16\" is not supported");
  expect_refused(make_file(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", "abcdefgh"), "tensor \"w\"",
                 "dtype \"F64\" is not supported");
  expect_refused(make_file(R"({"w":{"dtype":"float32","shape":[1],"data_offsets":[0,4]}})", "abcd"), "tensor \"w\"",
                 "unknown dtype \"float32\"");
}

TEST_CASE("decode refuses bad dimensions without overflowing") {
  const std::string where = "tensor \"w\"";
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"), where,
                 "negative value -1");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "abcd"),
                 where, "overflows");
  expect_refused(make_file(R"({"w":{"dtype":"I64","shape":[2305843009213693952],"data_offsets":[0,4]}})", "abcd"),
                 where, "overflows");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", "abcd"),
                 where, "too large");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]}})", "abcd"), where,
                 "rank 7");
  // Products are checked left to right, as the reference reader does: a zero first makes an empty tensor,
  // a zero after an overflowing prefix does not rescue it.
  const SafetensorsFile ok = decode_safetensors(
      make_file(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"), kFile);
  CHECK(ok.find("w")->num_elements() == 0);
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})"), where,
                 "overflows");
}

TEST_CASE("decode refuses offsets out of order, overlapping, outside the buffer, with gaps or wrong sizes") {
  const std::string data8 = "abcdefgh";
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", data8), "tensor \"w\"",
                 "end before they begin");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", data8), "tensor \"w\"",
                 "run past the data buffer (8 bytes)");
  expect_refused(
      make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
                data8),
      "tensor \"w\"", "run past the data buffer");
  expect_refused(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", data8), "tensor \"w\"",
                 "span 4 bytes, but float32 [2] needs 8");
  expect_refused(make_file(R"({"w":{"dtype":"I64","shape":[],"data_offsets":[0,4]}})", data8), "tensor \"w\"",
                 "needs 8");
  expect_refused(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           data8),
                 "tensor \"b\"", "overlap tensor \"a\"");
  expect_refused(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), "tensor \"a\"",
                 "leave bytes [0,4] of the data buffer unused");
  expect_refused(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data8), "header",
                 "tensors cover 4 bytes of a 8-byte data buffer");
  expect_refused(make_file("{}", "x"), "header", "tensors cover 0 bytes of a 1-byte data buffer");
}

TEST_CASE("decode refuses __metadata__ that is not an object of strings") {
  expect_refused(make_file(R"({"__metadata__":["a"]})"), "header", "\"__metadata__\" must be an object");
  expect_refused(make_file(R"({"__metadata__":{"epoch":3}})"), "header",
                 "\"__metadata__\" value for \"epoch\" must be a string, got number");
  expect_refused(make_file(R"({"__metadata__":{"a":{"b":"c"}}})"), "header", "must be a string");
}

TEST_CASE("decode quotes odd tensor names so the error stays on one line") {
  expect_refused(make_file("{\"a\\nb\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]}}", "ab"),
                 "tensor \"a\\nb\"", "not supported");
}

TEST_CASE("long tensor names round trip whole but are cut short in errors") {
  std::string name;
  for (int i = 0; i < 200; ++i) name += "é";  // 400 bytes of two-byte UTF-8
  check_round_trip({{name, Tensor::scalar(1.0f)}}, {});

  const std::string huge(1'000'000, 'x');
  const std::string long_name =
      make_file("{\"" + huge + "\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[0,2]}}", "ab");
  const SpecError e = catch_spec_error([&] { decode_safetensors(long_name, kFile); });
  CHECK(e.where().size() < 120);
  CHECK(e.where().ends_with("xxx\"..."));
  expect_refused(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"" + huge + "\"],\"data_offsets\":[0,4]}}", "abcd"),
                 "tensor \"w\"", "non-negative integers");
}

TEST_CASE("decode survives every truncation and random byte flips") {
  const std::string valid = encode_safetensors(sample_tensors(), {{"epoch", "3"}, {"note", "fuzz"}});
  REQUIRE_NOTHROW(decode_safetensors(valid, kFile));

  int refused = 0;
  int accepted = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      decode_safetensors(bytes, kFile);
      ++accepted;
    } catch (const SpecError&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL("decode threw something other than SpecError: " << e.what());
    }
  };

  for (std::size_t n = 0; n < valid.size(); ++n) attempt(valid.substr(0, n));
  CHECK(accepted == 0);  // every proper prefix loses bytes the header promised

  std::mt19937 rng(20240611);
  const std::uint64_t header_end = 8 + header_length(valid);
  for (int round = 0; round < 600; ++round) {
    std::string bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Most flips land in the length field and header, where the parser's work is.
      const std::size_t limit = (round % 4 == 0) ? bytes.size() : header_end;
      const std::size_t at = rng() % limit;
      bytes[at] = static_cast<char>(round % 3 == 0 ? (bytes[at] ^ (1 << (rng() % 8))) : rng());
    }
    attempt(bytes);
  }
  // Some mutations are harmless (a flipped data byte), many are not; both paths must have run.
  CHECK(refused > 0);
  CHECK(accepted > 0);
}

TEST_CASE("check_against accepts matching tensors in any order") {
  const SafetensorsFile file = decode_safetensors(encode_safetensors(sample_tensors(), {}), kFile);
  std::vector<NamedTensor> expected = sample_tensors();
  std::reverse(expected.begin(), expected.end());
  CHECK_NOTHROW(check_against(file, expected, kFile));
}

void expect_mismatch(const SafetensorsFile& file, const std::vector<NamedTensor>& expected, const std::string& where,
                     const std::vector<std::string>& parts) {
  check_spec_error([&] { check_against(file, expected, kFile); }, kFile, where, parts);
}

TEST_CASE("check_against names missing, mismatched and extra tensors") {
  const float w[6] = {};
  const SafetensorsFile file =
      decode_safetensors(encode_safetensors({{"kernel", Tensor::from_floats({2, 3}, w)},
                                             {"bias", Tensor::from_floats({3}, std::span<const float>(w, 3))}},
                                            {}),
                         kFile);
  const Tensor kernel = Tensor::zeros(DType::kF32, {2, 3});
  const Tensor bias = Tensor::zeros(DType::kF32, {3});

  expect_mismatch(file, {{"kernel", kernel}, {"bias", bias}, {"gamma", bias}}, "tensor \"gamma\"",
                  {"missing from the file", "float32 [3]", "\"kernel\""});
  expect_mismatch(file, {{"kernel", Tensor::zeros(DType::kF32, {3, 2})}, {"bias", bias}}, "tensor \"kernel\"",
                  {"the file holds float32 [2, 3]", "the model expects float32 [3, 2]"});
  expect_mismatch(file, {{"kernel", kernel}, {"bias", Tensor::zeros(DType::kI32, {3})}}, "tensor \"bias\"",
                  {"float32 [3]", "int32 [3]"});
  expect_mismatch(file, {{"kernel", kernel}}, "tensor \"bias\"", {"not a weight of this model", "\"kernel\""});
  expect_mismatch(file, {}, "tensor \"kernel\"", {"not a weight of this model", "the model has nothing"});
}

}  // namespace
}  // namespace tctl
