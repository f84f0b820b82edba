// File: tests/data/fixtures.cc
// Temporary folders, random data sets and image encoders for the data tests.
#include "tests/data/fixtures.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/generator.h"
#include "fuzz/image_builders.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

// N images, C channels, H, W image size
namespace loom::data::testing {

namespace {

// What `load` throws, as error_as_ordinary_user reports it.
std::string error_of(const std::function<void()>& load) {
  try {
    load();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a loom::Error: ") + e.what();
  }
  return "";
}

constexpr uid_t kNobody = 65534;

}  // namespace

namespace {

namespace fs = std::filesystem;

// stb_image_write wants interleaved (H, W, C) pixels.
std::vector<uint8_t> interleaved(const Tensor& image) {
  const int64_t C = image.size(0), H = image.size(1), W = image.size(2);
  const std::vector<uint8_t> planar = image.to_vector<uint8_t>();
  std::vector<uint8_t> out(planar.size());
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < H * W; ++i) out[i * C + c] = planar[c * H * W + i];
  }
  return out;
}

void append_to(void* context, void* data, int size) {
  auto* bytes = static_cast<std::vector<uint8_t>*>(context);
  auto* begin = static_cast<uint8_t*>(data);
  bytes->insert(bytes->end(), begin, begin + size);
}


}  // namespace

std::string temp_dir(std::string_view name) {
  static std::atomic<int> counter{0};
  const char* root = std::getenv("TEST_TMPDIR");
  const fs::path dir =
      fs::path(root ? root : "/tmp") / fmt::format("loom_{}_{}_{}", name, getpid(), counter++);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string path_in(const std::string& folder, std::string_view name) {
  return (fs::path(folder) / name).string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  LOOM_CHECK(out.good(), IoError, "[fixtures] cannot write {}", path);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Dataset random_dataset(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed) {
  Generator gen(seed);
  Tensor images = randint(0, 256, {n, c, h, w}, {.dtype = DType::UInt8}, &gen);
  std::vector<double> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<double>((i * 7 + 3) % classes);
  return {images, tensor(labels, {n}, {.dtype = DType::Int64})};
}

std::vector<uint8_t> encode_bmp(const Tensor& image, uint32_t header_size) {
  const int64_t C = image.size(0), H = image.size(1), W = image.size(2);
  const std::vector<uint8_t> pixels = image.to_vector<uint8_t>();
  std::vector<uint8_t> bgr;  // bottom-up rows, blue first
  for (int64_t h = H - 1; h >= 0; --h) {
    for (int64_t w = 0; w < W; ++w) {
      for (int64_t c = 2; c >= 0; --c) bgr.push_back(pixels[((C == 1 ? 0 : c) * H + h) * W + w]);
    }
  }
  return fuzz::bmp_file({.header_size = header_size,
                         .width = static_cast<int32_t>(W),
                         .height = static_cast<int32_t>(H),
                         .bits = 24,
                         .pixels = fuzz::bmp_rows(static_cast<uint32_t>(3 * W),
                                                  static_cast<uint32_t>(H), 8, bgr)});
}

std::vector<uint8_t> encode_png(const Tensor& image) {
  const int C = static_cast<int>(image.size(0));
  const int H = static_cast<int>(image.size(1)), W = static_cast<int>(image.size(2));
  std::vector<uint8_t> png;
  const std::vector<uint8_t> pixels = interleaved(image);
  LOOM_CHECK(stbi_write_png_to_func(append_to, &png, W, H, C, pixels.data(), W * C) != 0, IoError,
             "[fixtures] PNG encoding failed");
  return png;
}

std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality) {
  const int C = static_cast<int>(image.size(0));
  const int H = static_cast<int>(image.size(1)), W = static_cast<int>(image.size(2));
  std::vector<uint8_t> jpeg;
  const std::vector<uint8_t> pixels = interleaved(image);
  LOOM_CHECK(stbi_write_jpg_to_func(append_to, &jpeg, W, H, C, pixels.data(), quality) != 0,
             IoError, "[fixtures] JPEG encoding failed");
  return jpeg;
}

void append_be32(std::vector<uint8_t>& bytes, uint32_t value) {
  for (int i = 3; i >= 0; --i) bytes.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

std::string shared_temp_dir(std::string_view name) {
  static std::atomic<int> counter{0};
  const fs::path dir = fs::path("/tmp") / fmt::format("loom_{}_{}_{}", name, getpid(), counter++);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms(0755));
  return dir.string();
}

std::string error_as_ordinary_user(const std::function<void()>& load) {
  if (::geteuid() != 0) return error_of(load);
  int channel[2];
  LOOM_CHECK(::pipe(channel) == 0, Error, "[error_as_ordinary_user] pipe failed");
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(channel[0]);
    std::string message = ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0
                              ? error_of(load)
                              : "not a loom::Error: cannot become user nobody";
    const ssize_t written = ::write(channel[1], message.data(), message.size());
    ::_exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  ::close(channel[1]);
  std::string message;
  char chunk[4096];
  for (ssize_t got; (got = ::read(channel[0], chunk, sizeof(chunk))) > 0;) message.append(chunk, got);
  ::close(channel[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? message : "the child process failed";
}

}  // namespace loom::data::testing
