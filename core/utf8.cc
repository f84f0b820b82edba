// File: core/utf8.cc
// UTF-8 sequences, validation, encoding and the printable form of raw text.
#include "core/utf8.h"

#include <fmt/format.h>

namespace loom {

namespace {

// The code point of the valid `length`-byte sequence at `s`.
uint32_t decode(std::string_view s, size_t length) {
  auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[k])); };
  if (length == 1) return byte(0);
  uint32_t cp = byte(0) & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (byte(k) & 0x3F);
  return cp;
}

// Code points that print as nothing or rearrange the text around them.
bool invisible(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x200B && cp <= 0x200F) ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xFEFF;
}

bool shows_as_itself(uint32_t cp) {
  if (cp == '\n' || cp == '\t') return true;
  if (cp < 0x20 || cp == 0x7F) return false;
  return !invisible(cp);
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
  if (length == 0 || lead > 0xF4 || i + length > s.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  unsigned char second = byte(i + 1);
  if (lead == 0xE0 && second < 0xA0) return 0;  // overlong
  if (lead == 0xED && second > 0x9F) return 0;  // surrogate
  if (lead == 0xF0 && second < 0x90) return 0;  // overlong
  if (lead == 0xF4 && second > 0x8F) return 0;  // past U+10FFFF
  return length;
}

std::optional<size_t> invalid_utf8_at(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t length = utf8_sequence_length(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_sequence_length(text, i);
    const size_t span = length == 0 ? 1 : length;
    if (length != 0 && shows_as_itself(decode(text.substr(i), length))) {
      out.append(text, i, length);
    } else {
      for (size_t k = i; k < i + span; ++k) {
        out += fmt::format("\\x{:02X}", static_cast<unsigned char>(text[k]));
      }
    }
    i += span;
  }
  return out;
}

}  // namespace loom
