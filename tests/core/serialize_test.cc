// File: tests/core/serialize_test.cc
// Safetensors files byte for byte, every malformed-file case of
// reliability-anchors.md §8, atomic replacement under failures, and training
// checkpoints (round trip, CRC checks).
#include "core/serialize.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test's scratch space, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    static int counter = 0;
    path_ = fs::path(base != nullptr ? base : fs::temp_directory_path().string()) /
            ("serialize_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& item : fs::directory_iterator(path_)) names.push_back(item.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The header length as 8 little-endian bytes.
std::string length_prefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out;
}

// A file with this header text (unpadded) and data section.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return length_prefix(header.size()) + header + data;
}

std::string memory_bytes(const Tensor& t) {
  Tensor dense = t.contiguous();
  std::string out(dense.numel() * element_size(dense.dtype()), '\0');
  if (!out.empty()) std::memcpy(out.data(), dense.raw_data(), out.size());
  return out;
}

// Same names in the same order, same dtypes and sizes, identical bytes.
void check_identical(const StateDict& actual, const StateDict& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("tensor ", expected[i].first);
    CHECK(actual[i].first == expected[i].first);
    CHECK(actual[i].second.dtype() == expected[i].second.dtype());
    CHECK(actual[i].second.sizes() == expected[i].second.sizes());
    CHECK(memory_bytes(actual[i].second) == memory_bytes(expected[i].second));
  }
}

// One tensor of every dtype, plus the shapes that trip writers up.
StateDict every_dtype(Generator& gen) {
  Tensor specials = tensor({1.5, -0.0, 1.0 / 0.0, 0.0 / 0.0, -3.25}, {5});
  return {
      {"f32", randn({2, 3}, {}, &gen)},
      {"f32.specials", specials},
      {"f64", randn({4}, {.dtype = DType::Float64}, &gen)},
      {"f16", randn({3, 2}, {}, &gen).to(DType::Float16)},
      {"bf16", randn({2, 2, 2}, {}, &gen).to(DType::BFloat16)},
      {"i32", randint(-1000, 1000, {7}, {.dtype = DType::Int32}, &gen)},
      {"i64",
       randint(-(int64_t{1} << 40), int64_t{1} << 40, {2, 3}, {.dtype = DType::Int64}, &gen)},
      {"u8", randint(0, 256, {9}, {.dtype = DType::UInt8}, &gen)},
      {"bool", randint(0, 2, {3, 3}, {}, &gen).to(DType::Bool)},
      {"scalar", full({}, 2.5)},
      {"scalar.i64", full({}, 42, {.dtype = DType::Int64})},
      {"empty", zeros({0, 3})},
      {"empty.i64", zeros({2, 0, 5}, {.dtype = DType::Int64})},
      {"transposed", randn({3, 4}, {}, &gen).t()},
      {"channels_last", randn({2, 3, 2, 2}, {.memory_format = MemoryFormat::ChannelsLast}, &gen)},
  };
}

TEST_CASE("every dtype, 0-d and zero-size tensors round-trip bit for bit, with metadata") {
  ScratchDir dir;
  Generator gen(7);
  StateDict tensors = every_dtype(gen);
  std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"quoted \"key\"", "back\\slash, new\nline, tab\t, \x01, üñï©ødé"}};
  save_safetensors(dir.file("all.safetensors"), tensors, metadata);

  StateDict loaded = load_safetensors(dir.file("all.safetensors"));
  check_identical(loaded, tensors);
  for (const auto& [name, t] : loaded) CHECK(t.is_contiguous());
  CHECK(load_safetensors_metadata(dir.file("all.safetensors")) == metadata);
  CHECK(dir.listing() == std::vector<std::string>{"all.safetensors"});
}

