#include "models/data/image_formats.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <gif_lib.h>

#include "core/errors.h"

namespace tctl {

namespace {

std::uint32_t le32(std::string_view b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

std::uint16_t le16(std::string_view b, std::size_t at) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(b[at]) | (static_cast<unsigned char>(b[at + 1]) << 8));
}

bool known_bmp_header(std::uint32_t size) {
  constexpr std::array<std::uint32_t, 7> kSizes{12, 40, 52, 56, 64, 108, 124};
  return std::find(kSizes.begin(), kSizes.end(), size) != kSizes.end();
}

// JPEG's luma and Pillow's "L" in 16-bit fixed point; exact on gray (the weights sum to 65536).
std::uint8_t luma(std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  return static_cast<std::uint8_t>((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
}

// `rgb` (3 samples a pixel) as `channels` channels: itself, or its luma.
DecodedImage with_channels(DecodedImage rgb, int channels) {
  if (channels == 3) return rgb;
  DecodedImage gray{rgb.height, rgb.width, 1, std::vector<std::uint8_t>(rgb.pixels.size() / 3)};
  for (std::size_t i = 0; i < gray.pixels.size(); ++i)
    gray.pixels[i] = luma(rgb.pixels[3 * i], rgb.pixels[3 * i + 1], rgb.pixels[3 * i + 2]);
  return gray;
}

// What a BMP's headers say, checked against the file's size.
struct BmpLayout {
  std::int64_t width = 0, height = 0;  // height > 0
  bool top_down = false;
  int bits = 0;                   // 8, 24 or 32
  std::size_t pixels = 0;         // where the rows start
  std::size_t row_bytes = 0;      // each row padded to 4 bytes
  std::size_t palette = 0;        // where the palette starts (8 bits)
  std::size_t palette_entry = 4;  // 3 for OS/2's header
  std::size_t colours = 0;        // palette entries (8 bits)
};

void check_bmp_compression(std::string_view b, std::uint32_t compression, int bits, const std::string& file) {
  if (compression == 0) return;
  if (compression == 1 || compression == 2)
    throw SpecError(file, "", "an RLE-compressed BMP; uncompressed ones are read (save it uncompressed)");
  // Bit fields (3) say where each colour sits in a 32-bit pixel; TensorFlow reads BGRA whatever they say, so
  // only that order is read. The masks follow a 40-byte header, and are its bytes 40 to 51 in a longer one:
  // at byte 54 either way.
  const bool bgra = compression == 3 && bits == 32 && b.size() >= 66 && le32(b, 54) == 0x00ff0000u &&
                    le32(b, 58) == 0x0000ff00u && le32(b, 62) == 0x000000ffu;
  if (!bgra)
    throw SpecError(file, "",
                    compression == 3
                        ? "a BMP whose bit fields are not 8-bit BGR(A); those are read"
                        : fmt::format("a BMP compressed with method {}; uncompressed ones are read", compression));
}

BmpLayout bmp_layout(std::string_view b, const std::string& file) {
  if (b.size() < 26 || !known_bmp_header(le32(b, 14)))
    throw SpecError(file, "", "a damaged BMP file: no header of a known size after its first 14 bytes");
  const std::uint32_t header = le32(b, 14);
  if (b.size() < 14 + std::size_t{header}) throw SpecError(file, "", "a damaged BMP file: it ends inside its header");
  BmpLayout l;
  std::uint32_t compression = 0, colours_used = 0;
  if (header == 12) {  // OS/2: 16-bit sizes, always bottom-up, palette entries of 3 bytes
    l.width = le16(b, 18);
    l.height = le16(b, 20);
    l.bits = le16(b, 24);
    l.palette_entry = 3;
  } else {
    l.width = static_cast<std::int32_t>(le32(b, 18));
    const auto height = static_cast<std::int32_t>(le32(b, 22));
    l.top_down = height < 0;
    l.height = std::abs(static_cast<std::int64_t>(height));
    l.bits = le16(b, 28);
    compression = le32(b, 30);
    colours_used = le32(b, 46);
  }
  if (l.bits != 8 && l.bits != 24 && l.bits != 32)
    throw SpecError(file, "", fmt::format("a BMP of {} bits a pixel; 8, 24 and 32 are read", l.bits));
  check_bmp_compression(b, compression, l.bits, file);
  check_image_size(l.height, l.width, file);
  l.pixels = le32(b, 10);
  l.row_bytes = static_cast<std::size_t>((l.width * l.bits + 31) / 32 * 4);
  const std::size_t need = static_cast<std::size_t>(l.height) * l.row_bytes;
  if (l.pixels > b.size() || b.size() - l.pixels < need)
    throw SpecError(file, "",
                    fmt::format("a damaged BMP file: {} bytes of pixels from byte {}, but the file has {} bytes", need,
                                l.pixels, b.size()));
  if (l.bits == 8) {
    if (colours_used > 256)
      throw SpecError(file, "", fmt::format("a damaged BMP file: a palette of {} colours for 8 bits", colours_used));
    l.palette = 14 + std::size_t{header};
    l.colours = colours_used == 0 ? 256 : colours_used;
    // An OS/2 file's palette is as long as the room before the pixels.
    if (header == 12) l.colours = std::min<std::size_t>(256, (l.pixels > l.palette ? l.pixels - l.palette : 0) / 3);
    if (l.palette + l.colours * l.palette_entry > b.size())
      throw SpecError(file, "", "a damaged BMP file: it ends inside its palette");
  }
  return l;
}

}  // namespace

bool looks_like_bmp(std::string_view bytes) {
  return bytes.size() >= 18 && bytes.starts_with("BM") && known_bmp_header(le32(bytes, 14));
}

bool looks_like_gif(std::string_view bytes) { return bytes.starts_with("GIF87a") || bytes.starts_with("GIF89a"); }

DecodedImage decode_bmp(std::string_view bytes, int channels, const std::string& file) {
  TCTL_CHECK(channels == 1 || channels == 3, "decode_bmp: 1 or 3 channels");
  const BmpLayout l = bmp_layout(bytes, file);
  DecodedImage rgb{l.height, l.width, 3, std::vector<std::uint8_t>(static_cast<std::size_t>(l.height * l.width * 3))};
  const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
  std::uint8_t* out = rgb.pixels.data();
  for (std::int64_t y = 0; y < l.height; ++y) {
    const std::int64_t stored = l.top_down ? y : l.height - 1 - y;
    const std::uint8_t* row = data + l.pixels + static_cast<std::size_t>(stored) * l.row_bytes;
    for (std::int64_t x = 0; x < l.width; ++x, out += 3) {
      const std::uint8_t* bgr = row + x * (l.bits / 8);
      if (l.bits == 8) {
        if (*bgr >= l.colours)
          throw SpecError(
              file, "",
              fmt::format("a damaged BMP file: colour {} of a palette of {} at pixel ({}, {})", *bgr, l.colours, x, y));
        bgr = data + l.palette + *bgr * l.palette_entry;
      }
      out[0] = bgr[2];
      out[1] = bgr[1];
      out[2] = bgr[0];
    }
  }
  return with_channels(std::move(rgb), channels);
}

namespace {

struct GifSource {
  std::string_view bytes;
  std::size_t at = 0;
};

int gif_read(GifFileType* gif, GifByteType* out, int n) {
  auto* s = static_cast<GifSource*>(gif->UserData);
  const std::size_t k = std::min(static_cast<std::size_t>(std::max(n, 0)), s->bytes.size() - s->at);
  std::memcpy(out, s->bytes.data() + s->at, k);
  s->at += k;
  return static_cast<int>(k);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};
using GifFile = std::unique_ptr<GifFileType, GifCloser>;

[[noreturn]] void gif_failed(const std::string& file, int error) {
  const char* why = GifErrorString(error);
  throw SpecError(file, "", std::string("a GIF file giflib cannot read: ") + (why != nullptr ? why : "unknown error"));
}

// Reads up to the first frame's descriptor; the transparent index its graphics control block names (or -1).
int first_frame(GifFileType* gif, const std::string& file) {
  int transparent = NO_TRANSPARENT_COLOR;
  for (;;) {
    GifRecordType record = UNDEFINED_RECORD_TYPE;
    if (DGifGetRecordType(gif, &record) == GIF_ERROR) gif_failed(file, gif->Error);
    if (record == IMAGE_DESC_RECORD_TYPE) {
      if (DGifGetImageDesc(gif) == GIF_ERROR) gif_failed(file, gif->Error);
      return transparent;
    }
    if (record == TERMINATE_RECORD_TYPE) throw SpecError(file, "", "a GIF file without a frame");
    if (record != EXTENSION_RECORD_TYPE) continue;
    int code = 0;
    GifByteType* block = nullptr;
    if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) gif_failed(file, gif->Error);
    // The first sub-block holds a graphics control block, after its length: flags (bit 0: a transparent
    // index is given), the delay (2 bytes), the index. Read here, since giflib's DGifExtensionToGCB refuses a
    // block longer than 4 bytes, which Pillow and browsers read.
    if (code == GRAPHICS_EXT_FUNC_CODE && block != nullptr && block[0] >= 4)
      transparent = (block[1] & 1) != 0 ? block[4] : NO_TRANSPARENT_COLOR;
    while (block != nullptr)
      if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) gif_failed(file, gif->Error);
  }
}

// Calls put(y, row) for each of the frame's rows in the order the file stores them (an interlaced frame holds
// every 8th row from 0, every 8th from 4, every 4th from 2, then every 2nd from 1), from one row buffer, so a
// frame larger than the logical screen costs a row of memory, not the whole frame.
template <class Put>
void for_each_frame_row(GifFileType* gif, const std::string& file, Put put) {
  const GifImageDesc& d = gif->Image;
  std::vector<GifPixelType> row(static_cast<std::size_t>(d.Width));
  auto read_row = [&](int y) {
    if (DGifGetLine(gif, row.data(), d.Width) == GIF_ERROR) gif_failed(file, gif->Error);
    put(y, row.data());
  };
  if (!d.Interlace) {
    for (int y = 0; y < d.Height; ++y) read_row(y);
    return;
  }
  constexpr std::array<int, 4> kStart{0, 4, 2, 1}, kStep{8, 8, 4, 2};
  for (std::size_t pass = 0; pass < kStart.size(); ++pass)
    for (int y = kStart[pass]; y < d.Height; y += kStep[pass]) read_row(y);
}

}  // namespace

