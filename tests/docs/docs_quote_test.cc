// File: tests/docs/docs_quote_test.cc
// The docs cannot drift from the code they show: a fenced block right after a
// line
//   <!-- file: examples/tutorials/quick_start.cc -->
// quotes that file, and its lines must appear in the file as one unbroken run
// (the whole file or an excerpt). Every tutorial program is quoted somewhere.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Quote {
  std::string doc;   // docs/quick_start.md
  int line = 0;      // of the marker, 1-based
  std::string file;  // the quoted file, relative to the repository root
  std::vector<std::string> lines;
};

// The quotes of one markdown file; a marker not followed by a fence is an error.
std::vector<Quote> quotes_in(const fs::path& doc) {
  static const std::regex marker(R"(^<!-- file: (\S+) -->$)");
  std::vector<std::string> lines = read_lines(doc);
  std::vector<Quote> quotes;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch match;
    if (!std::regex_match(lines[i], match, marker)) continue;
    Quote quote{doc.string(), static_cast<int>(i + 1), match[1].str(), {}};
    INFO(quote.doc << ":" << quote.line << ": a file marker must be followed by a ``` fence");
    REQUIRE(i + 1 < lines.size());
    REQUIRE(lines[i + 1].starts_with("```"));
    size_t end = i + 2;
    while (end < lines.size() && lines[end] != "```") quote.lines.push_back(lines[end++]);
    REQUIRE(end < lines.size());
    quotes.push_back(quote);
    i = end;
  }
  return quotes;
}

bool is_run_of(const std::vector<std::string>& quoted, const std::vector<std::string>& file) {
  return !quoted.empty() &&
         std::search(file.begin(), file.end(), quoted.begin(), quoted.end()) != file.end();
}

std::vector<fs::path> markdown_files() {
  std::vector<fs::path> docs;
  for (const auto& entry : fs::directory_iterator("docs")) {
    if (entry.path().extension() == ".md") docs.push_back(entry.path());
  }
  std::sort(docs.begin(), docs.end());
  return docs;
}

}  // namespace

TEST_CASE("every quoted block in docs/*.md matches its file") {
  std::set<std::string> quoted_files;
  for (const fs::path& doc : markdown_files()) {
    for (const Quote& quote : quotes_in(doc)) {
      INFO(quote.doc << ":" << quote.line << " quotes " << quote.file);
      REQUIRE_MESSAGE(fs::exists(quote.file),
                      "not in the test's runfiles: add it to the data of //tests/docs");
      CHECK_MESSAGE(is_run_of(quote.lines, read_lines(quote.file)),
                    "the block differs from the file: copy the file's lines into the doc again");
      quoted_files.insert(quote.file);
    }
  }
  for (const auto& entry : fs::directory_iterator("examples/tutorials")) {
    if (entry.path().extension() != ".cc") continue;
    INFO(entry.path().string() << " is a tutorial program no doc quotes");
    CHECK(quoted_files.count(entry.path().string()) == 1);
  }
  CHECK(quoted_files.size() >= 4);
}

TEST_CASE("the quote check catches a changed line and accepts an excerpt") {
  const std::vector<std::string> file = {"int main() {", "  return 0;", "}"};
  CHECK(is_run_of(file, file));
  CHECK(is_run_of({"  return 0;", "}"}, file));
  CHECK_FALSE(is_run_of({"int main() {", "}"}, file));  // not one unbroken run
  CHECK_FALSE(is_run_of({"  return 1;"}, file));
  CHECK_FALSE(is_run_of({}, file));
}
