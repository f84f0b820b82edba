// File: fuzz/idx_fuzzer.cc
// IDX parsing, plain and gzipped. The first byte picks the path: even, the
// rest is an IDX file; odd, the rest is gzip data (mutations of real gzip
// streams reach the inflater's error paths); and with bit 1 set as well, the
// rest is gzipped here first, so that mutated IDX headers reach the
// declared-size check behind the inflater.
#include <zlib.h>

#include <vector>

#include "core/error.h"
#include "data/idx.h"
#include "fuzz/fuzz_input.h"

namespace {

std::vector<uint8_t> gzip(std::span<const uint8_t> bytes) {
  z_stream stream{};
  if (deflateInit2(&stream, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::vector<uint8_t> out(deflateBound(&stream, bytes.size()));
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  try {
    if ((data[0] & 1) == 0) {
      loom::data::parse_idx(rest, "fuzz.idx");
    } else if ((data[0] & 2) == 0) {
      loom::data::parse_idx_gzip(rest, "fuzz.idx.gz");
    } else {
      loom::data::parse_idx_gzip(gzip(rest), "fuzz.idx.gz");
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
