// File: fuzz/msan_image_check.cc
// MemorySanitizer check of the image decoders: tools/msan_images.sh compiles
// this with data/stb_guard*.cc, data/stb_image.cc and what they use, every
// byte instrumented (clang -fsanitize=memory; libFuzzer cannot take part, as
// Debian builds it against an uninstrumented libstdc++), and runs it over the
// image fuzzers' corpora and deterministic mutations of them. Every image that
// decodes must come out fully initialised: stb_image 2.27 reads uninitialised
// palette entries and tables that Loom's screen must keep it away from, and
// ASan cannot see that. Not part of the Bazel build (it needs clang's MSan).
//
//   msan_image_check <mutations per input> <target>:<folder> ...
//   (target: image, png, bmp or jpeg; the input format of that fuzzer)
#include <dirent.h>
#include <sanitizer/msan_interface.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/stb_guard.h"
#include "fuzz/structured_input.h"

namespace {

using loom::fuzz::StructuredImage;

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> bytes;
  if (std::FILE* file = std::fopen(path.c_str(), "rb")) {
    uint8_t chunk[4096];
    for (size_t got; (got = std::fread(chunk, 1, sizeof(chunk), file)) > 0;) {
      bytes.insert(bytes.end(), chunk, chunk + got);
    }
    std::fclose(file);
  }
  return bytes;
}

std::vector<std::string> files_in(const std::string& folder) {
  std::vector<std::string> paths;
  if (DIR* dir = ::opendir(folder.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') paths.push_back(folder + "/" + entry->d_name);
    }
    ::closedir(dir);
  }
  std::sort(paths.begin(), paths.end());  // the mutation seeds follow the order
  return paths;
}

StructuredImage image_of(const std::string& target, const std::vector<uint8_t>& input) {
  if (target == "png") return loom::fuzz::png_from_input(input);
  if (target == "bmp") return loom::fuzz::bmp_from_input(input);
  if (target == "jpeg") return loom::fuzz::jpeg_from_input(input);
  if (input.empty()) return {};
  return {(input[0] & 1) ? 3 : 1, {input.begin() + 1, input.end()}};
}

// A deterministic mutation: flips, byte sets, cuts and duplications, as a
// fuzzer makes them (xorshift, seeded per input and round).
std::vector<uint8_t> mutated(std::vector<uint8_t> bytes, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] { state ^= state << 13, state ^= state >> 7, state ^= state << 17; return state; };
  const int edits = 1 + static_cast<int>(next() % 4);
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const size_t at = next() % bytes.size();
    switch (next() % 5) {
      case 0: bytes[at] ^= static_cast<uint8_t>(1u << (next() % 8)); break;
      case 1: bytes[at] = static_cast<uint8_t>(next()); break;
      case 2: bytes[at] = (next() % 2) ? 0xFF : 0x00; break;
      case 3: bytes.resize(at + 1); break;
      default: bytes.insert(bytes.begin() + at, bytes.begin() + at, bytes.begin() + std::min(bytes.size(), at + 1 + next() % 16)); break;
    }
  }
  return bytes;
}

// The input being checked, for the report when MemorySanitizer stops the
// run: its file, the mutation round and, in <binary>.failing_input, its bytes.
struct Current {
  std::string path, saved_to;
  long round = 0;
  std::vector<uint8_t> bytes;
} current;

void report_current() {
  if (std::FILE* file = std::fopen(current.saved_to.c_str(), "wb")) {
    std::fwrite(current.bytes.data(), 1, current.bytes.size(), file);
    std::fclose(file);
  }
  std::fprintf(stderr,
               "msan_image_check: the input was %s, mutation %ld (0: the file itself); its "
               "bytes are in %s\n",
               current.path.c_str(), current.round, current.saved_to.c_str());
}

struct Tally {
  long inputs = 0, decoded = 0, refused = 0;
};

// Decodes as the loaders do; an image that decodes must be initialised in
// every byte (MSan reports the first one that is not, with its origin).
void check(const StructuredImage& image, Tally& tally) {
  ++tally.inputs;
  if (image.encoded.empty()) return;
  // The encoded file is the input, defined in every byte; the PNG builder's
  // compressed data and CRCs come from zlib, which is not instrumented, so
  // MemorySanitizer would take them for uninitialised.
  __msan_unpoison(image.encoded.data(), image.encoded.size());
  try {
    const std::optional<loom::data::DecodedPixels> decoded = loom::fuzz::decode_for_fuzzing(image);
    if (!decoded) return;  // screened only: too many pixels to decode in a fuzzer's time
    __msan_check_mem_is_initialized(
        decoded->pixels.get(),
        static_cast<size_t>(decoded->width) * decoded->height * decoded->channels);
    ++tally.decoded;
  } catch (const loom::Error&) {
    ++tally.refused;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: msan_image_check <mutations per input> <target>:<folder> ...\n");
    return 2;
  }
  const long rounds = std::atol(argv[1]);
  current.saved_to = std::string(argv[0]) + ".failing_input";
  __msan_set_death_callback(report_current);
  Tally tally;
  for (int a = 2; a < argc; ++a) {
    const std::string spec = argv[a];
    const size_t colon = spec.find(':');
    const std::string target = spec.substr(0, colon), folder = spec.substr(colon + 1);
    uint64_t seed = 0;
    for (const std::string& path : files_in(folder)) {
      const std::vector<uint8_t> input = read_file(path);
      current.path = path;
      for (long r = 0; r <= rounds; ++r) {
        current.round = r;
        current.bytes = r == 0 ? input : mutated(input, ++seed);
        check(image_of(target, current.bytes), tally);
      }
    }
  }
  std::printf("msan_image_check: %ld inputs, %ld decoded (every byte initialised), %ld refused, "
              "%ld screened only (over %lld pixels) or empty\n",
              tally.inputs, tally.decoded, tally.refused, tally.inputs - tally.decoded - tally.refused,
              static_cast<long long>(loom::fuzz::kMaxFuzzPixels));
  return 0;
}
