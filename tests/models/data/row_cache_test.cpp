// The pieces of a streamed data set: read_csv_blocks against read_csv, the RowCache against the data set in
// memory (values, labels, names, fingerprint), a cache refused when it is not whole or not for this data,
// RowStream's windows, and Standardizer::fit_windows against fit.
#include "models/data/row_cache.h"

#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <string>

#include "array_files.h"
#include "image_files.h"
#include "models/data/arrays.h"
#include "models/data/csv.h"
#include "models/data/images.h"
#include "models/data/row_stream.h"
#include "models/test_files.h"
#include "spec_error_check.h"

namespace fs = std::filesystem;
using namespace tctl;

namespace {

using tctl::testing::TempDir;

// A CSV of `rows` rows of three features and a label that `label(r)` writes, with quoted cells, a cell holding
// a line break in a quoted label, CRLF line ends and blank lines at the end: every kind of place a block
// may be cut.
std::string tricky_csv(int rows, const std::function<std::string(int)>& label) {
  std::string out = "a,\"b, the second\",c,label\r\n";
  for (int r = 0; r < rows; ++r)
    out += std::to_string(r) + ",\"" + std::to_string(r % 7) + ".5\"," + std::to_string(-r * 3) + "e-1," + label(r) +
           (r % 5 == 0 ? "\r\n" : "\n");
  return out + "\n\n";
}

// The CSV as a cache's source, as it is now.
RowCache::Source source_of(const std::string& path, bool classification) {
  return RowCache::csv_source({.path = path,
                               .label_column = "label",
                               .classification = classification,
                               .options = {},
                               .file_for_errors = "config.json",
                               .where = "data.csv"});
}

// `content` written to `name` (folders made) in `dir`; its path.
std::string write_in(const TempDir& dir, const std::string& name, const std::string& content) {
  const fs::path path = dir.path / name;
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

// Builds the cache of `source` in `dir` and checks it against `data`, the same data set in memory.
void check_cache_matches(const TempDir& dir, const RowCache::Source& source, const Dataset& data) {
  const std::uint64_t key = RowCache::key_of(source);
  REQUIRE(key != 0);
  auto cache = RowCache::build(RowCache::path_in(dir.path, source, key), key, source);
  REQUIRE(cache->rows() == data.size());
  REQUIRE(cache->features() == data.num_features());
  CHECK(cache->fingerprint() == fingerprint_of(data));
  const Dataset& meta = cache->metadata();
  CHECK(meta.feature_names == data.feature_names);
  CHECK(meta.class_names == data.class_names);
  CHECK(meta.num_classes == data.num_classes);
  CHECK(meta.y.bytes() == data.y.bytes());
  CHECK(std::memcmp(meta.y.raw_data(), data.y.raw_data(), data.y.bytes()) == 0);
  // Rows asked for out of order, one twice.
  std::vector<std::int64_t> rows{data.size() - 1, 0, 5, 3, 5};
  std::vector<float> got(rows.size() * static_cast<std::size_t>(data.num_features()));
  cache->read_rows(rows, got.data());
  Tensor want;
  want = gather_rows(data.x, rows, want);
  // A data set of texts has no features: no bytes (and no pointers memcmp may be given).
  CHECK((want.bytes() == 0 || std::memcmp(got.data(), want.raw_data(), want.bytes()) == 0));
  CHECK(meta.paths == data.paths);
  CHECK(cache->has_texts() == !data.texts.empty());
  if (data.texts.empty()) return;
  std::vector<std::string> texts{"left here"};
  cache->read_texts(rows, texts);
  REQUIRE(texts.size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) CHECK(texts[i] == data.texts[static_cast<std::size_t>(rows[i])]);
  std::vector<std::int64_t> all(static_cast<std::size_t>(data.size()));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  cache->read_texts(all, texts);
  CHECK(texts == data.texts);
}

// Builds the cache of `path` in `dir` and checks it against load_csv_dataset's data set.
void check_cache_matches_memory(const TempDir& dir, const std::string& path, bool classification) {
  check_cache_matches(dir, source_of(path, classification),
                      load_csv_dataset(path, "label", classification, "config.json", "data.csv"));
}

}  // namespace

TEST_CASE("read_csv_blocks gives read_csv's rows, a block at a time, whatever the block size") {
  const std::string path = testing::write_scratch_file(
      "blocks.csv", tricky_csv(300, [](int r) { return "\"class\n" + std::to_string(r % 3) + "\""; }));
  CsvOptions options{.text_columns = {"label"}};
  const CsvTable whole = read_csv(path, options);
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{100}, std::size_t{1} << 20}) {
    INFO("piece_bytes " << piece);
    options.piece_bytes = piece;
    options.threads = 2;
    std::vector<float> values;
    std::vector<std::int64_t> lines;
    std::vector<std::string> labels;
    int blocks = 0;
    read_csv_blocks(
        path, options, [&](const std::vector<std::string>& columns) { CHECK(columns == whole.columns); },
        [&](CsvTable& block) {
          ++blocks;
          values.insert(values.end(), block.values.data<float>(),
                        block.values.data<float>() + block.values.num_elements());
          lines.insert(lines.end(), block.row_lines.begin(), block.row_lines.end());
          labels.insert(labels.end(), block.text[3].begin(), block.text[3].end());
        });
    CHECK(lines == whole.row_lines);
    CHECK(labels == whole.text[3]);
    REQUIRE(values.size() == static_cast<std::size_t>(whole.values.num_elements()));
    CHECK(std::memcmp(values.data(), whole.values.data<float>(), whole.values.bytes()) == 0);
    if (piece < 100) CHECK(blocks > 1);
  }
}

