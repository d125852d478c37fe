#include "models/data/images.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <jpeglib.h>
#include <png.h>

#include "core/errors.h"
#include "core/fnv.h"
#include "core/read_whole.h"
#include "models/data/image_formats.h"

namespace tctl {

namespace fs = std::filesystem;

nlohmann::json ImageOptions::to_json() const {
  return {{"image_size", {height, width}},
          {"color_mode", channels == 1 ? "grayscale" : "rgb"},
          {"interpolation", interpolation == ImageInterpolation::kNearest ? "nearest" : "bilinear"}};
}

bool looks_like_image(std::string_view bytes) {
  return bytes.starts_with("\x89PNG\r\n\x1a\n") || bytes.starts_with("\xff\xd8\xff") || looks_like_bmp(bytes) ||
         looks_like_gif(bytes);
}

namespace {

// The extensions Keras' image_dataset_from_directory lists, lower case.
constexpr std::array<std::string_view, 5> kImageExtensions = {".png", ".jpg", ".jpeg", ".bmp", ".gif"};

bool image_size_fits(std::int64_t height, std::int64_t width) {
  return height >= 1 && width >= 1 && height <= kMaxImageSide && width <= kMaxImageSide &&
         height * width <= kMaxImagePixels;
}

}  // namespace

bool has_image_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(kImageExtensions.begin(), kImageExtensions.end(), ext) != kImageExtensions.end();
}

std::string image_extensions_in_words() {
  std::string words;
  for (std::size_t i = 0; i < kImageExtensions.size(); ++i) {
    if (i > 0) words += i + 1 < kImageExtensions.size() ? ", " : " or ";
    words += kImageExtensions[i];
  }
  return words;
}

void check_image_size(std::int64_t height, std::int64_t width, const std::string& file) {
  if (!image_size_fits(height, width))
    throw SpecError(file, "",
                    fmt::format("an image of {} x {} pixels; at most {} on a side and {} in all are read", width,
                                height, kMaxImageSide, kMaxImagePixels));
}

namespace {

// `rgba` (4 channels, or 2 for gray and alpha when `gray_rows`) into `image`'s channels, alpha dropped. Gray
// rows serve 1 channel, or 3 copies; RGBA rows serve 3 (libpng made gray where 1 was asked for).
void from_rgba(const std::vector<std::uint8_t>& rgba, bool gray_rows, DecodedImage& image) {
  const std::int64_t pixels = image.height * image.width;
  image.pixels.resize(static_cast<std::size_t>(pixels * image.channels));
  std::uint8_t* out = image.pixels.data();
  const std::uint8_t* in = rgba.data();
  for (std::int64_t i = 0; i < pixels; ++i) {
    if (gray_rows) {
      const std::uint8_t g = in[2 * i];
      for (int c = 0; c < image.channels; ++c) *out++ = g;
    } else {
      std::memcpy(out, in + 4 * i, 3);
      out += 3;
    }
  }
}

// libpng reports an error by calling its error function, which must not return: it jumps back to
// decode_png_raw through png_jmpbuf, with the message kept here.
struct PngRead {
  std::string_view bytes;
  std::size_t at = 0;
  char message[256] = {};
  bool too_large = false;
};

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (n > r->bytes.size() - r->at) png_error(png, "the file ends inside the image");
  std::memcpy(out, r->bytes.data() + r->at, n);
  r->at += n;
}

void png_error_exit(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  png_longjmp(png, 1);
}

void png_no_warning(png_structp, png_const_charp) {}

