// Prompt preprocessing: Python's str.lower().strip() (expected strings produced by Python 3.11,
// Unicode 14, the reference's interpreter) and strict UTF-8.
#include <catch2/catch.hpp>

#include "models/t5/t5_text.h"
#include "t5_test_util.h"

using namespace dit;

TEST_CASE("pixart_preprocess equals Python's text.lower().strip()", "[t5][text]") {
  // {input, Python's input.lower().strip()}
  const std::pair<const char*, const char*> cases[] = {
      {"   A Red FOX in the Snow!  ", "a red fox in the snow!"},
      {"İstanbul", "i\xcc\x87stanbul"},               // U+0130 -> i + U+0307
      {"ΟΔΟΣ ΣΑΣ", "οδος σας"},                       // final sigma at word ends
      {"ΑΣ'Α", "ασ'α"},                               // apostrophe is case-ignorable: not final
      {"ΑΣ'", "ας'"},
      {"Σ", "σ"},                                     // no cased letter before: not final
      {"ΑΣ\xcc\x81Α", "ασ\xcc\x81α"},                 // combining acute skipped
      {"ΑΣ\xcc\x81", "ας\xcc\x81"},
      {"ΣΑΣ.", "σας."},
      {"A\xcd\x85Σ", "a\xcd\x85ς"},                   // U+0345 (cased, Mn) before the sigma
      {"ΌΣΟΣ,ΠΟΥ", "όσος,που"},
      {"ẞ Straße", "ß straße"},
      {"ǅ ǈ", "ǆ ǉ"},                                 // titlecase digraphs
      {"ＡＢＣ", "ａｂｃ"},                           // full width (NFKC is the tokenizer's job)
      {"Ω K Å", "ω k å"},                             // ohm, kelvin, angstrom signs
      {"Ⅻ Ⓐ 𐐀", "ⅻ ⓐ 𐐨"},
      {"ÀÉÎÕÜ", "àéîõü"},
      {"\xc2\xa0\xe3\x80\x80 X \xe2\x80\xa9\x1c", "x"},  // NBSP, ideographic space, U+2029, U+001C
      {"\xe2\x80\x8b X", "\xe2\x80\x8b x"},             // U+200B is not whitespace in Python
      {"\x1f\xc2\x85tab\t\n", "tab"},                    // U+001F, U+0085 are
      {"", ""},
      {" \t\n ", ""},
  };
  for (const auto& [in, want] : cases) {
    INFO("input: " << in);
    CHECK(pixart_preprocess(in) == want);
  }
}

TEST_CASE("python_isspace is Python's str.isspace", "[t5][text]") {
  // [hex(c) for c in range(0x110000) if chr(c).isspace()]
  const char32_t spaces[] = {0x9,    0xa,    0xb,    0xc,    0xd,    0x1c,   0x1d,   0x1e,   0x1f,   0x20,
                             0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                             0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
  size_t k = 0, n = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    const bool want = k < sizeof spaces / sizeof spaces[0] && spaces[k] == c;
    if (want) ++k;
    if (python_isspace(c) != want) {
      FAIL_CHECK("code point " << std::hex << uint32_t(c));
      if (++n > 5) break;
    }
  }
  CHECK(k == sizeof spaces / sizeof spaces[0]);
}

TEST_CASE("invalid UTF-8 is refused with the byte offset", "[t5][text]") {
  struct Bad {
    std::string text;
    const char* what;
    size_t at;
  };
  const Bad bad[] = {
      {"ab\xff", "invalid lead byte", 2},
      {"a\x80", "unexpected continuation byte", 1},
      {"caf\xc3", "truncated sequence", 3},
      {"x\xe2\x82", "truncated sequence", 1},
      {"\xc3\x28", "expected a continuation byte", 1},
      {"\xc0\xaf", "overlong encoding", 0},
      {"\xe0\x80\xaf", "overlong encoding", 0},
      {"ok \xed\xa0\x80", "encoded surrogate", 3},
      {"\xf4\x90\x80\x80", "code point beyond U+10FFFF", 0},
      {"\xf5\x80\x80\x80", "invalid lead byte", 0},
  };
  for (const Bad& b : bad) {
    const std::string msg = t5_test::error_of([&] { pixart_preprocess(b.text); });
    CHECK(msg.find("not valid UTF-8") != std::string::npos);
    CHECK(msg.find(b.what) != std::string::npos);
    CHECK(msg.find("at byte " + std::to_string(b.at)) != std::string::npos);
    CHECK_THROWS_AS(check_utf8(b.text), dit::Error);
  }
  CHECK_NOTHROW(check_utf8("naïve café — ½ ＡＢＣ 𐐀"));
  CHECK_NOTHROW(check_utf8(std::string("nul \0 inside", 12)));
}