TEST_CASE("read_csv_blocks reports bad data at its line, and the header before any row") {
  const std::string path = testing::write_scratch_file("blocks_bad.csv", "a,label\n1,0\n2,0\n3,zero\n");
  testing::check_spec_error(
      [&] {
        read_csv_blocks(
            path, {.piece_bytes = 1}, [](const auto&) {}, [](CsvTable&) {});
      },
      path, "line 4", {"column \"label\"", "\"zero\""});
  // A NUL byte in the header is binary data too, refused before any name is read.
  const std::string binary = testing::write_scratch_file("blocks_nul.csv", std::string("a,b\0c,label\n1,2,0\n", 17));
  testing::check_spec_error(
      [&] {
        read_csv_blocks(
            binary, {}, [](const auto&) {}, [](CsvTable&) {});
      },
      binary, "line 1", {"NUL byte"});
  bool rows_read = false;
  CHECK_THROWS_AS(
      read_csv_blocks(
          path, {}, [](const std::vector<std::string>&) { throw SpecError("config.json", "data", "no such column"); },
          [&](CsvTable&) { rows_read = true; }),
      SpecError);
  CHECK(!rows_read);
}

TEST_CASE("a RowCache holds the data set in memory's values, labels, names and fingerprint") {
  TempDir dir;
  SUBCASE("class ids") {
    check_cache_matches_memory(
        dir, testing::write_scratch_file("ids.csv", tricky_csv(500, [](int r) { return std::to_string(r % 4); })),
        true);
  }
  SUBCASE("class names") {
    check_cache_matches_memory(
        dir,
        testing::write_scratch_file(
            "names.csv", tricky_csv(500, [](int r) { return r % 3 == 0 ? "\"x, y\"" : "b" + std::to_string(r % 5); })),
        true);
  }
  SUBCASE("regression targets") {
    check_cache_matches_memory(
        dir,
        testing::write_scratch_file("targets.csv", tricky_csv(500, [](int r) { return std::to_string(r * 0.25); })),
        false);
  }
}

