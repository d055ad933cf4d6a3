// printable(): makes untrusted text (tensor names, JSON keys, chunk types read from a file)
// safe to put into a one-line error message: control characters and bytes that could
// break the line are escaped (\n, \t, \xNN) and long text is shortened.
//
//   throw Error(path + ": tensor '" + printable(name) + "': ...");
#pragma once

#include <cstdio>
#include <string>

namespace dit {

inline std::string printable(const std::string& s, size_t max_len = 120) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < max_len; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  if (out.size() >= max_len && s.size() > max_len) out += "...";
  return out;
}

}  // namespace dit
