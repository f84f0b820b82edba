// File: tests/data/fixtures.h
// What the data tests write to disk: fresh temporary folders, seeded random
// data sets, and small encoders (BMP by hand, PNG and JPEG through
// stb_image_write) for image-folder fixtures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"

// N images, C channels, H, W image size
namespace loom::data::testing {

// A new empty folder under $TEST_TMPDIR (or /tmp), unique per call.
std::string temp_dir(std::string_view name);
// Joins a folder and a file name.
std::string path_in(const std::string& folder, std::string_view name);

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_bytes(const std::string& path);

// N images (N, C, H, W) of seeded random pixels; label i is (i * 7 + 3) % classes.
Dataset random_dataset(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed);

// Encoders for one (C, H, W) uint8 image, C = 1 or 3.
// 24-bit, bottom-up rows, under a Windows (40-byte) or OS/2 (12-byte) header.
std::vector<uint8_t> encode_bmp(const Tensor& image, uint32_t header_size = 40);
std::vector<uint8_t> encode_png(const Tensor& image);
std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality);

// A new empty folder under /tmp that every user may enter (mode 0755): for
// checks that run as an ordinary user, who cannot reach $TEST_TMPDIR.
std::string shared_temp_dir(std::string_view name);

// The message of the loom::Error that `load` throws when run with an ordinary
// user's permissions: in a child process as user nobody when the test runs as
// root (root reads any folder), in this process otherwise. "" when it throws
// nothing; a line starting "not a loom::Error" for any other exception.
std::string error_as_ordinary_user(const std::function<void()>& load);

// The big-endian 4-byte integer, as IDX headers store it.
void append_be32(std::vector<uint8_t>& bytes, uint32_t value);

}  // namespace loom::data::testing