TEST_CASE("a RowCache of a CSV's text column holds its texts, one longer than a read, and its labels") {
  TempDir dir;
  // Texts quoted with commas and line breaks, an empty one, and one of 9 MiB (more than one 8 MiB read);
  // an ignored column that is no number.
  std::string csv = "id,text,label\n";
  for (int r = 0; r < 300; ++r) {
    const std::string text = r == 7     ? ""
                             : r == 150 ? std::string(9 << 20, 'w')
                                        : "row " + std::to_string(r) + ", said\nthe line";
    csv += "x" + std::to_string(r) + ",\"" + text + "\"," + (r % 3 == 0 ? "spam" : "ham") + "\n";
  }
  const std::string path = write_in(dir, "texts.csv", csv);
  for (bool classification : {true, false}) {
    if (!classification) {
      // Targets for regression: the label column holds numbers.
      std::string numbers = csv;
      for (std::size_t at = 0; (at = numbers.find(",spam\n", at)) != std::string::npos;)
        numbers.replace(at, 6, ",1.5\n");
      for (std::size_t at = 0; (at = numbers.find(",ham\n", at)) != std::string::npos;) numbers.replace(at, 5, ",-2\n");
      write_in(dir, "texts.csv", numbers);
    }
    const CsvDataOptions options{.text_column = "text"};
    RowCache::CsvSource source{.path = path,
                               .label_column = "label",
                               .classification = classification,
                               .options = options,
                               .file_for_errors = "config.json",
                               .where = "data.csv"};
    check_cache_matches(dir, RowCache::csv_source(source),
                        load_csv_dataset(path, "label", classification, "config.json", "data.csv", options));
  }
  // The text column missing: the error the in-memory reader gives.
  RowCache::CsvSource missing{.path = path,
                              .label_column = "label",
                              .options = {.text_column = "body"},
                              .file_for_errors = "config.json",
                              .where = "data.csv"};
  testing::check_spec_error([&] { RowCache::build(dir.path / "m.rows", 1, RowCache::csv_source(missing)); },
                            "config.json", "data.text.column", {"no column \"body\""});
  // A text saved in Latin-1 is refused at its line, streamed or in memory, before its tokens could reach the
  // run's vocabulary (JSON, UTF-8 only).
  const std::string latin1 = write_in(dir, "latin1.csv", "text,label\nfine,1\ncaf\xe9 au lait,0\n");
  RowCache::CsvSource bad{.path = latin1,
                          .label_column = "label",
                          .options = {.text_column = "text"},
                          .file_for_errors = "config.json",
                          .where = "data.csv"};
  const std::vector<std::string> says{"column \"text\": the text \"caf\\xe9 au lait\" holds the byte 0xe9 at offset 3"};
  testing::check_spec_error([&] { RowCache::build(dir.path / "l.rows", 1, RowCache::csv_source(bad)); }, latin1,
                            "line 3", says);
  testing::check_spec_error(
      [&] { load_csv_dataset(latin1, "label", true, "config.json", "data.csv", {.text_column = "text"}); }, latin1,
      "line 3", says);
}