// Every PNG type as 8-bit gray and alpha or RGBA, with libpng's transforms as TensorFlow's decode_png sets them
// (so as Keras reads a file): palettes and low bit depths expanded, tRNS made alpha, 16-bit samples cut to
// their high byte (png_set_strip_16), and no gamma correction: a gAMA chunk, or a 16-bit file libpng's
// simplified API would take for linear light, changes no value (a 16-bit 0x8000 reads 128). A colour file
// read for 1 channel is made gray by libpng's rgb_to_gray with decode_png's weights, 0.299 and 0.587.
// `gray_rows` says which layout came out. Returns false with r.message set on a damaged file, or on a
// picture too large (r.too_large). Whatever changes after the setjmp lives in r or behind the references,
// never in this function's own variables.
bool decode_png_raw(PngRead& r, DecodedImage& image, bool& gray_rows, std::vector<std::uint8_t>& pixels,
                    std::vector<png_bytep>& rows) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_error_exit, png_no_warning);
  if (png == nullptr) throw RuntimeError("libpng could not start reading a PNG file");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
    if (r.message[0] == 0) std::snprintf(r.message, sizeof r.message, "%s", "libpng could not read it");
    return false;
  }
  png_set_read_fn(png, &r, png_read_bytes);
  png_read_info(png, info);
  image.height = png_get_image_height(png, info);
  image.width = png_get_image_width(png, info);
  if (!image_size_fits(image.height, image.width)) {
    r.too_large = true;
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  const std::int64_t height = image.height, width = image.width;
  const int color = png_get_color_type(png, info);
  const bool gray_source = (color & PNG_COLOR_MASK_COLOR) == 0;
  gray_rows = gray_source || image.channels == 1;
  png_set_expand(png);  // palette to RGB, gray below 8 bits to 8, tRNS to alpha
  png_set_strip_16(png);
  if (!gray_source && image.channels == 1) png_set_rgb_to_gray(png, PNG_ERROR_ACTION_NONE, 0.299, 0.587);
  if ((color & PNG_COLOR_MASK_ALPHA) == 0 && !png_get_valid(png, info, PNG_INFO_tRNS))
    png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t stride = static_cast<std::size_t>(width) * (gray_rows ? 2 : 4);
  if (png_get_rowbytes(png, info) != stride) png_error(png, "an unexpected layout after libpng's transforms");
  try {  // no libpng call in here, so nothing longjmps across it; a bad_alloc must not leak png
    pixels.resize(stride * static_cast<std::size_t>(height));
    rows.resize(static_cast<std::size_t>(height));
  } catch (...) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw;
  }
  for (std::size_t y = 0; y < rows.size(); ++y) rows[y] = pixels.data() + y * stride;
  png_read_image(png, rows.data());
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

DecodedImage decode_png(std::string_view bytes, int channels, const std::string& file) {
  PngRead r{bytes};
  if (png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, std::min<std::size_t>(bytes.size(), 8)) != 0)
    throw SpecError(file, "", "not a PNG file libpng can read: no PNG signature");
  DecodedImage image;
  image.channels = channels;
  bool gray_rows = false;
  // libpng's rows, kept by each thread from file to file: given back after each, their few hundred KB were
  // faulted in again for every file (PNG decode 560 -> 1,044 images/s, bench/image_decode.sh). A thread
  // gives back rows of more than 16 MiB (a 2048 x 2048 picture) once its file is decoded.
  thread_local std::vector<std::uint8_t> rgba;
  thread_local std::vector<png_bytep> rows;
  struct GiveBackLarge {
    ~GiveBackLarge() {
      if (rgba.capacity() > (std::size_t{16} << 20)) {
        rgba = {};
        rows = {};
      }
    }
  } give_back_large;
  if (!decode_png_raw(r, image, gray_rows, rgba, rows)) {
    if (r.too_large) check_image_size(image.height, image.width, file);
    throw SpecError(file, "", std::string("a damaged PNG file: ") + r.message);
  }
  from_rgba(rgba, gray_rows, image);
  return image;
}

// libjpeg reports an error by calling error_exit, which must not return: it jumps back to decode_jpeg_raw.
struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, error->message);
  std::longjmp(error->jump, 1);
}

void jpeg_no_message(j_common_ptr, int) {}

// What libjpeg may allocate for one picture: a progressive file's coefficients for four full-resolution
// components of the largest picture read (2^26 pixels x 4 x 2 bytes, 512 MiB), and room for its buffers.
constexpr long kMaxJpegMemory = 640L << 20;

