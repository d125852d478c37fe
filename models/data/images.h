// Images as data, as Keras' image_dataset_from_directory reads them: a folder with one subfolder per class,
// each holding PNG, JPEG, BMP and GIF files, decoded (libpng, libjpeg-turbo, our BMP parser and giflib:
// models/data/image_formats.h) on worker threads, resized to one size and
// made the rows of a Dataset: float32 pixel values 0..255, [height, width, channels] row-major (HWC, as
// Keras' channels_last), flattened.
//
//   image_size     [height, width] every image is resized to (Keras' default 256 x 256)
//   color_mode     "rgb" (3 channels; a gray image repeated in each) or "grayscale" (1; a color image made
//                  gray as tf.io.decode_image makes it: a PNG by libpng's rgb_to_gray at 0.299 R + 0.587 G +
//                  0.114 B, a JPEG by libjpeg as its luma)
//   interpolation  "bilinear" (the default) or "nearest", with tf.image.resize's half-pixel centres and no
//                  antialiasing, so a downscaled image samples as TensorFlow's does
//
// An alpha channel is dropped (not composited), as tf.io.decode_image with channels=3 drops it. A file is
// an image by its extension (.png, .jpg, .jpeg, .bmp, .gif, any case; others are skipped, as Keras skips them)
// and decoded by its first bytes: a .png that holds a JPEG is read as the JPEG it is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data/dataset.h"
#include "models/data/row_cache.h"

namespace tctl {

enum class ImageInterpolation { kBilinear, kNearest };

struct ImageOptions {
  std::int64_t height = 256, width = 256;
  int channels = 3;  // 3: "rgb", 1: "grayscale"
  ImageInterpolation interpolation = ImageInterpolation::kBilinear;

  std::int64_t features() const { return height * width * channels; }
  nlohmann::json to_json() const;  // {"image_size": [h, w], "color_mode": ..., "interpolation": ...}
};

// The column of image paths in a run's test.csv, and in the CSV predict and evaluate take for an image run.
inline constexpr std::string_view kImagePathColumn = "path";

// The largest side, and the most pixels, an image may have before it is decoded: past them a file is refused
// rather than given gigabytes (a PNG header may claim 2^31 rows). 2^26 pixels is an 8192 x 8192 image, a
// 67-megapixel photo, which decodes in 256 MB.
inline constexpr std::int64_t kMaxImageSide = 32768;
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 26;

// A decoded image: 8-bit samples, [height, width, channels] row-major, channels 1 or 3.
struct DecodedImage {
  std::int64_t height = 0, width = 0;
  int channels = 0;
  std::vector<std::uint8_t> pixels;
};

// Whether `bytes` begin as a PNG, JPEG, BMP or GIF file does (a BMP's first 18 bytes are needed).
bool looks_like_image(std::string_view bytes);
// Whether `path`'s extension is one image_dataset_from_directory would list (.png, .jpg, .jpeg, .bmp, .gif,
// any case), and that list in words for a message (".png, .jpg, .jpeg, .bmp or .gif"), so the two never part.
bool has_image_extension(const std::string& path);
std::string image_extensions_in_words();

// Throws SpecError(file, "", ...) for a picture of `height` x `width` pixels past kMaxImageSide or
// kMaxImagePixels, or empty.
void check_image_size(std::int64_t height, std::int64_t width, const std::string& file);

// Decodes a whole PNG, JPEG, BMP or GIF file into `channels` channels (1 or 3). SpecError(file, "", ...) for a
// file that is none of them, is damaged, or is larger than kMaxImageSide or kMaxImagePixels.
DecodedImage decode_image(std::string_view bytes, int channels, const std::string& file);

// `image` resized to options' height and width (channels must match) into `out`, options.features() floats.
void resize_image(const DecodedImage& image, const ImageOptions& options, float* out);

// Reads and decodes the image files at `paths` on `threads` worker threads (0: one per core, at most 16),
// each resized as `options` says: f32 [paths.size(), features]. The first file (in `paths` order) that cannot
// be read or decoded is a SpecError naming it, whichever thread met it.
Tensor load_images(const std::vector<std::string>& paths, const ImageOptions& options, int threads);

// A class folder's images: every image file (by extension) of each subfolder, in sorted order, labelled by
// the subfolder's place among the sorted subfolders' names. Files directly in `dir` and other files are
// skipped. SpecError(file_for_errors, where, ...) when `dir` is no folder, has fewer than two subfolders, or
// a class has no image.
struct ImageFolder {
  std::vector<std::string> paths;        // absolute paths: `dir` made absolute, joined with class/file
  std::vector<std::int32_t> labels;      // each path's class
  std::vector<std::string> class_names;  // the subfolders, sorted
};
ImageFolder list_image_folder(const std::string& dir, const std::string& file_for_errors, const std::string& where);

// Every image file under `dir` (recursively), sorted: what predict reads from a folder.
std::vector<std::string> list_images(const std::string& dir);

// The folder as a Dataset: x [N, features] from load_images, y the class, class_names the subfolders, and
// Dataset::paths each row's file. Features are named "p0", "p1", ...
Dataset load_image_dataset(const std::string& dir, const ImageOptions& options, int threads,
                           const std::string& file_for_errors, const std::string& where);

// The same data set as a RowCache source, for a streamed run: the folder listed now, its images decoded 32 MiB
// of rows at a time. Its identity is every file's (path, size, inode, time) and the options.
RowCache::Source image_rows_source(const std::string& dir, const ImageOptions& options, int threads,
                                   const std::string& file_for_errors, const std::string& where);

}  // namespace tctl
