// File: core/json.h
// Loom's one JSON text writer and the cursor its strict readers are built on.
// Everything Loom writes as JSON (safetensors headers, bench result lines, the
// trainers' .jsonl metrics) spells strings and numbers through these functions,
// so escaping and the NaN policy are decided here once:
//
//   std::string line = fmt::format("{{\"model\": {}, \"ms\": {}}}",
//                                  json_string(name), json_number(ms));
//
// Strings: '"' and '\' are backslash-escaped, control characters below 0x20
// become \u00XX (never the short \n forms: checkpoint header CRCs are taken
// over this text, so its spelling must not change), and everything else
// (UTF-8 included) passes through unchanged. A byte that is not part of valid
// UTF-8 is written as U+FFFD, so the output is always valid JSON; writers that
// must not alter text (safetensors names) check it with invalid_utf8_at first.
// Numbers: the shortest text that reads back to the same double; NaN and
// +-inf, which JSON has no spelling for, are written as null.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"

namespace loom {

// --- writing ---------------------------------------------------------------------

// `text` as a JSON string literal, quotes included.
std::string json_string(std::string_view text);
void append_json_string(std::string& out, std::string_view text);

// `value` as a JSON number, or null when it is NaN or infinite.
std::string json_number(double value);

// --- reading ---------------------------------------------------------------------

// A position in JSON text with the lexical steps a schema-driven parser needs
// (strings with every escape, non-negative integers, punctuation). Knowing the
// schema, a parser needs no generic JSON value, no recursion and no allocation
// beyond what it keeps. Errors are IoErrors: a syntax error reads
// "<prefix>: <subject> is not valid JSON at byte <n>: <what>", a schema error
// "<prefix>: <what>".
class JsonReader {
 public:
  // `prefix` names the op and file ("[safetensors] model.safetensors"),
  // `subject` the text ("header").
  JsonReader(std::string_view text, std::string prefix, std::string subject);

  [[noreturn]] void syntax_error(std::string_view message) const;
  [[noreturn]] void schema_error(std::string_view message) const;

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  size_t pos() const { return pos_; }
  void skip_space();
  bool consume(char c);
  // Consumes `c` or throws a syntax error saying what was expected in `context`.
  void expect(char c, std::string_view context);

  // What the value starting here is ("a string", "a number", ...), for schema errors.
  std::string value_kind() const;
  // Throws a schema error unless the next value opens with `open`:
  // "<what> must be <kind>, got ...".
  void expect_kind(char open, std::string_view kind, std::string_view what) const;

  // A string literal, escapes decoded (surrogate pairs joined). The text is
  // assumed to be UTF-8 already; raw control characters are refused.
  std::string parse_string();
  // A JSON integer >= 0 that fits 64 bits; fractions and exponents are schema errors.
  uint64_t parse_uint(std::string_view what);
  // An array of such integers.
  std::vector<uint64_t> parse_uint_array(std::string_view what);

  // Reads an object, calling on_member(key) with the reader at each member's
  // value, which on_member must consume. Duplicate keys are schema errors:
  // JSON parsers disagree on which one wins.
  template <class Fn>
  void parse_object(std::string_view what, Fn&& on_member) {
    expect('{', what);
    std::set<std::string> seen;
    skip_space();
    if (consume('}')) return;
    while (true) {
      skip_space();
      if (peek() != '"') syntax_error(quoted_key_expected(what));
      std::string key = parse_string();
      if (!seen.insert(key).second) schema_error(duplicate_key(key, what));
      skip_space();
      expect(':', what);
      skip_space();
      on_member(std::move(key));
      skip_space();
      if (consume('}')) return;
      expect(',', what);
    }
  }

 private:
  // The character at the cursor, quoted, for "found ..." in a syntax error.
  std::string found() const;
  static std::string quoted_key_expected(std::string_view what);
  static std::string duplicate_key(std::string_view key, std::string_view what);
  uint32_t parse_hex4();
  uint32_t parse_unicode_escape();
  void parse_escape(std::string& out);

  std::string_view text_;
  std::string prefix_, subject_;
  size_t pos_ = 0;
};

}  // namespace loom
