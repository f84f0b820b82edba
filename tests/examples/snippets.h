// File: tests/examples/snippets.h
// For tests that check a tutorial quotes its example program exactly: the
// program marks each quoted block with "// [snippet: name]" ... "// [end snippet]",
// the document puts "<!-- snippet: name -->" before the ```cpp block that quotes it.
#pragma once

#include <map>
#include <string>

namespace loom::testing {

// The whole file (a doctest REQUIRE fails when it cannot be read).
std::string read_text(const std::string& path);

// name -> the source lines between the markers, for markers indented by
// `indent` spaces, with that indentation taken off every line.
std::map<std::string, std::string> source_snippets(const std::string& source, int indent = 0);

// name -> the ```cpp block that follows "<!-- snippet: name -->".
std::map<std::string, std::string> doc_snippets(const std::string& doc);

}  // namespace loom::testing
