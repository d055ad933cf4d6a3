#include "runtime/png.h"

#include <stb/stb_image_write.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>

#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit {
namespace {

const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr size_t kIhdrEnd = 8 + 4 + 4 + 13 + 4;  // signature + IHDR chunk

void put_u32be(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

uint32_t get_u32be(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// A complete chunk: length, type, data, CRC over type and data.
std::vector<uint8_t> make_chunk(const char type[4], const std::string& data) {
  std::vector<uint8_t> c;
  put_u32be(c, uint32_t(data.size()));
  c.insert(c.end(), type, type + 4);
  c.insert(c.end(), data.begin(), data.end());
  put_u32be(c, crc32(c.data() + 4, 4 + data.size()));
  return c;
}

// iTXt data: keyword \0, compression flag 0, method 0, empty language \0, empty translation \0, text.
std::string itxt_data(const std::string& keyword, const std::string& text) {
  std::string d = keyword;
  d.push_back('\0');
  d.push_back('\0');
  d.push_back('\0');
  d.push_back('\0');
  d.push_back('\0');
  return d + text;
}

void append_bytes(void* ctx, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(ctx);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  out->insert(out->end(), p, p + size);
}

std::vector<uint8_t> encode_rgb(const std::string& path, const uint8_t* rgb, int width, int height) {
  std::vector<uint8_t> png;
  if (!stbi_write_png_to_func(append_bytes, &png, width, height, 3, rgb, width * 3))
    DIT_FAIL(path << ": PNG encoding failed");
  DIT_CHECK(png.size() > kIhdrEnd && std::memcmp(png.data(), kSignature, 8) == 0 &&
                std::memcmp(png.data() + 12, "IHDR", 4) == 0,
            path << ": PNG encoder produced an unexpected layout");
  return png;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) DIT_FAIL(path << ": cannot open: " << std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The text of a tEXt or iTXt chunk if its keyword matches; false otherwise.
bool chunk_text(const std::string& path, const std::string& type, const std::string& data,
                const std::string& keyword, std::string* text) {
  size_t nul = data.find('\0');
  if (nul == std::string::npos || data.compare(0, nul, keyword) != 0 || nul != keyword.size()) return false;
  if (type == "tEXt") {
    *text = data.substr(nul + 1);
    return true;
  }
  // iTXt: compression flag, method, language \0, translated keyword \0, text
  size_t p = nul + 1;
  DIT_CHECK(p + 2 <= data.size(), path << ": truncated iTXt chunk '" << keyword << "'");
  DIT_CHECK(data[p] == 0, path << ": compressed iTXt chunk '" << keyword << "' is not supported");
  p += 2;
  size_t lang_end = data.find('\0', p);
  size_t trans_end = lang_end == std::string::npos ? lang_end : data.find('\0', lang_end + 1);
  DIT_CHECK(trans_end != std::string::npos, path << ": malformed iTXt chunk '" << keyword << "'");
  *text = data.substr(trans_end + 1);
  return true;
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  static uint32_t table[256];
  static bool ready = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)ready;
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

void write_png(const std::string& path, const uint8_t* rgb, int width, int height, const std::string& parameters) {
  DIT_CHECK(rgb != nullptr, path << ": no pixel data");
  DIT_CHECK(width > 0 && height > 0 && int64_t(width) * height * 3 <= INT_MAX / 2,
            path << ": bad image size (expected positive and at most ~350M pixels, found " << width << "x" << height << ")");
  DIT_CHECK(parameters.size() < (1u << 30), path << ": parameters text too long");
  std::vector<uint8_t> png = encode_rgb(path, rgb, width, height);
  std::vector<uint8_t> chunk = make_chunk("iTXt", itxt_data("parameters", parameters));
  png.insert(png.begin() + kIhdrEnd, chunk.begin(), chunk.end());
  write_file_atomic(path, png.data(), png.size());
}

std::vector<uint8_t> image_to_rgb8(const float* chw, int height, int width) {
  DIT_CHECK(height > 0 && width > 0, "image_to_rgb8: bad image size " << width << "x" << height);
  const size_t plane = size_t(height) * size_t(width);
  std::vector<uint8_t> out(plane * 3);
  for (size_t i = 0; i < plane; ++i) {
    for (size_t c = 0; c < 3; ++c) {
      float v = std::nearbyint(chw[c * plane + i] * 255.0f);  // default mode: half to even
      out[i * 3 + c] = std::isnan(v) ? 0 : uint8_t(std::fmin(std::fmax(v, 0.0f), 255.0f));
    }
  }
  return out;
}

std::string read_png_text(const std::string& path, const std::string& keyword) {
  const std::string file = read_all(path);
  DIT_CHECK(file.size() >= 8 && std::memcmp(file.data(), kSignature, 8) == 0, path << ": not a PNG file");
  size_t pos = 8;
  while (true) {
    DIT_CHECK(pos + 12 <= file.size(), path << ": truncated PNG (no IEND chunk)");
    const uint8_t* p = reinterpret_cast<const uint8_t*>(file.data()) + pos;
    const uint32_t len = get_u32be(p);
    DIT_CHECK(len <= file.size() - pos - 12, path << ": truncated PNG chunk at byte " << pos);
    const std::string type = file.substr(pos + 4, 4);
    DIT_CHECK(get_u32be(p + 8 + len) == crc32(p + 4, 4 + size_t(len)),
              path << ": CRC mismatch in PNG chunk '" << printable(type) << "' at byte " << pos);
    if (type == "IEND") break;
    std::string text;
    if ((type == "tEXt" || type == "iTXt") && chunk_text(path, type, file.substr(pos + 8, len), keyword, &text))
      return text;
    pos += 12 + size_t(len);
  }
  DIT_FAIL(path << ": no text chunk '" << keyword << "'");
}

}  // namespace dit
