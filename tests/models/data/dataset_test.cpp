#include "models/data/dataset.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "core/errors.h"
#include "models/test_files.h"
#include "spec_error_check.h"

namespace fs = std::filesystem;
using namespace tctl;

namespace {

using tctl::testing::catch_spec_error;
using tctl::testing::check_spec_error;
using tctl::testing::scratch_dir;
using tctl::testing::write_scratch_file;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// Each sample of `part` as (features..., label), so parts can be compared as sets of rows.
std::multiset<std::vector<float>> row_set(const Dataset& part) {
  std::multiset<std::vector<float>> rows;
  const std::vector<float> x = part.x.to_floats();
  const std::vector<float> y = part.y.to_floats();
  const auto f = static_cast<std::size_t>(part.num_features());
  for (std::size_t r = 0; r < static_cast<std::size_t>(part.size()); ++r) {
    std::vector<float> row(x.begin() + static_cast<std::ptrdiff_t>(r * f),
                           x.begin() + static_cast<std::ptrdiff_t>((r + 1) * f));
    row.push_back(y[r]);
    rows.insert(row);
  }
  return rows;
}

// A data set whose feature 0 is the row index, so every row can be identified after a shuffle.
Dataset indexed(std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n * 2));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    x[static_cast<std::size_t>(2 * i)] = static_cast<float>(i);
    x[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(i % 7);
    y[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % 3);
  }
  Dataset d;
  d.x = Tensor::from_floats(Shape{n, 2}, x);
  d.y = Tensor::from_ints(Shape{n}, y);
  d.num_classes = 3;
  d.feature_names = {"index", "mod7"};
  d.name = "indexed";
  return d;
}

std::vector<std::int64_t> ids(const Dataset& part) {
  std::vector<std::int64_t> out;
  const std::vector<float> x = part.x.to_floats();
  for (std::size_t i = 0; i < x.size(); i += 2) out.push_back(static_cast<std::int64_t>(x[i]));
  return out;
}

}  // namespace

TEST_CASE("builtin digits: 1797 x 64, 10 classes") {
  Dataset d = load_builtin("digits", 0, "train.json", "dataset");
  CHECK(d.name == "digits");
  CHECK(d.x.dtype() == DType::kF32);
  CHECK(d.x.shape() == Shape{1797, 64});
  CHECK(d.y.dtype() == DType::kI32);
  CHECK(d.y.shape() == Shape{1797});
  CHECK(d.num_classes == 10);
  CHECK(d.size() == 1797);
  CHECK(d.num_features() == 64);
  REQUIRE(d.feature_names.size() == 64);
  CHECK(d.feature_names.front() == "p0");
  CHECK(d.feature_names.back() == "p63");
  const std::vector<float> x = d.x.to_floats();
  CHECK(*std::min_element(x.begin(), x.end()) == 0.0f);
  CHECK(*std::max_element(x.begin(), x.end()) == 16.0f);
  // First row of the source file: pixels 0,0,5,13,... and label 0.
  CHECK(x[2] == 5.0f);
  CHECK(x[3] == 13.0f);
  CHECK(d.y.data<std::int32_t>()[0] == 0);
  CHECK(d.y.data<std::int32_t>()[1] == 1);
}

TEST_CASE("builtin iris: 150 x 4, 3 balanced classes") {
  Dataset d = load_builtin("iris", 0, "train.json", "dataset");
  CHECK(d.x.shape() == Shape{150, 4});
  CHECK(d.y.shape() == Shape{150});
  CHECK(d.num_classes == 3);
  CHECK(d.feature_names == std::vector<std::string>{"sepal_length", "sepal_width", "petal_length", "petal_width"});
  std::vector<int> counts(3, 0);
  for (int i = 0; i < 150; ++i) ++counts[static_cast<std::size_t>(d.y.data<std::int32_t>()[i])];
  CHECK(counts == std::vector<int>{50, 50, 50});
  CHECK(d.x.data<float>()[0] == doctest::Approx(5.1));
}

TEST_CASE("builtin spirals are deterministic in the seed") {
  Dataset a = load_builtin("spirals", 42, "", "dataset");
  Dataset b = load_builtin("spirals", 42, "", "dataset");
  Dataset c = load_builtin("spirals", 43, "", "dataset");
  CHECK(a.x.shape() == Shape{1000, 2});
  CHECK(a.y.shape() == Shape{1000});
  CHECK(a.num_classes == 2);
  CHECK(same_bytes(a.x, b.x));
  CHECK(same_bytes(a.y, b.y));
  CHECK_FALSE(same_bytes(a.x, c.x));
  const std::vector<float> x = a.x.to_floats();
  CHECK(std::all_of(x.begin(), x.end(), [](float v) { return std::abs(v) < 1.3f; }));
  const std::vector<float> y = a.y.to_floats();
  CHECK(std::accumulate(y.begin(), y.end(), 0.0f) == 500.0f);
}

