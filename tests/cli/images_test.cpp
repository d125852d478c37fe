// A folder of images as a config's data end to end: the shipped digit_images_cnn config trains on the digits
// written out as PNG files (scripts/make_digit_images.py, run by ctest before this suite); predict takes the
// run's test.csv of paths, a folder or one image and writes each path with its class; evaluate agrees with
// training. A folder of colour JPEG files of mixed sizes trains too, and predicts PNG, BMP and GIF files.
// Mistakes are one line naming the place, exit 2, nothing written.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"
#include "image_files.h"

namespace tctl::cli_test {
namespace {

using testing::bmp_file;
using testing::gif_file;
using testing::GifFrame;
using testing::jpeg_file;
using testing::png_file;
using testing::solid;

// Two classes of colour JPEG files of several sizes: mostly red, and mostly blue.
void write_colours(const TempDir& d) {
  for (int i = 0; i < 12; ++i) {
    const auto v = static_cast<std::uint8_t>(20 * (i % 4));
    d.write("colours/red/" + std::to_string(i) + ".jpg",
            jpeg_file(8 + i, 6 + i % 3, 3, solid(8 + i, 6 + i % 3, {220, v, v})));
    d.write("colours/blue/" + std::to_string(i) + ".jpeg", jpeg_file(10, 10 + i, 3, solid(10, 10 + i, {v, v, 230})));
  }
  d.write("colours/red/readme.txt", "not an image, skipped");
}

const char* kColourModel = R"({"input_shape": [6, 6, 3], "layers": [
  {"type": "Conv2D", "filters": 4, "kernel_size": 3, "activation": "relu"}, {"type": "GlobalAveragePooling2D"},
  {"type": "Dense", "units": 2, "activation": "softmax"}]})";

}  // namespace

