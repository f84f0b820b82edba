// File: core/json.cc
// The JSON text writer and the cursor Loom's strict JSON readers are built on.
#include "core/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace loom {

namespace {

// What a byte that is not UTF-8 is written as (U+FFFD), as decoders do.
constexpr uint32_t kReplacementCharacter = 0xFFFD;

}  // namespace

// --- writing ---------------------------------------------------------------------

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (size_t i = 0; i < text.size();) {
    size_t length = utf8_sequence_length(text, i);
    char c = text[i];
    if (length == 0) {
      append_utf8(out, kReplacementCharacter);
      length = 1;
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out.append(text, i, length);
    }
    i += length;
  }
  out += '"';
}

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : "null";
}

// --- reading ---------------------------------------------------------------------

JsonReader::JsonReader(std::string_view text, std::string prefix, std::string subject)
    : text_(text), prefix_(std::move(prefix)), subject_(std::move(subject)) {}

void JsonReader::syntax_error(std::string_view message) const {
  throw IoError(
      fmt::format("{}: {} is not valid JSON at byte {}: {}", prefix_, subject_, pos_, message));
}

void JsonReader::schema_error(std::string_view message) const {
  throw IoError(fmt::format("{}: {}", prefix_, message));
}

std::string JsonReader::quoted_key_expected(std::string_view what) {
  return fmt::format("expected a quoted key in {}", what);
}

std::string JsonReader::duplicate_key(std::string_view key, std::string_view what) {
  return fmt::format("duplicate key '{}' in {}", key, what);
}

void JsonReader::skip_space() {
  while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
    ++pos_;
  }
}

bool JsonReader::consume(char c) {
  if (at_end() || peek() != c) return false;
  ++pos_;
  return true;
}

void JsonReader::expect(char c, std::string_view context) {
  if (consume(c)) return;
  syntax_error(at_end() ? fmt::format("the {} ends where '{}' was expected in {}", subject_, c,
                                      context)
                        : fmt::format("expected '{}' in {}, found {}", c, context, found()));
}

std::string JsonReader::found() const {
  // The whole character, not its first byte: a lone lead byte is not text.
  const size_t length = std::max<size_t>(utf8_sequence_length(text_, pos_), 1);
  const std::string_view character = text_.substr(pos_, length);
  constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
  return character == kByteOrderMark
             ? fmt::format("'{}' (a UTF-8 byte-order mark; write the text without it)", character)
             : fmt::format("'{}'", character);
}

std::string JsonReader::value_kind() const {
  char c = peek();
  if (at_end()) return "the end of the " + subject_;
  if (c == '"') return "a string";
  if (c == '{') return "an object";
  if (c == '[') return "an array";
  if (c == 't' || c == 'f') return "a boolean";
  if (c == 'n') return "null";
  return c == '-' || (c >= '0' && c <= '9') ? "a number" : "something that is not JSON";
}

void JsonReader::expect_kind(char open, std::string_view kind, std::string_view what) const {
  if (peek() != open) schema_error(fmt::format("{} must be {}, got {}", what, kind, value_kind()));
}

uint32_t JsonReader::parse_hex4() {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i, ++pos_) {
    char c = peek();
    int digit = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
    if (digit < 0) syntax_error("\\u must be followed by four hex digits");
    value = value * 16 + digit;
  }
  return value;
}

// After "\u": one code point, joining a UTF-16 surrogate pair.
uint32_t JsonReader::parse_unicode_escape() {
  uint32_t unit = parse_hex4();
  if (unit >= 0xDC00 && unit <= 0xDFFF) syntax_error("lone low surrogate in \\u escape");
  if (unit < 0xD800 || unit > 0xDBFF) return unit;
  if (!consume('\\') || !consume('u')) {
    syntax_error("high surrogate not followed by \\u low surrogate");
  }
  uint32_t low = parse_hex4();
  if (low < 0xDC00 || low > 0xDFFF) syntax_error("high surrogate not followed by a low surrogate");
  return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
}

// After a backslash.
void JsonReader::parse_escape(std::string& out) {
  constexpr std::string_view kEscaped = "\"\\/bfnrt", kMeaning = "\"\\/\b\f\n\r\t";
  if (consume('u')) {
    append_utf8(out, parse_unicode_escape());
    return;
  }
  size_t which = kEscaped.find(peek());
  if (at_end() || which == std::string_view::npos) syntax_error("unknown escape in string");
  out += kMeaning[which];
  ++pos_;
}

std::string JsonReader::parse_string() {
  expect('"', "a string");
  std::string out;
  while (true) {
    if (at_end()) syntax_error("unterminated string");
    char c = text_[pos_++];
    if (c == '"') return out;
    if (static_cast<unsigned char>(c) < 0x20) {
      --pos_;
      syntax_error("control character inside a string (escape it)");
    }
    if (c == '\\') {
      parse_escape(out);
    } else {
      out += c;
    }
  }
}

uint64_t JsonReader::parse_uint(std::string_view what) {
  if (peek() == '-') schema_error(fmt::format("{} is negative", what));
  if (peek() < '0' || peek() > '9') {
    schema_error(fmt::format("{} must be a non-negative integer, got {}", what, value_kind()));
  }
  size_t start = pos_;
  uint64_t value = 0;
  while (peek() >= '0' && peek() <= '9') {
    uint64_t digit = peek() - '0';
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      schema_error(fmt::format("{} overflows: it does not fit in 64 bits", what));
    }
    value = value * 10 + digit;
    ++pos_;
  }
  if (text_[start] == '0' && pos_ - start > 1) syntax_error("numbers may not have leading zeros");
  if (peek() == '.' || peek() == 'e' || peek() == 'E') {
    schema_error(fmt::format("{} must be an integer", what));
  }
  return value;
}

std::vector<uint64_t> JsonReader::parse_uint_array(std::string_view what) {
  expect_kind('[', "an array", what);
  expect('[', what);
  std::vector<uint64_t> values;
  skip_space();
  if (consume(']')) return values;
  while (true) {
    skip_space();
    values.push_back(parse_uint(what));
    skip_space();
    if (consume(']')) return values;
    expect(',', what);
  }
}

}  // namespace loom
