// PNG output with the generation parameters embedded as an iTXt text chunk, as other
// diffusion front-ends do, plus the float image -> RGB8 conversion diffusers uses.
//
//   std::vector<uint8_t> rgb = image_to_rgb8(image.f32(), h, w);    // image: [3, H, W] in [0,1]
//   write_png("out.png", rgb.data(), w, h, "seed: 42, steps: 50, sampler: ddim");
//   std::string p = read_png_text("out.png", "parameters");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dit {

// Writes interleaved RGB8 pixels as a PNG, atomically, with an uncompressed UTF-8 iTXt
// chunk "parameters" right after IHDR. Throws dit::Error naming the path.
void write_png(const std::string& path, const uint8_t* rgb, int width, int height, const std::string& parameters);

// [3, H, W] floats in [0,1] -> interleaved RGB8, exactly as diffusers' numpy_to_pil:
// (x * 255).round() (half to even), clamped to [0, 255]; NaN -> 0.
std::vector<uint8_t> image_to_rgb8(const float* chw, int height, int width);

// The text of the first tEXt or uncompressed iTXt chunk with this keyword; throws dit::Error
// if the file is not a valid PNG or has no such chunk.
std::string read_png_text(const std::string& path, const std::string& keyword);

// CRC-32 (ISO-HDLC, as PNG uses) of `n` bytes, continuing from `crc` (0 to start).
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);

}  // namespace dit
