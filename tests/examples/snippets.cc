// File: tests/examples/snippets.cc
// Reading the marked snippets of an example program, for the tutorial tests.
#include "tests/examples/snippets.h"

#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <sstream>

namespace loom::testing {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::map<std::string, std::string> source_snippets(const std::string& source, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::map<std::string, std::string> out;
  const std::regex block(pad + R"(// \[snippet: ([a-z]+)\]\n([\s\S]*?))" + pad + R"(// \[end snippet\]\n)");
  const std::regex line_start("(^|\n)" + pad);
  for (std::sregex_iterator it(source.begin(), source.end(), block), end; it != end; ++it) {
    const std::string code = (*it)[2];
    out[(*it)[1]] = indent == 0 ? code : std::regex_replace(code, line_start, "$1");
  }
  return out;
}

std::map<std::string, std::string> doc_snippets(const std::string& doc) {
  std::map<std::string, std::string> out;
  const std::regex block(R"(<!-- snippet: ([a-z]+) -->\n```cpp\n([\s\S]*?)```\n)");
  for (std::sregex_iterator it(doc.begin(), doc.end(), block), end; it != end; ++it) {
    out[(*it)[1]] = (*it)[2];
  }
  return out;
}

}  // namespace loom::testing