TEST_CASE("a RowCache of arrays or of a folder of images holds what the in-memory readers load") {
  TempDir dir;
  // 2,000 rows of 3 x 5 float64 features (more than one 8 MiB block is not needed: blocks are rows), int64
  // labels; and float32 targets of two columns for regression.
  std::vector<double> x(2000 * 15);
  std::vector<std::int64_t> labels(2000);
  std::vector<float> targets(4000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i % 97) * 0.37 - 11.0;
  for (std::size_t r = 0; r < labels.size(); ++r) labels[r] = static_cast<std::int64_t>(r * 7 % 5);
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<float>(i) * 0.5f;
  const std::string xs = write_in(dir, "x.npy", testing::npy("<f8", "(2000, 3, 5)", testing::raw(x)));
  const std::string ys = write_in(dir, "y.npy", testing::npy("<i8", "(2000,)", testing::raw(labels)));
  const std::string ts = write_in(dir, "t.npy", testing::npy("<f4", "(2000, 2)", testing::raw(targets)));
  for (const auto& [y, classification] : {std::pair{ys, true}, std::pair{ts, false}}) {
    INFO(y);
    check_cache_matches(dir, array_rows_source(xs, y, classification, "config.json", "data"),
                        load_array_dataset(xs, y, classification, "config.json", "data"));
  }
  // A value that is not finite is refused at its element, as the in-memory reader refuses it.
  x[1234] = std::numeric_limits<double>::infinity();
  write_in(dir, "x.npy", testing::npy("<f8", "(2000, 3, 5)", testing::raw(x)));
  const RowCache::Source bad = array_rows_source(xs, ys, true, "config.json", "data");
  testing::check_spec_error([&] { RowCache::build(dir.path / "bad.rows", 1, bad); }, xs, "element 1234 (row 82)",
                            {"expected a finite number, got inf"});
  CHECK(!fs::exists(dir.path / "bad.rows"));
  // Images: two classes of gray PNG files of several sizes, resized.
  for (int i = 0; i < 9; ++i)
    for (const char* c : {"a", "b"})
      // One file named in Latin-1 with a '%' in it: the cache's JSON record holds its path escaped, and gives
      // back its bytes (not "caf\xe9 A").
      write_in(dir,
               std::string("folder/") + c + "/" + (i == 0 ? std::string("caf\xe9 %41") : std::to_string(i)) + ".png",
               testing::png_file(4 + i, 6, PNG_FORMAT_GRAY,
                                 testing::solid(4 + i, 6, {static_cast<std::uint8_t>(c[0] * i % 256)})));
  const ImageOptions options{.height = 5, .width = 5, .channels = 1, .interpolation = ImageInterpolation::kBilinear};
  const std::string folder = (dir.path / "folder").string();
  check_cache_matches(dir, image_rows_source(folder, options, 2, "config.json", "data.images.directory"),
                      load_image_dataset(folder, options, 2, "config.json", "data.images.directory"));
  // Another size: another key.
  ImageOptions larger = options;
  larger.height = 6;
  CHECK(RowCache::key_of(image_rows_source(folder, options, 2, "c", "d")) !=
        RowCache::key_of(image_rows_source(folder, larger, 2, "c", "d")));
}

