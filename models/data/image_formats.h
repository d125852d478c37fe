// The two image formats Keras' image_dataset_from_directory lists besides PNG and JPEG: BMP, read by our own
// parser (the format is a header and rows of samples), and GIF, decoded by Debian's giflib. Both as
// TensorFlow's decode_image(expand_animations=False) reads them, so as Keras reads a file, and where TensorFlow
// refuses a file a user would expect to read, read as the format means it:
//
//   BMP  uncompressed, 8 bits a pixel through its palette (TensorFlow takes the index itself as gray, which
//        is the same for the usual gray ramp), 24 (BGR) or 32 (BGRA, alpha dropped; bit fields only in that
//        order); rows bottom-up, or top-down for a negative height, each padded to 4 bytes. The Windows
//        headers of 40 bytes and more, and OS/2's 12-byte one. Compressed files (RLE) and 1, 4 and 16 bits
//        a pixel are refused, as TensorFlow refuses them.
//   GIF  the first frame on the logical screen: pixels outside the frame, and those of its transparent
//        index, black; colours from the frame's own palette or else the global one; an index past the
//        palette refused. Interlaced frames are put in order. A frame past the size limits is refused even
//        where the screen would cut it to less.
//
// Either read for 1 channel (TensorFlow refuses both) is made gray by the weights of JPEG's luma and
// Pillow's "L", (19595 R + 38470 G + 7471 B + 32768) >> 16 (0.299, 0.587, 0.114 rounded); an 8-bit BMP
// whose palette is gray reads its gray as is.
#pragma once

#include <string>
#include <string_view>

#include "models/data/images.h"

namespace tctl {

// Whether `bytes` begin as a BMP file does: "BM" and a known header size (12, 40, 52, 56, 64, 108 or 124) at
// byte 14, so a CSV whose first column is "BMI" is not taken for one.
bool looks_like_bmp(std::string_view bytes);
// Whether `bytes` begin as a GIF file does ("GIF87a" or "GIF89a").
bool looks_like_gif(std::string_view bytes);

// A whole BMP or GIF file decoded into `channels` channels (1 or 3). SpecError(file, "", ...) for a file that
// is damaged, of a kind not read (above), or larger than kMaxImageSide or kMaxImagePixels.
DecodedImage decode_bmp(std::string_view bytes, int channels, const std::string& file);
DecodedImage decode_gif(std::string_view bytes, int channels, const std::string& file);

}  // namespace tctl
