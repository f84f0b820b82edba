// File: tests/core/utf8_test.cc
// UTF-8 sequence lengths and the printable form that every loom::Error message
// takes: text quoted from a corrupt file never reaches a terminal raw.
#include "core/utf8.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace loom {
namespace {

TEST_CASE("utf8_sequence_length: valid sequences, and 0 where none starts") {
  CHECK(utf8_sequence_length("a", 0) == 1);
  CHECK(utf8_sequence_length("\xc3\xa9", 0) == 2);          // é
  CHECK(utf8_sequence_length("\xe6\xbc\xa2", 0) == 3);      // 漢
  CHECK(utf8_sequence_length("\xf0\x9f\x98\x80", 0) == 4);  // 😀
  CHECK(utf8_sequence_length("\xef", 0) == 0);              // a lead byte cut off
  CHECK(utf8_sequence_length("\xc0\xaf", 0) == 0);          // overlong '/'
  CHECK(utf8_sequence_length("\xed\xa0\x80", 0) == 0);      // a surrogate
  CHECK(utf8_sequence_length("\x80", 0) == 0);              // a lone continuation byte
}

TEST_CASE("printable keeps text, newlines, tabs and UTF-8, and escapes the rest as \\xNN") {
  CHECK(printable("plain [op] text: 1.5e-3") == "plain [op] text: 1.5e-3");
  CHECK(printable("two\nlines\tand a tab") == "two\nlines\tand a tab");
  CHECK(printable("caf\xc3\xa9 \xe6\xbc\xa2") == "caf\xc3\xa9 \xe6\xbc\xa2");
  CHECK(printable("ok \x01\xff") == "ok \\x01\\xFF");
  CHECK(printable(std::string("F3\0x", 4)) == "F3\\x00x");
  CHECK(printable("\x1b[31mred") == "\\x1B[31mred");       // no terminal escapes
  CHECK(printable("\xef\xbb\xbf{") == "\\xEF\\xBB\\xBF{");  // byte-order mark
  CHECK(printable("\xef{") == "\\xEF{");                    // a lone lead byte
  CHECK(printable("a\xe2\x80\xae" "b") == "a\\xE2\\x80\\xAEb");  // right-to-left override
  CHECK(printable("\xc2\x85") == "\\xC2\\x85");             // a C1 control (NEL)
  CHECK(printable("del\x7f") == "del\\x7F");
}

TEST_CASE("every loom::Error message is printable, whatever it quotes") {
  using namespace std::string_literals;
  const std::string raw = "[safetensors] f: unknown dtype 'F3\0\x1b[2J'"s;
  const IoError error(raw);
  const std::string message = error.what();
  CHECK(message == "[safetensors] f: unknown dtype 'F3\\x00\\x1B[2J'");
  CHECK(std::none_of(message.begin(), message.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20;
  }));
  CHECK(std::string(ValueError("caf\xc3\xa9\n").what()) == "caf\xc3\xa9\n");
}

}  // namespace
}  // namespace loom