// Where decode_jpeg_raw puts the pixels: it calls `allocate` once it knows the size. A plain struct and
// function pointer, so no object with a destructor lives in the frame that longjmp unwinds.
struct JpegOutput {
  std::uint8_t* (*allocate)(void* context, JDIMENSION width, JDIMENSION height, int components);
  void* context;
};

// Decodes as TensorFlow's decode_image does (so as Keras reads a file): `channels` 1 asks libjpeg for gray,
// which is a colour file's luma (Y) as stored, and the integer fast DCT (JDCT_IFAST), TensorFlow's default.
// A gray file gives 1 channel, any other 3 (RGB) unless gray was asked for; decode_jpeg converts to the
// channels asked for. Returns false with `error->message` set on a libjpeg error.
bool decode_jpeg_raw(const unsigned char* data, std::size_t size, int channels, JpegOutput output, JpegError* error) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&error->manager);
  error->manager.error_exit = jpeg_error_exit;
  error->manager.emit_message = jpeg_no_message;
  if (setjmp(error->jump) != 0) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  // libjpeg makes gray of gray, YCbCr and RGB files only; a CMYK one is read as is and refused after.
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  info.out_color_space = info.jpeg_color_space == JCS_GRAYSCALE || (channels == 1 && !cmyk) ? JCS_GRAYSCALE : JCS_RGB;
  info.dct_method = JDCT_IFAST;
  // A progressive file's coefficients are held whole, about 2 bytes a pixel per component, allocated by
  // jpeg_start_decompress: a picture past the limits is refused before it, from its header (a forged 566-byte
  // file asked for 2.6 GB there, images_fuzz), and libjpeg's own allocations are capped, which makes any
  // request past the cap an error rather than an allocation.
  const bool too_large = info.image_width > kMaxImageSide || info.image_height > kMaxImageSide ||
                         static_cast<std::int64_t>(info.image_width) * info.image_height > kMaxImagePixels;
  info.mem->max_memory_to_use = kMaxJpegMemory;
  if (!too_large) jpeg_start_decompress(&info);
  std::uint8_t* out =
      too_large ? nullptr
                : output.allocate(output.context, info.output_width, info.output_height, info.output_components);
  if (out == nullptr) {
    jpeg_destroy_decompress(&info);
    std::snprintf(error->message, sizeof error->message,
                  "an image of %u x %u pixels; at most %lld on a side and %lld in all are read",
                  too_large ? info.image_width : info.output_width, too_large ? info.image_height : info.output_height,
                  static_cast<long long>(kMaxImageSide), static_cast<long long>(kMaxImagePixels));
    return false;
  }
  const std::size_t stride =
      static_cast<std::size_t>(info.output_width) * static_cast<std::size_t>(info.output_components);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = out + static_cast<std::size_t>(info.output_scanline) * stride;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

DecodedImage decode_jpeg(std::string_view bytes, int channels, const std::string& file) {
  struct Context {
    DecodedImage image;
  } context;
  JpegOutput output{
      [](void* c, JDIMENSION width, JDIMENSION height, int components) -> std::uint8_t* {
        auto* ctx = static_cast<Context*>(c);
        if (width > kMaxImageSide || height > kMaxImageSide ||
            static_cast<std::int64_t>(width) * height > kMaxImagePixels)
          return nullptr;
        ctx->image.width = width;
        ctx->image.height = height;
        ctx->image.channels = components;
        ctx->image.pixels.resize(static_cast<std::size_t>(width) * height * static_cast<std::size_t>(components));
        return ctx->image.pixels.data();
      },
      &context};
  JpegError error{};
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (!decode_jpeg_raw(data, bytes.size(), channels, output, &error))
    throw SpecError(file, "", std::string("a JPEG file libjpeg cannot read: ") + error.message);
  DecodedImage& image = context.image;
  if (image.channels == channels) return std::move(image);
  if (image.channels == 1 && channels == 3) {
    DecodedImage rgb{image.height, image.width, 3, {}};
    rgb.pixels.resize(image.pixels.size() * 3);
    for (std::size_t i = 0; i < image.pixels.size(); ++i) std::fill_n(&rgb.pixels[3 * i], 3, image.pixels[i]);
    return rgb;
  }
  throw SpecError(file, "",
                  fmt::format("a JPEG file of {} channels (CMYK?); gray and RGB ones are read", image.channels));
}

