#include "runtime/npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit {
namespace {

const char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  if (s.size() == 1) out += ",";
  return out + ")";
}

// Magic, version 1.0, header length, and the dict padded with spaces and '\n' to 64 bytes.
std::string npy_header(const Shape& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_tuple(shape) + ", }";
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string h(kMagic, 6);
  h += '\x01';
  h += '\x00';
  h += char(dict.size() & 0xff);
  h += char(dict.size() >> 8);
  return h + dict;
}

// A tiny parser for the header dict: {'key': value, ...}, values '<str>', True/False or (ints,).
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

  void parse(std::string* descr, bool* fortran, Shape* shape, bool* has_shape) {
    expect('{');
    while (skip_ws(), peek() != '}') {
      std::string key = quoted();
      expect(':');
      if (key == "descr") *descr = quoted();
      else if (key == "fortran_order") *fortran = boolean();
      else if (key == "shape") {
        *shape = tuple();
        *has_shape = true;
      } else fail("unexpected key '" + printable(key) + "'");
      skip_ws();
      if (peek() == ',') ++i_;
      else if (peek() != '}') fail("expected ',' or '}'");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ": bad .npy header: " + what + " at character " + std::to_string(i_));
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string quoted() {
    skip_ws();
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string v = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return v;
  }
  bool boolean() {
    skip_ws();
    for (bool v : {true, false}) {
      const std::string word = v ? "True" : "False";
      if (s_.compare(i_, word.size(), word) == 0) {
        i_ += word.size();
        return v;
      }
    }
    fail("expected True or False");
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    while (skip_ws(), peek() != ')') {
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a non-negative integer in shape");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("shape dimension too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      shape.push_back(v);
      skip_ws();
      if (peek() == ',') ++i_;
      else if (peek() != ')') fail("expected ',' or ')' in shape");
    }
    ++i_;
    return shape;
  }

  const std::string& path_;
  const std::string& s_;
  size_t i_ = 0;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) DIT_FAIL(path << ": cannot open: " << std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  DIT_CHECK(t.defined(), path << ": cannot write an undefined tensor");
  const Tensor f = t.dtype() == DType::F32 ? t : t.to(DType::F32);
  const std::string header = npy_header(f.shape());
  AtomicFile out(path);
  out.write(header.data(), header.size());
  out.write(f.data(), f.nbytes());
  out.commit();
}

Tensor read_npy(const std::string& path) {
  const std::string file = read_all(path);
  DIT_CHECK(file.size() >= 10 && std::memcmp(file.data(), kMagic, 6) == 0, path << ": not a .npy file");
  const int major = static_cast<unsigned char>(file[6]);
  DIT_CHECK(major >= 1 && major <= 3, path << ": unsupported .npy version " << major);
  const size_t len_bytes = major == 1 ? 2 : 4;
  DIT_CHECK(file.size() >= 8 + len_bytes, path << ": truncated .npy header");
  size_t hlen = 0;
  for (size_t i = 0; i < len_bytes; ++i) hlen |= size_t(static_cast<unsigned char>(file[8 + i])) << (8 * i);
  const size_t data_start = 8 + len_bytes + hlen;
  DIT_CHECK(data_start <= file.size(), path << ": .npy header length past end of file (found " << hlen << ")");

  std::string descr;
  bool fortran = true, has_shape = false;
  Shape shape;
  const std::string header = file.substr(8 + len_bytes, hlen);
  HeaderParser(path, header).parse(&descr, &fortran, &shape, &has_shape);
  DIT_CHECK(descr == "<f4", path << ": unsupported .npy dtype (expected '<f4', found '" << printable(descr) << "')");
  DIT_CHECK(!fortran, path << ": Fortran-order .npy arrays are not supported");
  DIT_CHECK(has_shape, path << ": .npy header has no shape");

  uint64_t n = 1;
  for (int64_t d : shape)
    DIT_CHECK(!__builtin_mul_overflow(n, uint64_t(d), &n) && n <= (uint64_t(1) << 60),
              path << ": .npy shape " << shape_str(shape) << " is too large");
  const uint64_t have = file.size() - data_start;
  DIT_CHECK(have == n * 4, path << ": .npy data size does not match shape " << shape_str(shape) << " (expected "
                                 << n * 4 << " bytes, found " << have << ")");
  Tensor t = Tensor::empty(shape, DType::F32);
  std::memcpy(t.data(), file.data() + data_start, size_t(have));
  return t;
}

}  // namespace dit
