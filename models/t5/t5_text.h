// Prompt text as PixArt's pipelines prepare it before tokenizing: Python's
// `text.lower().strip()` (diffusers `_text_preprocessing` when clean_caption is off or
// unavailable), on UTF-8 bytes.
//
//   std::string t = pixart_preprocess("   A Red FOX in the Snow!  ");   // "a red fox in the snow!"
//
// lower(): glibc's towlower_l in the C.UTF-8 locale, which equals Python 3.11's str.lower()
// character for character (Unicode 14, checked over every code point) except for:
//   * U+0130 (İ) -> "i̇" (i + U+0307), Python's one multi-character lower-case mapping: done here;
//   * Greek capital sigma U+03A3 -> final ς (U+03C2) at the end of a word (CPython's
//     Final_Sigma rule): done here, with "cased" = glibc iswupper/iswlower (equal to Python's
//     Cased property on every code point) and "case-ignorable" = zero-width characters
//     (glibc wcwidth 0, Hangul jamo fillers excluded), the Word_Break MidLetter/MidNumLet/
//     Single_Quote characters and the Latin-1, Greek and spacing-modifier Lm/Sk characters.
//     This misses 381 Lm/Sk/Cf code points of other scripts that Python counts as
//     case-ignorable; they only matter between a Σ and a following letter.
// strip(): Python's str.isspace() characters at both ends (ASCII whitespace, U+001C–U+001F,
// U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
//
// Text that is not valid UTF-8 (bad lead byte, truncated or overlong sequence, surrogate,
// beyond U+10FFFF) is refused: dit::Error "prompt is not valid UTF-8: <what> at byte N".
#pragma once

#include <string>

namespace dit {

// Throws dit::Error "<what> is not valid UTF-8: ..." (naming the byte offset) unless `text` is
// valid UTF-8.
void check_utf8(const std::string& text, const char* what = "prompt");
// Python's str.lower() on UTF-8 text (see above).
std::string python_lower(const std::string& text);
// Python's str.strip() with no arguments on UTF-8 text.
std::string python_strip(const std::string& text);
bool python_isspace(char32_t c);
// python_strip(python_lower(text)), after check_utf8.
std::string pixart_preprocess(const std::string& text);

}  // namespace dit