DecodedImage decode_gif(std::string_view bytes, int channels, const std::string& file) {
  TCTL_CHECK(channels == 1 || channels == 3, "decode_gif: 1 or 3 channels");
  GifSource source{bytes};
  int error = 0;
  const GifFile gif(DGifOpen(&source, gif_read, &error));
  if (!gif) gif_failed(file, error);
  check_image_size(gif->SHeight, gif->SWidth, file);
  const int transparent = first_frame(gif.get(), file);
  const GifImageDesc& d = gif->Image;
  const ColorMapObject* palette = d.ColorMap != nullptr ? d.ColorMap : gif->SColorMap;
  if (palette == nullptr) throw SpecError(file, "", "a damaged GIF file: its first frame has no palette");
  // The logical screen, black where the frame does not reach or is transparent, as TensorFlow leaves it; what
  // of the frame lies outside the screen is clipped, as TensorFlow clips it.
  DecodedImage rgb{gif->SHeight, gif->SWidth, 3,
                   std::vector<std::uint8_t>(static_cast<std::size_t>(gif->SHeight) * gif->SWidth * 3)};
  const int left = std::max(d.Left, 0), right = std::min(d.Left + d.Width, gif->SWidth);
  for_each_frame_row(gif.get(), file, [&](int frame_y, const GifPixelType* indices) {
    const int y = d.Top + frame_y;
    if (y < 0 || y >= gif->SHeight) return;
    for (int x = left; x < right; ++x) {
      const int index = indices[x - d.Left];
      if (index == transparent) continue;
      if (index >= palette->ColorCount)
        throw SpecError(file, "",
                        fmt::format("a damaged GIF file: colour {} of a palette of {} at pixel ({}, {})", index,
                                    palette->ColorCount, x, y));
      const GifColorType& c = palette->Colors[index];
      std::uint8_t* out = &rgb.pixels[(static_cast<std::size_t>(y) * gif->SWidth + static_cast<std::size_t>(x)) * 3];
      out[0] = c.Red;
      out[1] = c.Green;
      out[2] = c.Blue;
    }
  });
  return with_channels(std::move(rgb), channels);
}

}  // namespace tctl
