// printable(): untrusted text in one-line error messages — control characters (C0, DEL, C1)
// and bytes that are not UTF-8 escaped, valid UTF-8 kept, long text shortened.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/printable.h"

using dit::printable;

TEST_CASE("printable keeps text and valid UTF-8, escapes controls and invalid bytes", "[runtime][printable]") {
  CHECK(printable("golden retriever") == "golden retriever");
  CHECK(printable("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\xa6\x8a") == "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\xa6\x8a");
  CHECK(printable("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(printable(std::string("\x1b[31mred\x7f", 9)) == "\\x1b[31mred\\x7f");
  CHECK(printable(std::string("x\0y", 3)) == "x\\x00y");
  // C1 controls as UTF-8 (U+009B is CSI on some terminals), kept U+00A0 and above
  CHECK(printable("\xc2\x9b" "2J") == "\\xc2\\x9b2J");
  CHECK(printable("\xc2\xa0") == "\xc2\xa0");
  // not UTF-8: a Latin-1 byte, a stray continuation byte, an overlong '/', a surrogate,
  // beyond U+10FFFF, and a sequence cut short by the end of the text
  CHECK(printable("caf\xe9!") == "caf\\xe9!");
  CHECK(printable("\x80") == "\\x80");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
  CHECK(printable("ok\xe6\x97") == "ok\\xe6\\x97");
  // long text is cut and marked
  const std::string p = printable(std::string(500, 'a'), 40);
  CHECK(p == std::string(40, 'a') + "...");
}
