// printable(): makes untrusted text (tensor names, JSON keys, chunk types read from a file)
// safe to put into a one-line error message: control characters and bytes that could
// break the line or drive a terminal are escaped (\n, \t, \xNN), as are bytes that are not
// UTF-8; long text is shortened.
//
//   throw Error(path + ": tensor '" + printable(name) + "': ...");
#pragma once

#include <cstdio>
#include <string>

namespace dit {

// Length of the well-formed UTF-8 sequence at s[i] (1..4), or 0 if the bytes there are not one
// (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, cut short).
inline size_t utf8_sequence_length(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n;
  unsigned lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return 0;
  }
  return n;
}

// Control characters (C0, DEL, and C1 U+0080..U+009F, which some terminals obey) and bytes
// that are not well-formed UTF-8 become \n, \t, \r or \xNN; valid UTF-8 text stays readable.
inline std::string printable(const std::string& s, size_t max_len = 120) {
  std::string out;
  auto escape = [&](unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  };
  for (size_t i = 0; i < s.size() && out.size() < max_len;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_sequence_length(s, i);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (n == 1 && (c < 0x20 || c == 0x7f)) escape(c);
    else if (n == 0) escape(c);
    else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {  // C1 control
      escape(c);
      escape(static_cast<unsigned char>(s[i + 1]));
    } else {
      out.append(s, i, n);
    }
    i += n == 0 ? 1 : n;
  }
  if (out.size() >= max_len && s.size() > max_len) out += "...";
  return out;
}

}  // namespace dit
