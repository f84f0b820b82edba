// File: tests/core/json_test.cc
// The one JSON writer (escaping, UTF-8, the NaN policy) and the reader cursor
// the safetensors header parser is built on, round-tripping what the writer wrote.
#include "core/json.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/testing.h"

namespace loom {
namespace {

// The string `literal` (a JSON string literal) reads back as.
std::string read_string(const std::string& literal) {
  JsonReader reader(literal, "[test] text", "literal");
  std::string value = reader.parse_string();
  CHECK(reader.at_end());
  return value;
}

TEST_CASE("json_string escapes quotes, backslashes and control characters") {
  CHECK(json_string("plain") == R"("plain")");
  CHECK(json_string("") == R"("")");
  CHECK(json_string(R"(say "hi")") == R"("say \"hi\"")");
  CHECK(json_string(R"(C:\dir\)") == R"("C:\\dir\\")");
  CHECK(json_string("a\nb\tc\r\x01\x1f") == R"("a\u000ab\u0009c\u000d\u0001\u001f")");
  CHECK(json_string(std::string("nul\0byte", 8)) == R"("nul\u0000byte")");
  CHECK(json_string("/ and \x7f pass") == "\"/ and \x7f pass\"");  // JSON needs neither escaped
}

TEST_CASE("json_string passes UTF-8 through and replaces bytes that are not UTF-8") {
  const std::string text = "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80";  // café, 漢, 😀
  CHECK(json_string(text) == "\"" + text + "\"");
  const std::string replacement = "\xef\xbf\xbd";  // U+FFFD
  CHECK(json_string("a\xff" "b") == "\"a" + replacement + "b\"");
  CHECK(json_string("\xc0\xaf") == "\"" + replacement + replacement + "\"");  // overlong '/'
  CHECK(json_string("\xed\xa0\x80") == "\"" + replacement + replacement + replacement + "\"");
  CHECK(json_string("cut \xe6\xbc") == "\"cut " + replacement + replacement + "\"");
  CHECK_FALSE(invalid_utf8_at(text).has_value());
  CHECK(invalid_utf8_at("ok\xf4\x90\x80\x80") == 2u);  // past U+10FFFF
}

TEST_CASE("json_number writes the shortest round-trip text and null for NaN and inf") {
  CHECK(json_number(0.1) == "0.1");
  CHECK(json_number(100) == "100");
  CHECK(json_number(-2.5e-8) == "-2.5e-08");
  CHECK(json_number(std::numeric_limits<double>::quiet_NaN()) == "null");
  CHECK(json_number(std::numeric_limits<double>::infinity()) == "null");
  CHECK(json_number(-std::numeric_limits<double>::infinity()) == "null");
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> exponent(-300, 300);
  for (int i = 0; i < 1000; ++i) {
    double value = std::pow(10.0, exponent(gen)) * (i % 2 == 0 ? 1 : -1);
    std::string text = json_number(value);
    CHECK_MESSAGE(std::strtod(text.c_str(), nullptr) == value, text);
  }
}

TEST_CASE("strings round-trip through the writer and the reader") {
  std::vector<std::string> cases = {
      "", "plain", R"(q"uo\te)", "tab\tnew\nline\r", std::string("\0\x01\x1f", 3),
      "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80", "\\u0041 stays text",
  };
  for (int c = 0; c < 0x20; ++c) cases.push_back(std::string(1, static_cast<char>(c)));
  for (const std::string& text : cases) CHECK(read_string(json_string(text)) == text);
}

TEST_CASE("the reader decodes every escape JSON has, surrogate pairs included") {
  CHECK(read_string(R"("\"\\\/\b\f\n\r\t")") == "\"\\/\b\f\n\r\t");
  CHECK(read_string(R"("\u0041\u00e9\u6f22")") == "A\xc3\xa9\xe6\xbc\xa2");
  CHECK(read_string(R"("\ud83d\ude00")") == "\xf0\x9f\x98\x80");
  CHECK(read_string(R"("\uD83D\uDE00")") == "\xf0\x9f\x98\x80");
}

TEST_CASE("reader errors say where the text stops being JSON") {
  auto rejects = [](const std::string& text, const std::string& fragment) {
    JsonReader reader(text, "[test] file.json", "document");
    CHECK_THROWS_WITH_FRAGMENT(reader.parse_string(), IoError, fragment);
  };
  rejects(R"("open)", "[test] file.json: document is not valid JSON at byte 5: unterminated");
  rejects("\"a\nb\"", "at byte 2: control character inside a string");
  rejects(R"("\x")", "unknown escape");
  rejects(R"("\u12")", "four hex digits");
  rejects(R"("\ude00")", "lone low surrogate");
  rejects(R"("\ud83d")", "high surrogate not followed by \\u low surrogate");
  rejects(R"("\ud83d\u0041")", "high surrogate not followed by a low surrogate");
  rejects("x", "at byte 0: expected '\"' in a string, found 'x'");
}

TEST_CASE("objects and integer arrays follow their schema") {
  JsonReader reader(R"( {"a": [0, 18446744073709551615], "b": []} )", "[test] f", "doc");
  reader.skip_space();
  std::vector<std::vector<uint64_t>> arrays;
  std::vector<std::string> keys;
  reader.parse_object("the doc", [&](std::string key) {
    keys.push_back(key);
    arrays.push_back(reader.parse_uint_array("an entry"));
  });
  CHECK(keys == std::vector<std::string>{"a", "b"});
  REQUIRE(arrays.size() == 2);
  CHECK(arrays[0] == std::vector<uint64_t>{0, std::numeric_limits<uint64_t>::max()});
  CHECK(arrays[1].empty());

  auto rejects = [](const std::string& text, const std::string& fragment) {
    JsonReader bad(text, "[test] f", "doc");
    CHECK_THROWS_WITH_FRAGMENT(
        bad.parse_object("the doc", [&](std::string) { bad.parse_uint_array("an entry"); }),
        IoError, fragment);
  };
  rejects(R"({"a": [], "a": []})", "[test] f: duplicate key 'a' in the doc");
  rejects(R"({"a": [18446744073709551616]})", "an entry overflows");
  rejects(R"({"a": [01]})", "numbers may not have leading zeros");
  rejects(R"({"a": [-1]})", "an entry is negative");
  rejects(R"({"a": [1.5]})", "an entry must be an integer");
  rejects(R"({"a": "x"})", "an entry must be an array, got a string");
  rejects(R"({"a": [1})", "expected ',' in an entry, found '}'");
  rejects(R"({"a": [1])", "the doc ends where ',' was expected in the doc");
  rejects(R"({a: []})", "expected a quoted key in the doc");
}

}  // namespace
}  // namespace loom