TEST_CASE("a tiny file is byte-identical to the hand-written expected file") {
  ScratchDir dir;
  StateDict tensors = {
      {"a", tensor({1.0, -2.0}, {2})},
      {"b", full({}, 7, {.dtype = DType::Int64})},
      {"c", tensor({1, 0, 1}, {3}, {.dtype = DType::Bool})},
      {"d", tensor({1.0}, {1}, {.dtype = DType::BFloat16})},
      {"e", zeros({0, 2}, {.dtype = DType::Float16})},
  };
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                       R"("c":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]},)"
                       R"("d":{"dtype":"BF16","shape":[1],"data_offsets":[19,21]},)"
                       R"("e":{"dtype":"F16","shape":[0,2],"data_offsets":[21,21]}})";
  std::string padding(5, ' ');  // 307 header bytes, padded to 312 = 0x138
  std::string data = std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8) +  // 1.0f, -2.0f
                     std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8) +  // int64 7
                     std::string("\x01\x00\x01", 3) +                      // bools
                     std::string("\x80\x3f", 2);                           // bf16 1.0
  std::string expected =
      std::string("\x38\x01\x00\x00\x00\x00\x00\x00", 8) + header + padding + data;

  save_safetensors(dir.file("tiny.safetensors"), tensors, {{"format", "pt"}});
  CHECK(read_bytes(dir.file("tiny.safetensors")) == expected);

  write_bytes(dir.file("expected.safetensors"), expected);
  check_identical(load_safetensors(dir.file("expected.safetensors")), tensors);
}

TEST_CASE("files as other writers lay them out are accepted") {
  ScratchDir dir;
  std::string path = dir.file("other.safetensors");
  std::string data = std::string("\x00\x00\x80\x3f", 4) + std::string("\x02\x00\x00\x00", 4);

  SUBCASE("header keys in another order than the data, spaces and escapes in the JSON") {
    std::string header =
        "  \n{ \"\\u00e9t\\u00e9\" : {\"shape\": [1], \"dtype\": \"I32\", "
        "\"data_offsets\": [4, 8]},\r\n\t\"w\": {\"dtype\": \"F32\", \"shape\": "
        "[], \"data_offsets\": [0, 4]}, \"z\": {\"dtype\": \"U8\", \"shape\": [0], "
        "\"data_offsets\": [8, 8]}, \"__metadata__\": {}}   ";
    write_bytes(path, file_bytes(header, data));
    StateDict loaded = load_safetensors(path);
    REQUIRE(loaded.size() == 3);
    CHECK(loaded[0].first == "w");  // data order, not header order
    CHECK(loaded[0].second.item() == 1.0);
    CHECK(loaded[0].second.dim() == 0);
    CHECK(loaded[1].first == "\xc3\xa9t\xc3\xa9");
    CHECK(loaded[1].second.dtype() == DType::Int32);
    CHECK(loaded[1].second.item() == 2.0);
    CHECK(loaded[2].second.sizes() == Shape{0});
  }
  SUBCASE("an empty file: no tensors, no metadata") {
    write_bytes(path, file_bytes("{}"));
    CHECK(load_safetensors(path).empty());
    CHECK(load_safetensors_metadata(path).empty());
  }
}

// load_safetensors(bytes) must throw an IoError naming the file and containing `fragment`.
void check_rejected(const std::string& bytes, const std::string& fragment) {
  ScratchDir dir;
  std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  CHECK_THROWS_WITH_FRAGMENT(load_safetensors(path), IoError, fragment);
  CHECK_THROWS_WITH_FRAGMENT(load_safetensors(path), IoError, "[safetensors] " + path + ": ");
}

std::string one_tensor(const std::string& dtype, const std::string& shape,
                       const std::string& offsets) {
  return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets +
         "}}";
}