TEST_CASE("unknown builtin lists the known names") {
  const SpecError e = catch_spec_error([] { load_builtin("mnist", 0, "train.json", "dataset"); });
  CHECK(std::string(e.what()) == "train.json: dataset: unknown dataset \"mnist\" (known: digits, iris, spirals)");
}

TEST_CASE("load_csv_dataset: classification and regression") {
  const std::string path = write_scratch_file("houses.csv", "rooms,label,area\n3,1,70.5\n2,0,40\n5,4,120\n");
  Dataset c = load_csv_dataset(path, "label", true, "train.json", "data.label");
  CHECK(c.name == "houses");
  CHECK(c.x.shape() == Shape{3, 2});
  CHECK(c.feature_names == std::vector<std::string>{"rooms", "area"});
  CHECK(c.x.to_floats() == std::vector<float>{3, 70.5f, 2, 40, 5, 120});
  CHECK(c.y.dtype() == DType::kI32);
  CHECK(c.y.to_floats() == std::vector<float>{1, 0, 4});
  CHECK(c.num_classes == 5);

  Dataset r = load_csv_dataset(path, "area", false, "train.json", "data.label");
  CHECK(r.num_classes == 0);
  CHECK(r.y.dtype() == DType::kF32);
  CHECK(r.y.shape() == Shape{3, 1});
  CHECK(r.y.to_floats() == std::vector<float>{70.5f, 40, 120});
  CHECK(r.feature_names == std::vector<std::string>{"rooms", "label"});
}

TEST_CASE("load_csv_dataset: bad labels and a missing label column") {
  const std::string path = write_scratch_file("bad_labels.csv", "a,label\n1,0\n2,1.5\n");
  check_spec_error([&] { load_csv_dataset(path, "label", true, "train.json", "data.label"); }, path, "line 3", {"1.5"});
  const std::string negative = write_scratch_file("negative.csv", "a,label\r\n1,-1\r\n");
  CHECK_THROWS_WITH_AS(load_csv_dataset(negative, "label", true, "t.json", "x"), doctest::Contains("line 2"),
                       SpecError);
  // The same file is fine as regression.
  CHECK(load_csv_dataset(path, "label", false, "t.json", "x").size() == 2);

  check_spec_error([&] { load_csv_dataset(path, "target", true, "train.json", "data.label"); }, "train.json",
                   "data.label", {"columns: a, label"});
  const std::string only_label = write_scratch_file("only_label.csv", "label\n1\n");
  CHECK_THROWS_AS(load_csv_dataset(only_label, "label", true, "t.json", "x"), SpecError);
}

