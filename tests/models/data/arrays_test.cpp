// Arrays as data (models/data/arrays.h): .npy files byte for byte as NumPy writes them, and NumPy's own
// np.save where /usr/bin/python3 has numpy; IDX files as MNIST ships them; a data set from two of them; and
// every malformed header refused with the file and the place.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "array_files.h"
#include "core/errors.h"
#include "models/data/arrays.h"
#include "spec_error_check.h"
#include "tests/models/test_files.h"

namespace tctl {
namespace {

using testing::catch_spec_error;
using testing::idx;
using testing::npy;
using testing::raw;

std::string write(const std::string& name, const std::string& bytes) {
  return testing::write_scratch_file(name, bytes);
}

void check_refused(const std::string& bytes, const std::string& where, const std::string& fragment) {
  CAPTURE(fragment);
  const SpecError e = catch_spec_error([&] { (void)decode_array(bytes, "a.npy"); });
  CHECK(e.file() == "a.npy");
  CHECK(e.where() == where);
  CHECK_MESSAGE(std::string(e.what()).find(fragment) != std::string::npos, e.what());
}

TEST_CASE("a .npy file gives its shape and its elements as floats, for every element type NumPy writes") {
  const ArrayFile f = decode_array(npy("<f4", "(2, 3)", raw(std::vector<float>{1, 2, 3, 4.5f, -5, 6})), "a.npy");
  CHECK(f.shape == std::vector<std::int64_t>{2, 3});
  CHECK(f.values == std::vector<float>{1, 2, 3, 4.5f, -5, 6});
  CHECK(!f.integral);
  CHECK(f.type == "float32");
  CHECK(decode_array(npy("<f8", "(2,)", raw(std::vector<double>{0.25, -1e3})), "a").values ==
        std::vector<float>{0.25f, -1e3f});
  CHECK(decode_array(npy("|u1", "(3,)", std::string{'\x00', '\x07', '\xff'}), "a").values ==
        std::vector<float>{0, 7, 255});
  CHECK(decode_array(npy("|i1", "(2,)", std::string{'\xff', '\x02'}), "a").values == std::vector<float>{-1, 2});
  CHECK(decode_array(npy("|b1", "(2,)", std::string{'\x01', '\x00'}), "a").values == std::vector<float>{1, 0});
  CHECK(decode_array(npy("<i2", "(1,)", raw(std::vector<std::int16_t>{-300})), "a").values == std::vector<float>{-300});
  CHECK(decode_array(npy("<u2", "(1,)", raw(std::vector<std::uint16_t>{60000})), "a").values ==
        std::vector<float>{60000});
  CHECK(decode_array(npy("<i4", "(1,)", raw(std::vector<std::int32_t>{-7})), "a").values == std::vector<float>{-7});
  CHECK(decode_array(npy("<u4", "(1,)", raw(std::vector<std::uint32_t>{9})), "a").values == std::vector<float>{9});
  const ArrayFile ints = decode_array(npy("<i8", "(2, 1)", raw(std::vector<std::int64_t>{3, 1})), "a");
  CHECK(ints.integral);
  CHECK(ints.values == std::vector<float>{3, 1});
  CHECK(decode_array(npy("<u8", "(1,)", raw(std::vector<std::uint64_t>{5})), "a").values == std::vector<float>{5});
  // Version 2.0's four-byte header length; a column-major vector is the same vector.
  CHECK(decode_array(npy("<f4", "(1,)", raw(std::vector<float>{2}), 2), "a").values == std::vector<float>{2});
  CHECK(decode_array(npy("<f4", "(2,)", raw(std::vector<float>{1, 2}), 1, "True"), "a").shape ==
        std::vector<std::int64_t>{2});
  // No elements at all.
  CHECK(decode_array(npy("<f4", "(0, 4)", ""), "a").values.empty());
}

TEST_CASE("an IDX file gives its shape and its big-endian elements") {
  const ArrayFile images = decode_array(idx(0x08, {2, 2, 2}, std::string{1, 2, 3, 4, 5, 6, 7, '\xff'}), "images");
  CHECK(images.shape == std::vector<std::int64_t>{2, 2, 2});
  CHECK(images.values == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 255});
  CHECK(images.integral);
  CHECK(decode_array(idx(0x0B, {1}, std::string{'\xfe', '\x0c'}), "s").values == std::vector<float>{-500});
  CHECK(decode_array(idx(0x0C, {1}, std::string{0, 1, 0, 0}), "i").values == std::vector<float>{65536});
  // 1.5f is 0x3FC00000.
  CHECK(decode_array(idx(0x0D, {1}, std::string{0x3f, '\xc0', 0, 0}), "f").values == std::vector<float>{1.5f});
  CHECK(decode_array(idx(0x0E, {1}, std::string{0x3f, '\xf0', 0, 0, 0, 0, 0, 0}), "d").values ==
        std::vector<float>{1.0f});
}

TEST_CASE("a malformed array file is refused with the file and the place") {
  const std::string floats = raw(std::vector<float>{1, 2});
  check_refused("", "header", "the file is empty");
  check_refused("PK\x03\x04 a zip", "", "not a zip archive libzip can read");
  check_refused("P4\n1 1\n", "header", "neither a NumPy .npy or .npz file nor an IDX file");
  check_refused(std::string("\x93NUMPY\x01", 7), "header", "preamble");
  check_refused(npy("<f4", "(2,)", floats, 4), "header", "version 4.0");
  check_refused(npy("<f4", "(3,)", floats), "header", "needs 12 bytes of elements, the file has 8");
  check_refused(npy("<f4", "(1,)", floats), "header", "runs on past the 4 bytes");
  check_refused(npy(">f4", "(2,)", floats), "header", "big-endian");
  check_refused(npy("<f2", "(4,)", floats), "header", "is not an element type tensorctl reads");
  check_refused(npy("<c8", "(1,)", floats), "header", "is not an element type");
  check_refused(npy("<f4", "(1, 2)", floats, 1, "True"), "header", "fortran_order is True");
  check_refused(npy("<f4", "(99999999, 99999999)", floats), "header", "more than the 2^34 elements");
  std::string structured = npy("<f4", "(2,)", floats);
  structured.replace(structured.find("'<f4'"), 5, "[('a', '<f4')]");
  check_refused(structured, "header", "structured array");
  std::string unknown = npy("<f4", "(2,)", floats);
  unknown.replace(unknown.find("'shape'"), 7, "'shapes'");
  check_refused(unknown, "header", "key 'shapes' is not one of");
  std::string long_header = npy("<f4", "(2,)", floats);
  long_header[8] = '\xff';
  long_header[9] = '\x7f';
  check_refused(long_header, "header", "the header claims 32767 bytes");
  // No elements, but a row of 2^48 (found by arrays_fuzz: the width overflowed).
  check_refused(idx(0x08, {0, 65536, 65536, 65536}, ""), "header", "more than the 2^34 elements");
  check_refused(idx(0x07, {1}, "x"), "header", "IDX type byte 0x07");
  check_refused(idx(0x08, {}, ""), "header", "IDX rank 0");
  check_refused(idx(0x08, {4}, "abc"), "header", "needs 4 bytes of elements, the file has 3");
  check_refused(std::string{'\0', '\0', '\x08', '\x02', '\0', '\0'}, "header", "ends inside its dimensions");
}

TEST_CASE("a data set from x and y arrays: rows, features flattened, labels or targets") {
  const std::string x =
      write("x.npy", npy("<f4", "(3, 2, 2)", raw(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})));
  const std::string y = write("y.idx", idx(0x08, {3}, std::string{2, 0, 1}));
  const Dataset d = load_array_dataset(x, y, true, "config.json", "data");
  CHECK(d.size() == 3);
  CHECK(d.num_features() == 4);
  CHECK(d.num_classes == 3);
  CHECK(d.feature_names == std::vector<std::string>{"x0", "x1", "x2", "x3"});
  CHECK(d.x.to_floats()[4] == 5.0f);
  CHECK(d.y.data<std::int32_t>()[0] == 2);
  CHECK(d.name == "x");
  const std::string targets = write("t.npy", npy("<f8", "(3, 2)", raw(std::vector<double>{1, 2, 3, 4, 5, 6})));
  const Dataset r = load_array_dataset(x, targets, false, "config.json", "data");
  CHECK(r.num_classes == 0);
  CHECK(r.y.shape() == Shape{3, 2});