TEST_CASE("malformed safetensors files are rejected with the specific problem (§8)") {
  std::string four(4, '\0');
  SUBCASE("1: fewer than 8 bytes") {
    check_rejected("", "the file is 0 bytes, too small for the 8-byte header length");
    check_rejected(std::string("\x10\x00\x00", 3), "the file is 3 bytes");
  }
  SUBCASE("2: header length over 1e8") {
    check_rejected(length_prefix(100'000'001) + "{}",
                   "header length 100000001 exceeds the 100000000-byte limit");
    check_rejected(length_prefix(~uint64_t{0}) + "{}",
                   "header length 18446744073709551615 exceeds");
  }
  SUBCASE("3: header length past the end of the file") {
    check_rejected(length_prefix(50) + "{}",
                   "header length 50 runs past the end of the 10-byte file");
  }
  SUBCASE("4: header not UTF-8") {
    check_rejected(file_bytes("{\"\xff\":{}}"),
                   "header is not valid UTF-8 (byte 0xff at header byte 2)");
    check_rejected(file_bytes("{\"\xc0\xaf\":{}}"), "not valid UTF-8 (byte 0xc0");  // overlong '/'
    check_rejected(file_bytes("{\"\xed\xa0\x80\":{}}"), "not valid UTF-8 (byte 0xed");  // surrogate
  }
  SUBCASE("5: header not JSON") {
    check_rejected(file_bytes("{"), "header is not valid JSON at byte 1: expected a quoted key");
    check_rejected(file_bytes("[]"),
                   "header is not valid JSON at byte 0: expected '{' in the header");
    check_rejected(file_bytes(one_tensor("F32", "[1]", "[0,4]") + "x", four),
                   "only space padding may follow");
    check_rejected(file_bytes(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})", four),
                   "expected a quoted key");
    check_rejected(file_bytes(R"({"t\q":{}})"), "unknown escape");
    check_rejected(file_bytes(R"({"t":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", four),
                   "leading zeros");
  }
  SUBCASE("6: offsets that overlap, leave gaps, start late or run backwards") {
    std::string attack = "{";  // safetensors' test_json_attack: ten tensors all at [0, 16]
    for (int i = 0; i < 10; ++i) {
      attack += std::string(i ? "," : "") + R"("w)" + std::to_string(i) +
                R"(":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})";
    }
    check_rejected(file_bytes(attack + "}", std::string(16, '\0')),
                   "has data_offsets [0, 16], overlapping tensor 'w0' [0, 16]");
    std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
    check_rejected(
        file_bytes(gap, std::string(12, '\0')),
        "tensor 'b' has data_offsets [8, 12], leaving a gap of 4 bytes after tensor 'a'");
    check_rejected(file_bytes(one_tensor("F32", "[1]", "[4,8]"), std::string(8, '\0')),
                   "leaving a gap of 4 bytes after the header");
    check_rejected(file_bytes(one_tensor("F32", "[1]", "[8,4]"), std::string(8, '\0')),
                   "tensor 't' has data_offsets [8, 4]: end is before begin");
  }
  SUBCASE("7: byte count that disagrees with the shape") {
    std::string header = R"({"fc.weight":{"dtype":"F32","shape":[5,4],"data_offsets":[0,100]}})";
    check_rejected(
        file_bytes(header, std::string(100, '\0')),
        "tensor 'fc.weight' has data_offsets [0, 100] but shape (5, 4) float32 needs 80 bytes");
  }
  SUBCASE("8: shapes whose size overflows") {
    check_rejected(
        file_bytes(one_tensor("F32", "[2,18446744073709551614]", "[0,8]"), std::string(8, '\0')),
        "tensor 't' has shape [2, 18446744073709551614] whose size overflows 64 bits");
    check_rejected(
        file_bytes(one_tensor("U8", "[9223372036854775808]", "[0,8]"), std::string(8, '\0')),
        "whose size overflows 64 bits");  // past int64, where Loom's sizes live
    check_rejected(
        file_bytes(one_tensor("F32", "[18446744073709551616]", "[0,8]"), std::string(8, '\0')),
        "tensor 't' shape entry overflows: it does not fit in 64 bits");
  }
  SUBCASE("9: trailing or missing data bytes") {
    check_rejected(file_bytes(one_tensor("F32", "[1]", "[0,4]"), std::string(6, '\0')),
                   "2 unexpected bytes follow the last tensor (tensors end at data byte 4 of 6)");
    check_rejected(
        file_bytes(one_tensor("F32", "[2]", "[0,8]"), four),
        "the file is truncated: its tensors need 8 data bytes but only 4 follow the header");
  }
  SUBCASE("10: unknown dtype") {
    check_rejected(
        file_bytes(one_tensor("F33", "[1]", "[0,4]"), four),
        "tensor 't' has unknown dtype 'F33' (Loom reads F32, F64, F16, BF16, I32, I64, U8, BOOL)");
    check_rejected(file_bytes(one_tensor("I16", "[2]", "[0,4]"), four),
                   "tensor 't' has dtype I16, which Loom does not support");
  }
  SUBCASE("11: duplicate keys") {
    std::string twice = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                        R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
    check_rejected(file_bytes(twice, "xy"), "duplicate key 'a' in the header");
    check_rejected(
        file_bytes(R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"),
        "duplicate key 'dtype' in tensor 'a'");
  }
  SUBCASE("12: __metadata__ values that are not strings") {
    check_rejected(file_bytes(R"({"__metadata__":{"epoch":3}})"),
                   "__metadata__ value 'epoch' must be a string, got a number");
    check_rejected(file_bytes(R"({"__metadata__":{"nested":{"a":"b"}}})"), "got an object");
    check_rejected(file_bytes(R"({"__metadata__":["a"]})"),
                   "__metadata__ must be an object of strings, got an array");
  }
  SUBCASE("13: a sub-byte dtype not ending on a byte boundary") {
    check_rejected(
        file_bytes(one_tensor("F4", "[3]", "[0,2]"), "xy"),
        "tensor 't' of 4-bit dtype F4 with shape [3] has 12 bits, which does not end on a "
        "byte boundary");
    check_rejected(file_bytes(one_tensor("F4", "[4]", "[0,2]"), "xy"),
                   "dtype F4, which Loom does not support");
  }
  SUBCASE("text from the file is quoted printably: no lone bytes, no NUL cutting it short") {
    check_rejected(file_bytes("\xef\xbb\xbf{}"),
                   "expected '{' in the header, found '\\xEF\\xBB\\xBF' (a UTF-8 byte-order "
                   "mark; write the text without it)");
    check_rejected(file_bytes("\xc3\xa9{}"), "found '\xc3\xa9'");  // a whole character
    check_rejected(file_bytes(one_tensor(R"(F3\u0000x\u001b[2J)", "[1]", "[0,4]"), four),
                   "tensor 't' has unknown dtype 'F3\\x00x\\x1B[2J' (Loom reads F32");
    check_rejected(file_bytes(R"({"a\u0000b":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                              four),
                   "tensor 'a\\x00b' has data_offsets [0, 4] but shape");
  }
  SUBCASE("schema violations beyond the catalogue") {
    check_rejected(file_bytes(R"({"t":{"dtype":"F32","shape":[1]}})", four),
                   "tensor 't' has no 'data_offsets'");
    check_rejected(
        file_bytes(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", four),
        "tensor 't' has unknown field 'x'");
    check_rejected(file_bytes(one_tensor("F32", "[-1]", "[0,4]"), four),
                   "tensor 't' shape entry is negative");
    check_rejected(file_bytes(one_tensor("F32", "[1.0]", "[0,4]"), four),
                   "shape entry must be an integer");
    check_rejected(file_bytes(one_tensor("F32", "[1]", "[0,4,8]"), four),
                   "needs two numbers [begin, end]");
    check_rejected(file_bytes(one_tensor("BOOL", "[2]", "[0,2]"), "\x01\x02"),
                   "tensor 't' (BOOL) holds byte 2 at element 1");
  }
}

TEST_CASE("paths that are not readable files are IoErrors naming the path") {
  ScratchDir dir;
  CHECK_THROWS_WITH_FRAGMENT(load_safetensors(dir.file("absent.safetensors")), IoError,
                             dir.file("absent.safetensors") + ": cannot open: No such file");
  CHECK_THROWS_WITH_FRAGMENT(load_safetensors(dir.file("")), IoError, "not a regular file");
  REQUIRE(::mkfifo(dir.file("pipe").c_str(), 0600) == 0);  // must not hang waiting for a writer
  CHECK_THROWS_WITH_FRAGMENT(load_safetensors_metadata(dir.file("pipe")), IoError,
                             "not a regular file");
}

TEST_CASE("a failed save leaves the previous file intact and no temporary file behind") {
  ScratchDir dir;
  std::string path = dir.file("model.safetensors");
  StateDict old_tensors = {{"w", tensor({1, 2, 3}, {3})}};
  save_safetensors(path, old_tensors);
  std::string old_bytes = read_bytes(path);
  StateDict new_tensors = {{"w", tensor({4, 5, 6, 7}, {4})}};
  std::string temp_name = "model.safetensors.tmp." + std::to_string(::getpid()) + ".";

  SUBCASE("a directory under the old fixed temporary name is left alone") {
    std::string in_the_way = dir.file("model.safetensors.tmp." + std::to_string(::getpid()));
    fs::create_directory(in_the_way);
    save_safetensors(path, new_tensors);
    CHECK(fs::is_directory(in_the_way));  // not a file of ours: left alone
    fs::remove(in_the_way);
    save_safetensors(path, old_tensors);
  }
  SUBCASE("the write fails midway (file size limit)") {
    rlimit saved;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of being killed
    rlimit small = saved;
    small.rlim_cur = 4096;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;  // checked after the limit is lifted: doctest's log is a file too
    try {
      save_safetensors(path, {{"big", zeros({100'000})}});
    } catch (const IoError& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    CHECK_MESSAGE(message.find("cannot write " + dir.file(temp_name)) != std::string::npos,
                  "message was: " << message);
    CHECK_MESSAGE(message.find(": File too large") != std::string::npos, "message was: " << message);
    CHECK(dir.listing() == std::vector<std::string>{"model.safetensors"});
  }
  SUBCASE("the rename fails (a directory is in the way)") {
    std::string blocked = dir.file("blocked");
    fs::create_directories(blocked + "/inside");
    CHECK_THROWS_WITH_FRAGMENT(save_safetensors(blocked, new_tensors), IoError, "cannot rename");
    CHECK(fs::is_directory(blocked + "/inside"));
    CHECK(dir.listing() == std::vector<std::string>{"blocked", "model.safetensors"});
  }
  SUBCASE("bad arguments are caught before anything is written") {
    CHECK_THROWS_WITH_FRAGMENT(save_safetensors(path, {{"w", Tensor()}}), ValueError,
                               "[save_safetensors] tensor 'w' is undefined");
    CHECK_THROWS_WITH_FRAGMENT(save_safetensors(path, {{"w", ones({1})}, {"w", ones({2})}}),
                               ValueError, "tensor name 'w' appears twice");
    CHECK_THROWS_WITH_FRAGMENT(save_safetensors(path, {{"__metadata__", ones({1})}}), ValueError,
                               "'__metadata__' is reserved");
    CHECK_THROWS_WITH_FRAGMENT(save_safetensors(path, {{"bad\xff", ones({1})}}), ValueError,
                               "tensor name 'bad\\xFF' is not valid UTF-8");
    CHECK_THROWS_WITH_FRAGMENT(save_safetensors(path, {}, {{"k", "\xc0\xaf"}}), ValueError,
                               "metadata value");
    CHECK_THROWS_WITH_FRAGMENT(save_safetensors(dir.file("missing/x.safetensors"), new_tensors),
                               IoError, "No such file or directory");
  }
  CHECK(read_bytes(path) == old_bytes);
  check_identical(load_safetensors(path), old_tensors);

  save_safetensors(path, new_tensors);  // and a good save still replaces it
  check_identical(load_safetensors(path), new_tensors);
}

TrainingCheckpoint sample_checkpoint(Generator& gen);

// Sets a file's modification time `seconds` into the past.
void age(const std::string& path, int seconds) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(seconds));
}

TEST_CASE("a temporary file left by a killed save does not block later saves") {
  ScratchDir dir;
  std::string path = dir.file("ck.ckpt");
  StateDict tensors = {{"w", tensor({1, 2}, {2})}};
  // A trainer restarted in a container gets the same PID: the dead writer's
  // temporary file carries ours. The old code failed here with "File exists".
  std::string same_pid = dir.file("ck.ckpt.tmp." + std::to_string(::getpid()));
  std::string dead_pid = dir.file("ck.ckpt.tmp.2147483646.Ab12Cd");
  write_bytes(same_pid, "half a checkpoint");
  write_bytes(dead_pid, "another half");
  age(same_pid, 3600);
  save_safetensors(path, tensors);
  check_identical(load_safetensors(path), tensors);
  CHECK(dir.listing() == std::vector<std::string>{"ck.ckpt"});

  SUBCASE("the temporary file is named after the target and unique to the save") {
    std::string other = dir.file("other.ckpt.tmp.1");  // another target's: not touched
    write_bytes(other, "x");
    age(other, 3600);
    save_safetensors(path, tensors);
    CHECK(dir.listing() == std::vector<std::string>{"ck.ckpt", "other.ckpt.tmp.1"});
  }
  SUBCASE("a temporary file a live writer holds is left alone") {
    std::string live = dir.file("ck.ckpt.tmp.1.Xy34Zw");
    write_bytes(live, "being written");
    age(live, 3600);
    int fd = ::open(live.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX) == 0);
    // A forked child's lock is another open file description's, as a second writer's would be.
    pid_t child = ::fork();
    if (child == 0) {
      try {
        save_safetensors(path, tensors);
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(fs::exists(live) ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    ::close(fd);
  }
  SUBCASE("a fresh temporary file of a live process is left alone") {
    std::string fresh = dir.file("ck.ckpt.tmp.1.Qw56Er");  // PID 1 is alive; made after we started
    write_bytes(fresh, "just created");
    save_safetensors(path, tensors);
    CHECK(fs::exists(fresh));
  }
}

TEST_CASE("check_save_path finds an unusable checkpoint folder before anything is written") {
  ScratchDir dir;
  check_save_path(dir.file("ok.ckpt"));
  CHECK(dir.listing().empty());
  CHECK_THROWS_WITH_FRAGMENT(check_save_path(dir.file("missing/x.ckpt")), IoError,
                             "missing/x.ckpt: cannot create a temporary file");
  fs::create_directory(dir.file("sub"));
  CHECK_THROWS_WITH_FRAGMENT(check_save_path(dir.file("sub")), IoError, "is a directory");
  if (::geteuid() != 0) {  // root writes anywhere
    fs::permissions(dir.file("sub"), fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH_FRAGMENT(check_save_path(dir.file("sub/x.ckpt")), IoError,
                               "Permission denied");
    fs::permissions(dir.file("sub"), fs::perms::owner_all);
  }
}

TEST_CASE("a saved file gets the mode a plain create gives it, not mkstemp's 0600") {
  ScratchDir dir;
  mode_t mask = ::umask(022);
  save_safetensors(dir.file("m.safetensors"), {{"w", ones({1})}});
  ::umask(mask);
  struct stat info = {};
  REQUIRE(::stat(dir.file("m.safetensors").c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0644);
}

TEST_CASE("a shape whose strides overflow is rejected, even with zero elements") {
  ScratchDir dir;
  std::string path = dir.file("x.safetensors");
  for (std::string shape : {"[0, 4611686018427387904, 4611686018427387904]",
                            "[0, 9223372036854775807, 2]", "[2, 0, 4611686018427387904]"}) {
    INFO("shape ", shape);
    write_bytes(path, file_bytes(R"({"t":{"dtype":"F32","shape":)" + shape +
                                 R"(,"data_offsets":[0,0]}})"));
    CHECK_THROWS_WITH_FRAGMENT(load_safetensors(path), IoError, "or whose strides do");
  }
  // A large but representable zero-size shape still loads.
  write_bytes(path, file_bytes(R"({"t":{"dtype":"U8","shape":[0,1048576,1048576],"data_offsets":[0,0]}})"));
  StateDict loaded = load_safetensors(path);
  CHECK(loaded[0].second.sizes() == Shape{0, 1048576, 1048576});
}

TEST_CASE("checkpoint scalars out of range are rejected on load, naming the file") {
  ScratchDir dir;
  Generator gen(3);
  std::string path = dir.file("ck.ckpt");
  TrainingCheckpoint checkpoint = sample_checkpoint(gen);
  for (int64_t epoch : {int64_t{1} << 40, int64_t{-5}, int64_t{1} << 31}) {
    INFO("epoch ", epoch);
    checkpoint.epoch = epoch;
    save_checkpoint(path, checkpoint);  // CRC-valid: only the value is wrong
    CHECK_THROWS_WITH_FRAGMENT(load_checkpoint(path), IoError,
                               fmt::format("[checkpoint] {}: __metadata__ 'loom.epoch' is '{}'; "
                                           "expected an integer from 0 to 2147483647",
                                           path, epoch));
  }
  checkpoint.epoch = 2147483647;
  checkpoint.step = -1;
  save_checkpoint(path, checkpoint);
  CHECK_THROWS_WITH_FRAGMENT(load_checkpoint(path), IoError, "'loom.step' is '-1'");
  checkpoint.step = 0;
  save_checkpoint(path, checkpoint);
  CHECK(load_checkpoint(path).epoch == 2147483647);
}

TrainingCheckpoint sample_checkpoint(Generator& gen) {
  TrainingCheckpoint checkpoint;
  checkpoint.model = {
      {"0.weight", randn({4, 1, 3, 3}, {}, &gen)},
      {"0.bias", randn({4}, {}, &gen)},
      {"1.running_mean", randn({4}, {}, &gen)},
      {"1.num_batches_tracked", full({}, 17, {.dtype = DType::Int64})},
  };
  checkpoint.optimizer = {
      {"state.0.momentum_buffer", randn({4, 1, 3, 3}, {}, &gen)},
      {"state.1.exp_avg_sq", randn({4}, {.dtype = DType::Float64}, &gen)},
      {"state.1.step", full({}, 123)},
  };
  checkpoint.epoch = 3;
  checkpoint.step = 1234;
  checkpoint.rng_seed = 0xFEDCBA9876543210ull;  // past int64: must survive as uint64
  checkpoint.rng_offset = 98765;
  checkpoint.extra = {{"optimizer", "sgd"}, {"lr", "0.1"}};
  return checkpoint;
}

TEST_CASE("a training checkpoint round-trips bit-identically") {
  ScratchDir dir;
  Generator gen(11);
  TrainingCheckpoint saved = sample_checkpoint(gen);
  save_checkpoint(dir.file("ckpt.safetensors"), saved);
  TrainingCheckpoint loaded = load_checkpoint(dir.file("ckpt.safetensors"));
  check_identical(loaded.model, saved.model);
  check_identical(loaded.optimizer, saved.optimizer);
  CHECK(loaded.epoch == 3);
  CHECK(loaded.step == 1234);
  CHECK(loaded.rng_seed == 0xFEDCBA9876543210ull);
  CHECK(loaded.rng_offset == 98765);
  CHECK(loaded.extra == saved.extra);

  // It is a plain safetensors file too: PyTorch sees "model.0.weight", ...
  StateDict plain = load_safetensors(dir.file("ckpt.safetensors"));
  REQUIRE(plain.size() == 7);
  CHECK(plain[0].first == "model.0.weight");
  CHECK(plain[4].first == "optimizer.state.0.momentum_buffer");
}

TEST_CASE("the LR schedule's state has its own section") {
  ScratchDir dir;
  Generator gen(12);
  TrainingCheckpoint saved = sample_checkpoint(gen);
  saved.scheduler = {{"last_step", full({}, 42, {.dtype = DType::Int64})},
                     {"base_lrs", tensor({0.1, 0.01}, {2}, {.dtype = DType::Float64})}};
  save_checkpoint(dir.file("ckpt.safetensors"), saved);
  TrainingCheckpoint loaded = load_checkpoint(dir.file("ckpt.safetensors"));
  check_identical(loaded.scheduler, saved.scheduler);
  check_identical(loaded.optimizer, saved.optimizer);
  const StateDict plain = load_safetensors(dir.file("ckpt.safetensors"));
  CHECK(plain.back().first == "scheduler.base_lrs");
  CHECK(load_safetensors_metadata(dir.file("ckpt.safetensors")).at("loom.checkpoint") == "2");
}

namespace {

// crc32 of bytes [begin, end) as the checkpoint writes it: 8 lowercase hex digits.
std::string crc_hex(const std::string& bytes, size_t begin, size_t end) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08lx",
                crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + begin), end - begin));
  return text;
}

// A format 1 checkpoint, as Loom wrote them before the scheduler had a section
// (the trainer kept it in the optimizer's, as "schedule.*"): the same file
// layout with version "1"; its CRCs are computed here from what
// save_safetensors writes for the same tensors and metadata.
void write_version1_checkpoint(const std::string& path, const StateDict& tensors) {
  std::map<std::string, std::string> metadata = {
      {"loom.checkpoint", "1"}, {"loom.epoch", "2"},      {"loom.step", "40"},
      {"loom.rng_seed", "7"},   {"loom.rng_offset", "9"},
  };
  save_safetensors(path, tensors, metadata);
  const std::string bytes = read_bytes(path);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<uint8_t>(bytes[i]);
  size_t header_end = 8 + header_length;
  while (bytes[header_end - 1] == ' ') --header_end;  // the writer pads the header with spaces
  metadata["loom.header_crc32"] = crc_hex(bytes, 8, header_end);
  metadata["loom.data_crc32"] = crc_hex(bytes, 8 + header_length, bytes.size());
  save_safetensors(path, tensors, metadata);
}

}  // namespace

TEST_CASE("a format 1 checkpoint loads, its trainer's schedule state in the scheduler section") {
  ScratchDir dir;
  const std::string path = dir.file("old.ckpt");
  const Tensor weight = tensor({1, 2}, {2}), momentum = tensor({3, 4}, {2});
  const Tensor last_step = full({}, 40, {.dtype = DType::Int64});
  write_version1_checkpoint(path, {{"model.fc.weight", weight},
                                   {"optimizer.state.0.momentum_buffer", momentum},
                                   {"optimizer.schedule.last_step", last_step}});
  const TrainingCheckpoint loaded = load_checkpoint(path);
  check_identical(loaded.model, {{"fc.weight", weight}});
  check_identical(loaded.optimizer, {{"state.0.momentum_buffer", momentum}});
  check_identical(loaded.scheduler, {{"last_step", last_step}});
  CHECK(loaded.epoch == 2);
  CHECK(loaded.step == 40);
  // A section format 1 did not have is an error there.
  write_version1_checkpoint(path, {{"scheduler.last_step", last_step}});
  CHECK_THROWS_WITH_FRAGMENT(load_checkpoint(path), IoError,
                             "tensor 'scheduler.last_step' is none of 'model.*', 'optimizer.*'");
}

TEST_CASE("the checkpoint CRC is zlib's crc32 of the data section and catches corruption") {
  ScratchDir dir;
  Generator gen(5);
  std::string path = dir.file("ckpt.safetensors");
  save_checkpoint(path, sample_checkpoint(gen));
  std::string bytes = read_bytes(path);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i)
    header_length = (header_length << 8) | static_cast<uint8_t>(bytes[i]);
  size_t data_start = 8 + header_length;
  auto data = reinterpret_cast<const Bytef*>(bytes.data() + data_start);
  char expected[9];
  std::snprintf(expected, sizeof(expected), "%08lx", crc32(0, data, bytes.size() - data_start));
  CHECK(load_safetensors_metadata(path).at("loom.data_crc32") == expected);

  SUBCASE("a flipped data byte") {
    bytes[data_start + 40] ^= 0x10;
    write_bytes(path, bytes);
    CHECK_THROWS_WITH_FRAGMENT(load_checkpoint(path), IoError, "data section checksum mismatch");
  }
  SUBCASE("a changed scalar in the header") {
    size_t at = bytes.find(R"("loom.epoch":"3")");
    REQUIRE(at != std::string::npos);
    bytes[at + 14] = '7';
    write_bytes(path, bytes);
    CHECK_THROWS_WITH_FRAGMENT(load_checkpoint(path), IoError, "header checksum mismatch");
  }
  SUBCASE("a plain safetensors file is not a checkpoint") {
    save_safetensors(path, {{"model.w", ones({2})}});
    CHECK_THROWS_WITH_FRAGMENT(load_checkpoint(path), IoError,
                               "__metadata__ has no 'loom.checkpoint'");
  }
}

}  // namespace
}  // namespace loom