TEST_CASE("load_csv_dataset: labels written as names become the sorted distinct names") {
  const std::string path =
      write_scratch_file("species.csv", "x,species\n1,virginica\n2,setosa\n3,\"versi, color\"\n4,setosa\n");
  Dataset d = load_csv_dataset(path, "species", true, "train.json", "data.csv");
  CHECK(d.class_names == std::vector<std::string>{"setosa", "versi, color", "virginica"});
  CHECK(d.num_classes == 3);
  CHECK(d.y.to_floats() == std::vector<float>{2, 0, 1, 0});
  // take_rows keeps them, so the splits do.
  const std::vector<std::int64_t> first{0};
  CHECK(take_rows(d, first).class_names == d.class_names);

  // One name among numbers makes the whole column names; numbers alone stay numbers.
  Dataset mixed = load_csv_dataset(write_scratch_file("mixed.csv", "x,label\n1,2\n2,b\n3,10\n"), "label", true, "", "");
  CHECK(mixed.class_names == std::vector<std::string>{"10", "2", "b"});
  CHECK(mixed.y.to_floats() == std::vector<float>{1, 2, 0});
  CHECK(load_csv_dataset(write_scratch_file("numbers.csv", "x,label\n1,2\n2,0\n"), "label", true, "", "")
            .class_names.empty());

  // A trained run's classes: a label is its position there, and a name it does not know is refused.
  const tctl::CsvDataOptions run{
      .header = true, .named_labels = true, .classes = {"virginica", "setosa", "versi, color"}};
  Dataset mapped = load_csv_dataset(path, "species", true, "", "", run);
  CHECK(mapped.class_names == run.classes);
  CHECK(mapped.y.to_floats() == std::vector<float>{0, 1, 2, 1});
  const tctl::CsvDataOptions two{.header = true, .named_labels = true, .classes = {"setosa", "virginica"}};
  const SpecError e =
      check_spec_error([&] { load_csv_dataset(path, "species", true, "", "", two); }, path, "line 4", {});
  CHECK(e.message() == "column \"species\": \"versi, color\" is not one of the run's 2 classes (setosa, virginica)");
  // A run of 100,000 classes: the message names the count and the first few (it was one 1.2 MB line).
  std::vector<std::string> many;
  for (int i = 0; i < 100000; ++i) many.push_back("class_" + std::to_string(i));
  const tctl::CsvDataOptions many_classes{.header = true, .named_labels = true, .classes = many};
  const SpecError many_error =
      check_spec_error([&] { load_csv_dataset(path, "species", true, "", "", many_classes); }, path, "line 2",
                       {"is not one of the run's 100000 classes (class_0, class_1,", "class_7 and 99992 more)"});
  CHECK(many_error.message().size() < 300);
  // A run whose classes were numbers takes no names.
  const tctl::CsvDataOptions numeric{.header = true, .named_labels = false, .classes = {}};
  CHECK_THROWS_WITH_AS(load_csv_dataset(path, "species", true, "", "", numeric),
                       doctest::Contains("class labels must be integers in 0..99999, got \"virginica\""), SpecError);
  // An empty name is refused with its line; a regression target must be a number.
  CHECK_THROWS_WITH_AS(
      load_csv_dataset(write_scratch_file("empty_name.csv", "x,label\n1,a\n2,\"\"\n"), "label", true, "", ""),
      doctest::Contains("line 3: column \"label\": empty class label"), SpecError);
  CHECK_THROWS_WITH_AS(load_csv_dataset(path, "species", false, "", ""),
                       doctest::Contains("line 2: column \"species\": expected a finite number"), SpecError);
}

TEST_CASE("load_csv_dataset: a file without a header row") {
  const tctl::CsvDataOptions no_header{.header = false, .named_labels = true, .classes = {}};
  Dataset d = load_csv_dataset(write_scratch_file("no_header.csv", "1,2,a\n3,4,b\n"), "3", true, "", "", no_header);
  CHECK(d.feature_names == std::vector<std::string>{"1", "2"});
  CHECK(d.x.to_floats() == std::vector<float>{1, 2, 3, 4});
  CHECK(d.class_names == std::vector<std::string>{"a", "b"});
}

TEST_CASE("take_rows copies the chosen rows in order") {
  Dataset d = indexed(10);
  const std::vector<std::int64_t> rows{7, 2, 2, 9};
  Dataset t = take_rows(d, rows);
  CHECK(t.size() == 4);
  CHECK(ids(t) == rows);
  CHECK(t.y.to_floats() == std::vector<float>{1, 2, 2, 0});
  CHECK(t.num_classes == 3);
  CHECK(t.feature_names == d.feature_names);
  Dataset none = take_rows(d, {});
  CHECK(none.x.shape() == Shape{0, 2});
  CHECK(none.y.shape() == Shape{0});

  Dataset reg = load_csv_dataset(write_scratch_file("reg.csv", "a,b,t\n1,2,3\n4,5,6\n"), "t", false, "", "");
  const std::vector<std::int64_t> second{1};
  Dataset one = take_rows(reg, second);
  CHECK(one.y.shape() == Shape{1, 1});
  CHECK(one.y.to_floats() == std::vector<float>{6});
}