TEST_CASE("a RowCache is refused when it is not whole or not for the data as it is now") {
  TempDir dir;
  const std::string path =
      testing::write_scratch_file("refused.csv", tricky_csv(200, [](int r) { return std::to_string(r % 2); }));
  const RowCache::Source source = source_of(path, true);
  const std::uint64_t key = RowCache::key_of(source);
  const fs::path cache = RowCache::path_in(dir.path, source, key);
  RowCache::build(cache, key, source);
  REQUIRE(RowCache::open(cache, key) != nullptr);
  CHECK(RowCache::open(cache, key + 1) == nullptr);
  // Classification and regression read the labels differently: another key.
  CHECK(RowCache::key_of(source_of(path, false)) != key);
  // A cache whose header claims more rows than the file could hold is refused before anything is sized.
  {
    std::string lying = [&] {
      std::ifstream in(cache, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    const std::int64_t huge = std::int64_t{1} << 61;
    std::memcpy(lying.data() + 16, &huge, sizeof huge);  // rows, after the magic and the version
    const fs::path other = dir.path / "lying.rows";
    std::ofstream(other, std::ios::binary) << lying;
    CHECK(RowCache::open(other, key) == nullptr);
    fs::remove(other);
  }
  const std::string bytes = [&] {
    std::ifstream in(cache, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto write = [&](const std::string& text) { std::ofstream(cache, std::ios::binary | std::ios::trunc) << text; };
  write(bytes.substr(0, bytes.size() - 1));  // cut short by a byte
  CHECK(RowCache::open(cache, key) == nullptr);
  write(std::string(8, '\0') + bytes.substr(8));  // the header not yet written, as a temporary holds it
  CHECK(RowCache::open(cache, key) == nullptr);
  write(bytes);
  CHECK(RowCache::open(cache, key) != nullptr);
  // The file rewritten (another size and time): another key, and building it removes the old version.
  testing::write_scratch_file("refused.csv", tricky_csv(201, [](int r) { return std::to_string(r % 2); }));
  const RowCache::Source now = source_of(path, true);
  const std::uint64_t changed = RowCache::key_of(now);
  CHECK(changed != key);
  RowCache::build(RowCache::path_in(dir.path, now, changed), changed, now);
  CHECK(!fs::exists(cache));
  CHECK(dir.entries().size() == 1);
}

TEST_CASE("a RowStream's windows hold every row once, in whole batches, each from one stretch of the file") {
  TempDir dir;
  const std::string path =
      testing::write_scratch_file("windows.csv", tricky_csv(1000, [](int r) { return std::to_string(r % 3); }));
  const RowCache::Source source = source_of(path, true);
  const std::uint64_t key = RowCache::key_of(source);
  auto cache = RowCache::build(RowCache::path_in(dir.path, source, key), key, source);
  const SplitOrder split = split_order(cache->rows(), 0.2, 0.0, true, 11);
  std::vector<std::int64_t> train(split.order.begin() + split.test, split.order.end());
  const Dataset& meta = cache->metadata();
  Dataset part = meta;
  part.stream = std::make_shared<RowStream>(cache, train, meta.y, 250, 32);
  const RowStream& stream = *part.stream;
  CHECK(stream.window_rows() == 224);  // rounded down to whole batches
  REQUIRE(stream.windows() == 4);
  std::multiset<std::int64_t> seen;
  std::int64_t last_end = -1;
  Dataset window;
  for (std::int64_t w = 0; w < stream.windows(); ++w) {
    stream.load(w, meta, window);
    REQUIRE(window.size() == stream.window_size(w));
    // The window's rows are the part's rows whose x matches, in a stretch of the file after the last window's.
    std::vector<std::int64_t> rows;
    for (std::int64_t i = 0; i < window.size(); ++i) {
      const auto a = static_cast<std::int64_t>(window.x.data<float>()[i * 3]);  // column "a" is the row number
      rows.push_back(a);
      seen.insert(a);
      CHECK(window.y.data<std::int32_t>()[i] == a % 3);
    }
    CHECK(*std::min_element(rows.begin(), rows.end()) > last_end);
    last_end = *std::max_element(rows.begin(), rows.end());
  }
  CHECK(seen == std::multiset<std::int64_t>(train.begin(), train.end()));
  // One window: the part in split order, as the in-memory part holds it.
  RowStream whole(cache, train, meta.y, 100000, 32);
  REQUIRE(whole.windows() == 1);
  whole.load(0, meta, window);
  for (std::size_t i = 0; i < train.size(); ++i) CHECK(window.x.data<float>()[i * 3] == static_cast<float>(train[i]));
}

TEST_CASE("Standardizer::fit_windows over one window is fit, and over many agrees to rounding") {
  Tensor x = Tensor::empty(DType::kF32, Shape{1000, 4});
  for (std::int64_t i = 0; i < x.num_elements(); ++i)
    x.mutable_data<float>()[i] = static_cast<float>((i * 37) % 101) * 0.3f + 1000.0f;
  Standardizer whole;
  whole.fit(x);
  Standardizer one;
  one.fit_windows(4, [&](FunctionRef<void(const Tensor&)> visit) { visit(x); });
  CHECK(one.mean == whole.mean);
  CHECK(one.std == whole.std);
  Standardizer many;
  many.fit_windows(4, [&](FunctionRef<void(const Tensor&)> visit) {
    for (std::int64_t first = 0; first < 1000; first += 300) {
      Tensor part = Tensor::empty(DType::kF32, Shape{std::min<std::int64_t>(300, 1000 - first), 4});
      std::memcpy(part.raw_mutable_data(), x.data<float>() + first * 4, part.bytes());
      visit(part);
    }
  });
  for (std::size_t c = 0; c < 4; ++c) {
    CHECK(many.mean[c] == doctest::Approx(whole.mean[c]).epsilon(1e-6));
    CHECK(many.std[c] == doctest::Approx(whole.std[c]).epsilon(1e-6));
  }
}