TEST_SUITE("images") {
  TEST_CASE("configs/digit_images_cnn.json learns the digits from PNG files; predict takes paths, folders, images") {
    TempDir d;
    CommandResult r = run_tensorctl(
        "train " + quoted(source_path("configs/digit_images_cnn.json")) + " --json --output run", d.path());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.96);  // docs/train-config.md: 0.9777
    CHECK(saved.at("rows").at("test") == 359);
    CHECK(saved.at("data").at("classes").size() == 10);
    // How long the loop waited for its batches is recorded (bench/README.md has the figures: no timing here).
    const double share = saved.at("input").at("wait_share").get<double>();
    CHECK(share >= 0.0);
    CHECK(share <= 1.0);
    CHECK(saved.at("preprocessing").at("images") ==
          nlohmann::json::parse(R"({"image_size": [8, 8], "color_mode": "grayscale", "interpolation": "bilinear"})"));
    const std::vector<std::string> test_rows = split_lines(read_text(d / "run/test.csv"));
    CHECK(test_rows.front() == "path,digit");
    CHECK(test_rows[1].find("digit_images/") != std::string::npos);
    CommandResult e = run_tensorctl("evaluate --run run --data run/test.csv --json", d.path());
    REQUIRE_MESSAGE(e.status == 0, e.err);
    CHECK(parse_json(e.out).at("accuracy").get<double>() ==
          doctest::Approx(saved.at("test").at("accuracy").get<double>()));
    CommandResult c = run_tensorctl(
        "evaluate --run run --data " + quoted(source_path("configs/digit_images_cnn.json")) + " --json", d.path());
    REQUIRE_MESSAGE(c.status == 0, c.err);
    CHECK(parse_json(c.out).at("accuracy") == parse_json(e.out).at("accuracy"));
    // A folder: every image under it, each row its path and class.
    CommandResult f =
        run_tensorctl("predict --run run --input " + quoted(source_path("configs/data/digit_images/7")), d.path());
    REQUIRE_MESSAGE(f.status == 0, f.err);
    const std::vector<std::string> lines = split_lines(f.out);
    REQUIRE(lines.size() == 180);  // the header and the 179 sevens
    CHECK(lines[0] == "path,class,0,1,2,3,4,5,6,7,8,9");
    int sevens = 0;
    for (std::size_t i = 1; i < lines.size(); ++i) sevens += split_cells(lines[i])[1] == "7";
    CHECK(sevens >= 170);
    CommandResult one = run_tensorctl(
        "predict --run run --input " + quoted(source_path("configs/data/digit_images/7/0007.png")), d.path());
    REQUIRE_MESSAGE(one.status == 0, one.err);
    CHECK(split_lines(one.out).size() == 2);
  }

  TEST_CASE("colour JPEG files of mixed sizes, resized to the model's input; other files skipped") {
    TempDir d;
    write_colours(d);
    d.write("m.json", kColourModel);
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "colours"}, "test_split": 0.25},
                         "optimizer": {"type": "adam", "learning_rate": 0.05}, "epochs": 30, "batch_size": 4})");
    CommandResult r = run_tensorctl("train c.json --quiet --output run", d.path());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(saved.at("rows").at("test") == 6);
    CHECK(saved.at("data").at("classes") == nlohmann::json::parse(R"(["blue", "red"])"));
    CHECK(saved.at("preprocessing").at("images").at("color_mode") == "rgb");
    CHECK(saved.at("test").at("accuracy").get<double>() == 1.0);
    d.write("new/a.png", png_file(5, 5, PNG_FORMAT_RGB, solid(5, 5, {240, 10, 10})));
    d.write("new/b.png", png_file(7, 3, PNG_FORMAT_RGBA, solid(7, 3, {0, 0, 250, 255})));
    d.write("new/c.bmp", bmp_file({.width = 6, .height = 4, .bits = 24, .samples = solid(6, 4, {230, 20, 20})}));
    d.write("new/d.GIF",
            gif_file(4, 6, {10, 10, 240}, {GifFrame{.width = 4, .height = 6, .indices = solid(4, 6, {0})}}));
    CommandResult p = run_tensorctl("predict --run run --input new", d.path());
    REQUIRE_MESSAGE(p.status == 0, p.err);
    const std::vector<std::string> lines = split_lines(p.out);
    REQUIRE(lines.size() == 5);
    CHECK(split_cells(lines[1])[1] == "red");
    CHECK(split_cells(lines[2])[1] == "blue");
    CHECK(split_cells(lines[3])[0] == "new/c.bmp");
    CHECK(split_cells(lines[3])[1] == "red");
    CHECK(split_cells(lines[4])[1] == "blue");
    // One BMP file, told from a CSV by its first bytes.
    CommandResult one = run_tensorctl("predict --run run --input new/c.bmp", d.path());
    REQUIRE_MESSAGE(one.status == 0, one.err);
    CHECK(split_lines(one.out).size() == 2);
    CHECK(split_cells(split_lines(one.out)[1])[1] == "red");
    // profile trains on the decoded images (not random inputs), and times their gather per step.
    CommandResult prof = run_tensorctl("profile c.json --iterations 3 --warmup 0 --json", d.path());
    REQUIRE_MESSAGE(prof.status == 0, prof.err);
    const nlohmann::json input = parse_json(prof.out).at("runs").at(0).at("input");
    CHECK(input.at("prepare_seconds").get<double>() > 0);
    CHECK(input.at("batch").at("median_ms").get<double>() > 0);
    CHECK(input.at("share").get<double>() > 0);
    CHECK(input.at("share").get<double>() < 1);
  }

  TEST_CASE("mistakes in an image config or input are refused naming the place") {
    TempDir d;
    write_colours(d);
    d.write("m.json", kColourModel);
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "photos"}}})");
    expect_user_error(d, "train c.json --output run", {"c.json: data.images.directory: no such folder:", "photos"});
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "colours", "image_size": [8, 8]}}})");
    expect_user_error(d, "train c.json --output run",
                      {"c.json: data.images: images of 8 x 8 pixels, 3 channels (192 values), but the model's "
                       "input_shape [6, 6, 3]"});
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "colours", "color_mode": "cmyk"}}})");
    expect_user_error(d, "train c.json --output run",
                      {"c.json: data.images.color_mode: unknown value \"cmyk\" (known: rgb, grayscale)"});
    d.write("colours/blue/broken.png", "this is no PNG");
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "colours"}}})");
    expect_user_error(d, "train c.json --output run", {"colours/blue/broken.png: not a PNG, JPEG, BMP or GIF file"});
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "colours/red"}}})");
    expect_user_error(d, "train c.json --output run", {"c.json: data.images.directory:", "has 0 subfolders"});
    // The class's column cannot take the name of test.csv's column of files: predict could not read it back.
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "colours"}, "label": "path"}})");
    expect_user_error(d, "train c.json --output run",
                      {"c.json: data.label: \"path\" is the column of the image files in the run's test.csv"});

    std::filesystem::remove(d / "colours/blue/broken.png");
    d.write("c.json", R"({"model": "m.json", "data": {"images": {"directory": "colours"}}, "epochs": 1})");
    REQUIRE(run_tensorctl("train c.json --quiet --output run", d.path()).status == 0);
    std::filesystem::create_directories(d / "empty");
    expect_user_error(d, "predict --run run --input empty",
                      {"empty: no .png, .jpg, .jpeg, .bmp or .gif file in this folder"});
    d.write("list.csv", "file\nx.png\n");
    expect_user_error(d, "predict --run run --input list.csv", {"list.csv: line 1: missing column \"path\""});
    d.write("list.csv", "path\ncolours/red/0.jpg\nmissing.png\n");
    expect_user_error(d, "predict --run run --input list.csv", {"missing.png: cannot open file"});
    // A file that does not begin as an image is refused at its first bytes, not read whole: this one never
    // ends (it grew memory until killed).
    std::filesystem::create_symlink("/dev/zero", d / "zero.png");
    d.write("list.csv", "path\nzero.png\n");
    expect_user_error(d, "predict --run run --input list.csv", {"zero.png: not a PNG, JPEG, BMP or GIF file"});
  }
}

}  // namespace tctl::cli_test