TEST_CASE("fingerprint_of: the same rows give the same hash; a value, a row, a label or a class name changes it") {
  auto fingerprint = [](const std::string& csv, const std::string& label = "label") {
    return fingerprint_of(load_csv_dataset(write_scratch_file("f.csv", csv), label, true, "", ""));
  };
  const std::string rows = "a,b,label\n1,2,0\n3,4,1\n";
  const DataFingerprint base = fingerprint(rows);
  CHECK(base.rows == 2);
  CHECK(fingerprint(rows) == base);
  // Column names change no number: the same hash of the values, but not of the columns (predict finds the
  // features by name), nor when two names swap.
  const DataFingerprint renamed = fingerprint("x,y,label\n1,2,0\n3,4,1\n");
  CHECK(renamed.hash == base.hash);
  CHECK(renamed.rows == base.rows);
  REQUIRE(base.columns.has_value());
  CHECK(renamed.columns != base.columns);
  CHECK(fingerprint("b,a,label\n1,2,0\n3,4,1\n").columns != base.columns);
  CHECK(fingerprint(rows).columns == base.columns);
  CHECK(fingerprint("a,b,label\n1,2,0\n3,4.5,1\n").hash != base.hash);
  CHECK(fingerprint("a,b,label\n1,2,0\n3,4,0\n").hash != base.hash);
  CHECK(fingerprint("a,b,label\n3,4,1\n1,2,0\n").hash != base.hash);
  CHECK(fingerprint("a,b,label\n1,2,0\n3,4,1\n5,6,1\n").rows == 3);
  CHECK(fingerprint("a,b,label\n1,2,cat\n3,4,dog\n").hash != fingerprint("a,b,label\n1,2,cat\n3,4,emu\n").hash);
  // The same cells with another column as the label.
  CHECK(fingerprint("a,b,label\n1,2,0\n3,4,1\n", "a").hash != base.hash);
}

TEST_CASE("split_dataset: sizes, determinism and disjointness") {
  Dataset d = indexed(101);
  Split s = split_dataset(d, 0.2, 0.25, true, 7);
  CHECK(s.test.size() == 20);        // round(101 * 0.2)
  CHECK(s.validation.size() == 20);  // round(81 * 0.25)
  CHECK(s.train.size() == 61);
  CHECK(s.train.num_classes == 3);

  std::vector<std::int64_t> all;
  for (const Dataset* part : {&s.train, &s.validation, &s.test})
    for (std::int64_t id : ids(*part)) all.push_back(id);
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(101);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(all == expected);  // every row exactly once: the parts are disjoint and cover the data

  Split again = split_dataset(d, 0.2, 0.25, true, 7);
  CHECK(ids(again.train) == ids(s.train));
  CHECK(ids(again.validation) == ids(s.validation));
  CHECK(ids(again.test) == ids(s.test));
  Split other = split_dataset(d, 0.2, 0.25, true, 8);
  CHECK(ids(other.test) != ids(s.test));

  std::vector<std::int64_t> first_test = ids(s.test);
  CHECK_FALSE(std::is_sorted(first_test.begin(), first_test.end()));
}

TEST_CASE("split_dataset: no shuffle keeps file order, zero fractions give empty parts") {
  Dataset d = indexed(10);
  Split s = split_dataset(d, 0.3, 0.0, false, 1);
  CHECK(ids(s.test) == std::vector<std::int64_t>{0, 1, 2});
  CHECK(s.validation.size() == 0);
  CHECK(s.validation.num_features() == 2);
  CHECK(ids(s.train) == std::vector<std::int64_t>{3, 4, 5, 6, 7, 8, 9});

  Split none = split_dataset(d, 0.0, 0.0, true, 1);
  CHECK(none.train.size() == 10);
  CHECK(none.test.size() == 0);

  Dataset iris = load_builtin("iris", 0, "", "");
  Split parts = split_dataset(iris, 0.2, 0.1, true, 123);
  CHECK(parts.test.size() == 30);
  CHECK(parts.validation.size() == 12);
  CHECK(parts.train.size() == 108);
  std::multiset<std::vector<float>> joined = row_set(parts.train);
  for (const auto& row : row_set(parts.validation)) joined.insert(row);
  for (const auto& row : row_set(parts.test)) joined.insert(row);
  CHECK(joined == row_set(iris));
}