  const SpecError rows = catch_spec_error([&] {
    (void)load_array_dataset(x, write("y2.npy", npy("|u1", "(2,)", std::string{0, 1})), true, "c.json", "data");
  });
  CHECK(rows.file() == "c.json");
  CHECK(rows.where() == "data");
  CHECK(std::string(rows.what()).find("has 3 rows") != std::string::npos);
  const SpecError fraction = catch_spec_error([&] {
    (void)load_array_dataset(x, write("y3.npy", npy("<f4", "(3,)", raw(std::vector<float>{0, 1.5f, 2}))), true,
                             "c.json", "data");
  });
  CHECK(fraction.where() == "element 1 (row 1)");
  CHECK(std::string(fraction.what()).find("class labels must be integers in 0..99999, got 1.5") != std::string::npos);
  const SpecError nan = catch_spec_error([&] {
    const std::string y4 = write("y4.idx", idx(0x08, {2}, std::string{0, 1}));
    (void)load_array_dataset(write("x4.npy", npy("<f4", "(2, 2)", raw(std::vector<float>{1, 2, std::nanf(""), 4}))), y4,
                             true, "c", "data");
  });
  CHECK(nan.where() == "element 2 (row 1)");
  const SpecError wide = catch_spec_error([&] { (void)load_array_dataset(x, targets, true, "c", "data"); });
  CHECK(std::string(wide.what()).find("one per row") != std::string::npos);
}

