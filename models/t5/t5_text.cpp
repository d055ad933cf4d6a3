#include "models/t5/t5_text.h"

#include <locale.h>
#include <wchar.h>
#include <wctype.h>

#include <cstdio>
#include <vector>

#include "runtime/error.h"

namespace dit {
namespace {

// Decodes UTF-8 strictly; throws naming `what` (the prompt, the negative prompt) and the first
// bad byte's offset.
std::u32string decode(const std::string& s, const char* what_text = "prompt") {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  auto fail = [&](size_t at, const char* what) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s is not valid UTF-8: %s at byte %zu (0x%02x)", what_text, what, at, p[at]);
    throw Error(buf);
  };
  for (size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    int len = 0;  // fail() throws: the zeros are never used
    char32_t c = 0, min = 0;
    if ((b & 0xe0) == 0xc0) {
      len = 2, c = b & 0x1f, min = 0x80;
    } else if ((b & 0xf0) == 0xe0) {
      len = 3, c = b & 0x0f, min = 0x800;
    } else if ((b & 0xf8) == 0xf0 && b <= 0xf4) {
      len = 4, c = b & 0x07, min = 0x10000;
    } else {
      fail(i, (b & 0xc0) == 0x80 ? "unexpected continuation byte" : "invalid lead byte");
    }
    for (int k = 1; k < len; ++k) {
      if (i + k >= n) fail(i, "truncated sequence");
      if ((p[i + k] & 0xc0) != 0x80) fail(i + k, "expected a continuation byte");
      c = (c << 6) | (p[i + k] & 0x3f);
    }
    if (c < min) fail(i, "overlong encoding");
    if (c >= 0xd800 && c <= 0xdfff) fail(i, "encoded surrogate");
    if (c > 0x10ffff) fail(i, "code point beyond U+10FFFF");
    out.push_back(c);
    i += size_t(len);
  }
  return out;
}

std::string encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out += char(c);
    } else if (c < 0x800) {
      out += char(0xc0 | (c >> 6));
      out += char(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += char(0xe0 | (c >> 12));
      out += char(0x80 | ((c >> 6) & 0x3f));
      out += char(0x80 | (c & 0x3f));
    } else {
      out += char(0xf0 | (c >> 18));
      out += char(0x80 | ((c >> 12) & 0x3f));
      out += char(0x80 | ((c >> 6) & 0x3f));
      out += char(0x80 | (c & 0x3f));
    }
  }
  return out;
}

locale_t c_utf8() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
    if (!l) throw Error("cannot load the C.UTF-8 locale (needed to lower-case prompts like Python)");
    return l;
  }();
  return loc;
}

bool is_cased(char32_t c, locale_t loc) { return iswupper_l(wint_t(c), loc) || iswlower_l(wint_t(c), loc); }

bool is_case_ignorable(char32_t c, locale_t loc) {
  switch (c) {  // Word_Break MidLetter, MidNumLet, Single_Quote
    case 0x27: case 0x2e: case 0x3a: case 0xb7: case 0x387: case 0x55f: case 0x5f4: case 0x2018: case 0x2019:
    case 0x2024: case 0x2027: case 0xfe13: case 0xfe52: case 0xfe55: case 0xff07: case 0xff0e: case 0xff1a:
    // Lm/Sk/Cf of Latin-1 and Greek
    case 0x5e: case 0x60: case 0xa8: case 0xad: case 0xaf: case 0xb4: case 0xb8: case 0x374: case 0x375:
    case 0x37a: case 0x384: case 0x385:
      return true;
    default:
      break;
  }
  if (c >= 0x2b0 && c <= 0x2ff) return true;  // spacing modifier letters
  if ((c >= 0x1160 && c <= 0x11ff) || (c >= 0xd7b0 && c <= 0xd7ff)) return false;  // Hangul jamo (Lo, width 0)
  // Zero width in glibc: nonspacing and enclosing marks, format characters. wcwidth reads
  // the calling thread's locale: switch to C.UTF-8 for the call.
  const locale_t saved = uselocale(loc);
  const int width = wcwidth(wchar_t(c));
  uselocale(saved);
  return c != 0 && width == 0;
}

// CPython's handle_capital_sigma: final (ς) when a cased letter precedes (skipping
// case-ignorable characters) and none follows.
char32_t lower_sigma(const std::u32string& s, size_t i, locale_t loc) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(s[j - 1], loc)) --j;
  bool final_sigma = j > 0 && is_cased(s[j - 1], loc);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < s.size() && is_case_ignorable(s[k], loc)) ++k;
    final_sigma = k == s.size() || !is_cased(s[k], loc);
  }
  return final_sigma ? 0x3c2 : 0x3c3;
}

}  // namespace

void check_utf8(const std::string& text, const char* what) { decode(text, what); }

bool python_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string python_lower(const std::string& text) {
  const std::u32string s = decode(text);
  const locale_t loc = c_utf8();
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    if (c == 0x130) {  // İ -> i + combining dot above
      out.push_back(U'i');
      out.push_back(0x307);
    } else if (c == 0x3a3) {
      out.push_back(lower_sigma(s, i, loc));
    } else {
      out.push_back(char32_t(towlower_l(wint_t(c), loc)));
    }
  }
  return encode(out);
}

std::string python_strip(const std::string& text) {
  const std::u32string s = decode(text);
  size_t b = 0, e = s.size();
  while (b < e && python_isspace(s[b])) ++b;
  while (e > b && python_isspace(s[e - 1])) --e;
  return encode(s.substr(b, e - b));
}

std::string pixart_preprocess(const std::string& text) { return python_strip(python_lower(text)); }

}  // namespace dit