TEST_CASE("Standardizer: mean 0, std 1, constant columns only centred") {
  // Column 1 is constant, column 2 constant at a value that does not sum exactly in binary.
  std::vector<float> values;
  for (int i = 0; i < 50; ++i) {
    values.push_back(static_cast<float>(i * i) * 0.37f - 100.0f);
    values.push_back(5.0f);
    values.push_back(0.1f);
  }
  Tensor x = Tensor::from_floats(Shape{50, 3}, values);
  Standardizer st;
  st.fit(x);
  REQUIRE(st.mean.size() == 3);
  CHECK(st.std[1] == 1.0f);
  CHECK(st.std[2] == 1.0f);
  CHECK(st.mean[1] == 5.0f);
  Tensor z = st.apply(x);
  CHECK(z.shape() == Shape{50, 3});
  const float* p = z.data<float>();
  double sum = 0, squares = 0;
  for (int r = 0; r < 50; ++r) {
    sum += p[r * 3];
    squares += static_cast<double>(p[r * 3]) * p[r * 3];
    CHECK(p[r * 3 + 1] == 0.0f);
    CHECK(std::abs(p[r * 3 + 2]) < 1e-6f);
  }
  CHECK(sum / 50 == doctest::Approx(0.0).epsilon(1e-5).scale(1.0));
  CHECK(std::sqrt(squares / 50) == doctest::Approx(1.0).epsilon(1e-5));

  Dataset digits = load_builtin("digits", 0, "", "");
  Standardizer sd;
  sd.fit(digits.x);
  CHECK(sd.std[0] == 1.0f);  // the top-left pixel is always blank
  Tensor dz = sd.apply(digits.x);
  const std::vector<float> zs = dz.to_floats();
  CHECK(std::all_of(zs.begin(), zs.end(), [](float v) { return std::isfinite(v); }));

  Standardizer empty;
  empty.fit(Tensor::empty(DType::kF32, Shape{0, 2}));
  CHECK(empty.mean == std::vector<float>{0, 0});
  CHECK(empty.std == std::vector<float>{1, 1});
}

TEST_CASE("TENSORCTL_DATA_DIR overrides where built-in files are read") {
  const fs::path dir = scratch_dir() / "data_dir";
  fs::create_directories(dir);
  std::ofstream(dir / "iris.csv") << "a,b,label\n1,2,0\n3,4,2\n";
  ::setenv("TENSORCTL_DATA_DIR", dir.string().c_str(), 1);
  Dataset tiny = load_builtin("iris", 0, "", "");
  CHECK(tiny.x.shape() == Shape{2, 2});
  CHECK(tiny.num_classes == 3);
  CHECK(tiny.name == "iris");
  // digits.csv is not there: a broken install, not the user's mistake.
  CHECK_THROWS_AS(load_builtin("digits", 0, "", ""), RuntimeError);
  ::unsetenv("TENSORCTL_DATA_DIR");
  CHECK(load_builtin("iris", 0, "", "").size() == 150);
}

TEST_CASE("with_fold: the folds cover the rows after the test part once, each class in proportion") {
  // 103 rows of three classes in uneven numbers (60, 30, 13).
  std::vector<std::int32_t> labels(103);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = i < 60 ? 0 : i < 90 ? 1 : 2;
  const Tensor y = Tensor::from_ints(Shape{103}, labels);
  const SplitOrder base = split_order(103, 0.2, 0.1, true, 9);
  std::multiset<std::int64_t> validated;
  for (std::int64_t fold = 1; fold <= 4; ++fold) {
    const SplitOrder f = with_fold(base, y, 4, fold);
    REQUIRE(f.order.size() == base.order.size());
    CHECK(f.test == base.test);
    CHECK(std::equal(f.order.begin(), f.order.begin() + f.test, base.order.begin()));  // the test rows as they were
    CHECK(std::multiset<std::int64_t>(f.order.begin(), f.order.end()) ==
          std::multiset<std::int64_t>(base.order.begin(), base.order.end()));
    std::map<std::int32_t, std::int64_t> per_class;
    for (std::int64_t i = f.test; i < f.test + f.validation; ++i) {
      validated.insert(f.order[static_cast<std::size_t>(i)]);
      ++per_class[labels[static_cast<std::size_t>(f.order[static_cast<std::size_t>(i)])]];
    }
    // Each class's rows after the test part, a quarter of them (rounded either way) in each fold.
    std::map<std::int32_t, std::int64_t> total;
    for (std::size_t i = static_cast<std::size_t>(base.test); i < base.order.size(); ++i)
      ++total[labels[static_cast<std::size_t>(base.order[i])]];
    for (const auto& [c, n] : total) {
      INFO("fold " << fold << " class " << c);
      CHECK(per_class[c] >= n / 4);
      CHECK(per_class[c] <= (n + 3) / 4);
    }
  }
  // Every row after the test part validated exactly once over the folds.
  CHECK(validated.size() == base.order.size() - static_cast<std::size_t>(base.test));
  CHECK(std::set<std::int64_t>(validated.begin(), validated.end()).size() == validated.size());
  // Targets (no classes) go round the folds in order.
  const SplitOrder targets = with_fold(base, Tensor::empty(DType::kF32, Shape{103, 1}), 4, 2);
  CHECK(targets.validation == (103 - base.test + 2) / 4);
}