TEST_CASE("arrays written by NumPy's own np.save read back element for element") {
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    MESSAGE("/usr/bin/python3 has no numpy: NumPy's own files are not checked");
    return;
  }
  const std::string dir = testing::scratch_dir().string();
  const std::string script =
      "import numpy as np\n"
      "a = np.arange(24).reshape(2, 3, 4)\n"
      "for t in ['float32', 'float64', 'int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32', 'int64', 'uint64']:\n"
      "    np.save('" +
      dir +
      "/np_' + t + '.npy', a.astype(t))\n"
      "np.save('" +
      dir +
      "/np_bool.npy', a % 2 == 1)\n"
      "np.save('" +
      dir + "/np_fortran.npy', np.asfortranarray(a.astype('float32')))\n";
  REQUIRE(std::system(("/usr/bin/python3 -c \"" + script + "\"").c_str()) == 0);
  for (const char* t :
       {"float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool"}) {
    CAPTURE(t);
    const ArrayFile f = load_array(dir + "/np_" + t + ".npy");
    CHECK(f.shape == std::vector<std::int64_t>{2, 3, 4});
    for (std::size_t i = 0; i < 24; ++i)
      CHECK(f.values[i] == (std::string(t) == "bool" ? static_cast<float>(i % 2) : static_cast<float>(i)));
  }
  check_refused(std::string(), "header", "empty");
  const SpecError e = catch_spec_error([&] { (void)load_array(dir + "/np_fortran.npy"); });
  CHECK(std::string(e.what()).find("fortran_order is True") != std::string::npos);
}

TEST_CASE(".npz files as NumPy's np.savez and np.savez_compressed write them: arrays by key") {
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) {
    MESSAGE("/usr/bin/python3 has no numpy: .npz files are not checked");
    return;
  }
  const std::string dir = testing::scratch_dir().string();
  const std::string script =
      "import numpy as np, zipfile\n"
      "a = np.arange(12).reshape(3, 4)\n"
      "np.savez('" +
      dir +
      "/stored.npz', x_train=a.astype('float32'), y_train=np.array([0, 1, 1], 'uint8'))\n"
      "np.savez_compressed('" +
      dir +
      "/deflated.npz', x=a.astype('int64'), y=np.array([2.5, 1, 0]))\n"
      "np.savez('" +
      dir +
      "/single.npz', a)\n"
      "with zipfile.ZipFile('" +
      dir + "/text.npz', 'w') as z: z.writestr('x.npy', 'not an array')\n";
  REQUIRE(std::system(("/usr/bin/python3 -c \"" + script + "\"").c_str()) == 0);
  const ArrayFile x = load_array(dir + "/stored.npz", "x_train");
  CHECK(x.shape == std::vector<std::int64_t>{3, 4});
  CHECK(x.values[11] == 11.0f);
  CHECK(load_array(dir + "/stored.npz", "y_train").values == std::vector<float>{0, 1, 1});
  CHECK(load_array(dir + "/deflated.npz", "x").values[7] == 7.0f);
  CHECK(load_array(dir + "/deflated.npz", "y").values == std::vector<float>{2.5f, 1, 0});
  CHECK(load_array(dir + "/single.npz").shape == std::vector<std::int64_t>{3, 4});  // np.savez's arr_0
  const Dataset d =
      load_array_dataset(dir + "/stored.npz", dir + "/stored.npz", true, "c.json", "data", "x_train", "y_train");
  CHECK(d.size() == 3);
  CHECK(d.num_classes == 2);
  auto refused = [&](const std::string& file, const std::string& key, const std::string& fragment) {
    CAPTURE(fragment);
    const SpecError e = catch_spec_error([&] { (void)load_array(dir + "/" + file, key); });
    CHECK_MESSAGE(std::string(e.what()).find(fragment) != std::string::npos, e.what());
  };
  refused("stored.npz", "", "a .npz file of 2 arrays (x_train, y_train): name the one to read");
  refused("stored.npz", "x", "no array \"x\" in this .npz file (it holds: x_train, y_train)");
  refused("text.npz", "x", "(x.npy): header: a .npz member that is no .npy array");
  // A stored member's bytes changed after the fact: its CRC no longer matches.
  std::ifstream in(dir + "/stored.npz", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[bytes.find("\x93NUMPY") + 130] ^= 0x55;  // an element, past the 128-byte header
  const SpecError e = catch_spec_error([&] { (void)decode_array(bytes, "bad.npz", "x_train"); });
  CHECK(e.file() == "bad.npz");
  CHECK(e.where() == "x_train.npy");
  CHECK_MESSAGE(std::string(e.what()).find("damaged") != std::string::npos, e.what());
  const SpecError npy_key =
      catch_spec_error([&] { (void)decode_array(npy("<f4", "(1,)", raw(std::vector<float>{1})), "a.npy", "x"); });
  CHECK(std::string(npy_key.what()).find("only a .npz file holds named arrays") != std::string::npos);
}

}  // namespace
}  // namespace tctl