enum class ImageFormat { kNone, kPng, kJpeg, kBmp, kGif };

// The format decode_image reads `bytes` as, by their first bytes (8 decide): a BMP by "BM" alone, as
// TensorFlow tells it, so that decode_bmp says what in its header it cannot read.
ImageFormat format_of(std::string_view bytes) {
  if (bytes.starts_with("\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (bytes.starts_with("\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (bytes.starts_with("BM")) return ImageFormat::kBmp;
  return looks_like_gif(bytes) ? ImageFormat::kGif : ImageFormat::kNone;
}

constexpr const char* kNotAnImage = "not a PNG, JPEG, BMP or GIF file (by its first bytes)";

// A whole image file, read as core/read_whole.h reads every file; no size bound here, since decode_image
// refuses a picture past kMaxImagePixels before it allocates for it. A file that does not begin as an image is
// refused at its first 8 bytes, not once read whole: a gigabyte named .png, or /dev/zero, costs nothing.
std::string read_image_file(const std::string& path) {
  constexpr std::size_t kHead = 8;  // a PNG's signature, the longest of the four
  return read_whole(path, path,
                    {.inspect =
                         [&](std::string_view chunk, const std::string& kept) {
                           if (kept.size() >= kHead || kept.size() + chunk.size() < kHead) return;
                           const std::string head = kept + std::string(chunk.substr(0, kHead - kept.size()));
                           if (format_of(head) == ImageFormat::kNone) throw SpecError(path, "", kNotAnImage);
                         },
                     .too_large = [](const char*) { return std::string(); }});
}

// tf.image.resize's source coordinate of output index `i` with half-pixel centres.
float source_coordinate(std::int64_t i, double scale) {
  return static_cast<float>((static_cast<double>(i) + 0.5) * scale - 0.5);
}

}  // namespace

DecodedImage decode_image(std::string_view bytes, int channels, const std::string& file) {
  TCTL_CHECK(channels == 1 || channels == 3, "decode_image: 1 or 3 channels");
  switch (format_of(bytes)) {
    case ImageFormat::kPng:
      return decode_png(bytes, channels, file);
    case ImageFormat::kJpeg:
      return decode_jpeg(bytes, channels, file);
    case ImageFormat::kBmp:
      return decode_bmp(bytes, channels, file);
    case ImageFormat::kGif:
      return decode_gif(bytes, channels, file);
    case ImageFormat::kNone:
      break;
  }
  throw SpecError(file, "", kNotAnImage);
}

void resize_image(const DecodedImage& image, const ImageOptions& options, float* out) {
  TCTL_CHECK(image.channels == options.channels, "resize_image: channels differ");
  const std::int64_t h = image.height, w = image.width, c = image.channels;
  const std::uint8_t* p = image.pixels.data();
  const double sy = static_cast<double>(h) / static_cast<double>(options.height);
  const double sx = static_cast<double>(w) / static_cast<double>(options.width);
  if (h == options.height && w == options.width) {
    // Both interpolations give the pixels themselves.
    std::copy(p, p + h * w * c, out);
    return;
  }
  if (options.interpolation == ImageInterpolation::kNearest) {
    for (std::int64_t y = 0; y < options.height; ++y) {
      const std::int64_t iy = std::min<std::int64_t>(h - 1, static_cast<std::int64_t>(std::floor((y + 0.5) * sy)));
      for (std::int64_t x = 0; x < options.width; ++x) {
        const std::int64_t ix = std::min<std::int64_t>(w - 1, static_cast<std::int64_t>(std::floor((x + 0.5) * sx)));
        for (std::int64_t k = 0; k < c; ++k) *out++ = p[(iy * w + ix) * c + k];
      }
    }
    return;
  }
  // Separable: each source row the output needs is interpolated across once (columns' indices and weights
  // precomputed), then each output row is a blend of two such rows. bench/image_decode.sh measures it.
  struct Tap {
    std::int64_t lo, hi;
    float weight;
  };
  auto taps = [](std::int64_t out, std::int64_t in, double scale) {
    std::vector<Tap> t(static_cast<std::size_t>(out));
    for (std::int64_t i = 0; i < out; ++i) {
      const float f = std::max(0.0f, source_coordinate(i, scale));
      const auto lo = std::min<std::int64_t>(in - 1, static_cast<std::int64_t>(f));
      t[static_cast<std::size_t>(i)] = {lo, std::min<std::int64_t>(in - 1, lo + 1), f - static_cast<float>(lo)};
    }
    return t;
  };
  const std::vector<Tap> xs = taps(options.width, w, sx), ys = taps(options.height, h, sy);
  const std::int64_t row = options.width * c;
  std::vector<float> across(static_cast<std::size_t>(2 * row));
  float* upper = across.data();
  float* lower = upper + row;
  std::int64_t upper_row = -1, lower_row = -1;  // the source row each holds
  auto interpolate_row = [&](std::int64_t src, float* dst) {
    const std::uint8_t* line = p + src * w * c;
    for (const Tap& t : xs)
      for (std::int64_t k = 0; k < c; ++k) {
        const float a = line[t.lo * c + k], b = line[t.hi * c + k];
        *dst++ = a + (b - a) * t.weight;
      }
  };
  for (const Tap& t : ys) {
    // Rows come in order, so the lower row of one output row is often the upper row of the next.
    if (upper_row != t.lo && lower_row == t.lo) {
      std::swap(upper, lower);
      std::swap(upper_row, lower_row);
    }
    if (upper_row != t.lo) interpolate_row(upper_row = t.lo, upper);
    if (lower_row != t.hi) interpolate_row(lower_row = t.hi, lower);
    const float* top = upper;
    const float* bottom = lower;
    for (std::int64_t j = 0; j < row; ++j) *out++ = top[j] + (bottom[j] - top[j]) * t.weight;
  }
}

Tensor load_images(const std::vector<std::string>& paths, const ImageOptions& options, int threads) {
  const auto n = static_cast<std::int64_t>(paths.size());
  const std::int64_t f = options.features();
  Tensor x = Tensor::empty(DType::kF32, Shape{n, f});
  float* rows = x.mutable_data<float>();
  if (threads <= 0) threads = static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
  threads = static_cast<int>(std::min<std::int64_t>(threads, std::max<std::int64_t>(n, 1)));
  // Each worker takes the next file and writes its row in place: rows are independent, so no order is needed
  // but the refusal's, which is the first failing file in `paths` order, whichever thread met it.
  std::atomic<std::int64_t> next{0};
  std::mutex failure_mutex;
  std::int64_t failed_at = n;
  std::exception_ptr failure;
  auto work = [&] {
    for (std::int64_t i = next++; i < n; i = next++) {
      try {
        const std::string& path = paths[static_cast<std::size_t>(i)];
        const DecodedImage image = decode_image(read_image_file(path), options.channels, path);
        resize_image(image, options, rows + i * f);
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (i < failed_at) {
          failed_at = i;
          failure = std::current_exception();
        }
      }
    }
  };
  {
    std::vector<std::jthread> workers;
    for (int t = 1; t < threads; ++t) workers.emplace_back(work);
    work();
  }
  if (failure) std::rethrow_exception(failure);
  return x;
}

namespace {

std::vector<std::string> sorted_images_in(const fs::path& dir, bool recursive) {
  std::vector<std::string> out;
  std::error_code ec;
  auto take = [&out](const fs::directory_entry& e) {
    std::error_code file_ec;
    if (e.is_regular_file(file_ec) && has_image_extension(e.path().string())) out.push_back(e.path().string());
  };
  if (recursive) {
    for (const auto& e : fs::recursive_directory_iterator(dir, ec)) take(e);
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) take(e);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> list_images(const std::string& dir) { return sorted_images_in(dir, true); }

ImageFolder list_image_folder(const std::string& dir, const std::string& file_for_errors, const std::string& where) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw SpecError(file_for_errors, where, fmt::format("{} is no folder (one subfolder of images per class)", dir));
  // Hidden folders (".ipynb_checkpoints", ".git") are no classes, as Keras' image_dataset_from_directory skips them.
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (std::error_code d; e.is_directory(d) && !e.path().filename().string().starts_with("."))
      classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  if (classes.size() < 2)
    throw SpecError(
        file_for_errors, where,
        fmt::format("{} has {} subfolders; a class folder has one per class, at least two", dir, classes.size()));
  ImageFolder folder;
  folder.class_names = classes;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    // Absolute, so the run's test.csv names the files wherever predict runs from.
    std::error_code abs_ec;
    const std::vector<std::string> images = sorted_images_in(fs::absolute(fs::path(dir), abs_ec) / classes[c], true);
    if (images.empty())
      throw SpecError(
          file_for_errors, where,
          fmt::format("{}: class folder \"{}\" holds no {} file", dir, classes[c], image_extensions_in_words()));
    for (const auto& path : images) {
      folder.paths.push_back(path);
      folder.labels.push_back(static_cast<std::int32_t>(c));
    }
  }
  return folder;
}

namespace {

// Everything of the folder's data set but x.
void set_image_meta(Dataset& data, const std::string& dir, const ImageOptions& options, ImageFolder folder) {
  data.name = fs::path(dir).filename().string();
  data.y = Tensor::from_ints(Shape{static_cast<std::int64_t>(folder.labels.size())}, folder.labels);
  data.num_classes = static_cast<int>(folder.class_names.size());
  data.class_names = std::move(folder.class_names);
  data.paths = std::move(folder.paths);
  for (std::int64_t i = 0; i < options.features(); ++i) data.feature_names.push_back("p" + std::to_string(i));
}

}  // namespace

Dataset load_image_dataset(const std::string& dir, const ImageOptions& options, int threads,
                           const std::string& file_for_errors, const std::string& where) {
  ImageFolder folder = list_image_folder(dir, file_for_errors, where);
  Dataset data;
  data.x = load_images(folder.paths, options, threads);
  set_image_meta(data, dir, options, std::move(folder));
  return data;
}

RowCache::Source image_rows_source(const std::string& dir, const ImageOptions& options, int threads,
                                   const std::string& file_for_errors, const std::string& where) {
  auto folder = std::make_shared<const ImageFolder>(list_image_folder(dir, file_for_errors, where));
  // Every file's identity, hashed as it comes: a folder of a million images keys its cache in 16 hex digits.
  std::uint64_t files = kFnvOffset;
  bool all = true;
  for (const std::string& path : folder->paths) {
    const std::string id = RowCache::file_identity(path);
    all = all && !id.empty();
    files = fnv1a(id, files);
  }
  return {
      .stem = (fs::path(dir).has_filename() ? fs::path(dir) : fs::path(dir).parent_path()).filename().string(),
      .identity =
          all ? fmt::format("images\n{}\n{}\n{:016x}\n", options.to_json().dump(), folder->paths.size(), files) : "",
      .write = [=](RowCache::RowSink& sink, Dataset& meta) {
        set_image_meta(meta, dir, options, *folder);
        // 32 MiB of decoded rows at a time (at least one image), decoded on `threads` threads each.
        const auto n = static_cast<std::int64_t>(folder->paths.size());
        const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{32} << 20) / 4 / options.features());
        for (std::int64_t first = 0; first < n; first += block) {
          const auto from = folder->paths.begin() + first;
          const std::vector<std::string> paths(from, from + std::min(block, n - first));
          const Tensor x = load_images(paths, options, threads);
          sink.add(x.data<float>(), static_cast<std::int64_t>(paths.size()));
        }
      }};
}

}  // namespace tctl
