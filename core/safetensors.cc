// File: core/safetensors.cc
// Safetensors reading (a strict, schema-driven header parser over JsonReader,
// then layout checks) and writing (a compact header, atomic replacement).
#include "core/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json.h"
#include "core/safetensors_internal.h"
#include "core/tensor.h"

namespace loom {

// Tensor bytes go to and from disk as they lie in memory; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little,
              "Loom's safetensors I/O assumes a little-endian host");

namespace safetensors_internal {
namespace {

// --- the format ---------------------------------------------------------------

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the Rust crate's limit
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeCode {
  std::string_view code;
  int bits;
  std::optional<DType> dtype;  // empty: a safetensors dtype Loom has no tensors of
};

constexpr DTypeCode kDTypeCodes[] = {
    {"F32", 32, DType::Float32},
    {"F64", 64, DType::Float64},
    {"F16", 16, DType::Float16},
    {"BF16", 16, DType::BFloat16},
    {"I32", 32, DType::Int32},
    {"I64", 64, DType::Int64},
    {"U8", 8, DType::UInt8},
    {"BOOL", 8, DType::Bool},
    // Known to the format, so a file holding them gets "unsupported", not "unknown".
    {"F4", 4, {}},
    {"F6_E2M3", 6, {}},
    {"F6_E3M2", 6, {}},
    {"F8_E4M3", 8, {}},
    {"F8_E5M2", 8, {}},
    {"F8_E8M0", 8, {}},
    {"I8", 8, {}},
    {"I16", 16, {}},
    {"U16", 16, {}},
    {"U32", 32, {}},
    {"U64", 64, {}},
    {"C64", 64, {}},
};
constexpr std::string_view kLoomCodes = "F32, F64, F16, BF16, I32, I64, U8, BOOL";

const DTypeCode* find_code(std::string_view code) {
  for (const DTypeCode& entry : kDTypeCodes) {
    if (entry.code == code) return &entry;
  }
  return nullptr;
}

std::string_view code_of(DType dtype) {
  for (const DTypeCode& entry : kDTypeCodes) {
    if (entry.dtype == dtype) return entry.code;
  }
  __builtin_unreachable();
}

// --- the header parser ---------------------------------------------------------

// Reads the header JSON against the one schema safetensors allows: an object of
// tensor objects plus an optional object of strings.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view path)
      : json_(text, fmt::format("[safetensors] {}", path), "header") {}

  Header parse() {
    Header header;
    json_.skip_space();  // writers may pad before the '{' too
    json_.parse_object("the header", [&](std::string key) {
      if (key == kMetadataKey) {
        header.metadata = parse_metadata();
      } else {
        header.entries.push_back(parse_entry(std::move(key)));
      }
    });
    json_.skip_space();
    if (!json_.at_end()) json_.syntax_error("only space padding may follow the closing '}'");
    return header;
  }

 private:
  std::map<std::string, std::string> parse_metadata() {
    std::map<std::string, std::string> metadata;
    json_.expect_kind('{', "an object of strings", "__metadata__");
    json_.parse_object("__metadata__", [&](std::string key) {
      json_.expect_kind('"', "a string", fmt::format("__metadata__ value '{}'", key));
      metadata[std::move(key)] = json_.parse_string();
    });
    return metadata;
  }

  Entry parse_entry(std::string name) {
    Entry entry;
    entry.name = std::move(name);
    std::string what = fmt::format("tensor '{}'", entry.name);
    json_.expect_kind('{', "an object {\"dtype\", \"shape\", \"data_offsets\"}", what);
    std::set<std::string> fields;
    json_.parse_object(what, [&](std::string field) {
      parse_field(entry, field, what);
      fields.insert(std::move(field));
    });
    for (std::string_view field : {"dtype", "shape", "data_offsets"}) {
      if (!fields.contains(std::string(field)))
        json_.schema_error(fmt::format("{} has no '{}'", what, field));
    }
    return entry;
  }

  void parse_field(Entry& entry, const std::string& field, const std::string& what) {
    std::string where = fmt::format("{} field '{}'", what, field);
    if (field == "dtype") {
      json_.expect_kind('"', "a string", where);
      entry.code = json_.parse_string();
    } else if (field == "shape") {
      entry.shape = json_.parse_uint_array(fmt::format("{} shape entry", what));
    } else if (field == "data_offsets") {
      std::vector<uint64_t> offsets = json_.parse_uint_array(fmt::format("{} data offset", what));
      if (offsets.size() != 2)
        json_.schema_error(fmt::format("{} needs two numbers [begin, end]", where));
      entry.begin = offsets[0];
      entry.end = offsets[1];
    } else {
      json_.schema_error(fmt::format(
          "{} has unknown field '{}' (expected dtype, shape, data_offsets)", what, field));
    }
  }

  JsonReader json_;
};

// --- header validation -----------------------------------------------------------

// The entry's byte size; checks its dtype and that its shape neither overflows
// nor ends mid-byte. Sets entry.dtype.
uint64_t checked_nbytes(Entry& entry, std::string_view path) {
  const DTypeCode* code = find_code(entry.code);
  LOOM_CHECK(code != nullptr, IoError,
             "[safetensors] {}: tensor '{}' has unknown dtype '{}' (Loom reads {})", path,
             entry.name, entry.code, kLoomCodes);
  // The strides multiply every size but zeros (a zero-size tensor still gets
  // strides), so [0, 2^62, 2^62] overflows although it holds no element.
  uint64_t numel = 1, span = 1;
  constexpr auto kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  bool overflow = false;
  for (uint64_t size : entry.shape) {
    overflow |= size > kMaxInt64 || __builtin_mul_overflow(numel, size, &numel) ||
                __builtin_mul_overflow(span, std::max<uint64_t>(size, 1), &span);
  }
  uint64_t bits = 0, span_bits = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(code->bits), &bits) ||
              __builtin_mul_overflow(span, static_cast<uint64_t>(code->bits), &span_bits) ||
              span > kMaxInt64 || span_bits / 8 > kMaxInt64;
  LOOM_CHECK(!overflow, IoError,
             "[safetensors] {}: tensor '{}' has shape [{}] whose size overflows 64 bits, or "
             "whose strides do (a size of 0 counts as 1 in them)",
             path, entry.name, fmt::join(entry.shape, ", "));
  LOOM_CHECK(bits % 8 == 0, IoError,
             "[safetensors] {}: tensor '{}' of {}-bit dtype {} with shape [{}] has {} bits, which "
             "does not end on a byte boundary",
             path, entry.name, code->bits, entry.code, fmt::join(entry.shape, ", "), bits);
  LOOM_CHECK(
      code->dtype.has_value(), IoError,
      "[safetensors] {}: tensor '{}' has dtype {}, which Loom does not support (Loom reads {})",
      path, entry.name, entry.code, kLoomCodes);
  entry.dtype = *code->dtype;
  return bits / 8;
}

Shape sizes_of(const Entry& entry) { return Shape(entry.shape.begin(), entry.shape.end()); }

// Indices of `entries` by (begin, end); ties keep header order, so zero-size
// tensors come back where they were saved.
std::vector<size_t> data_order(const std::vector<Entry>& entries) {
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries[a].begin, entries[a].end) <
           std::pair(entries[b].begin, entries[b].end);
  });
  return order;
}

// Tensors must tile the data section exactly: sorted by offset, each begins
// where the previous ended, the first at 0, the last at the end of the file.
// Leaves `entries` in that order.
void check_layout(std::vector<Entry>& entries, uint64_t data_bytes, std::string_view path) {
  std::vector<uint64_t> nbytes;
  for (Entry& entry : entries) nbytes.push_back(checked_nbytes(entry, path));
  std::vector<size_t> order = data_order(entries);
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (size_t i : order) {
    const Entry& entry = entries[i];
    auto offsets = [&] {
      return fmt::format("tensor '{}' has data_offsets [{}, {}]", entry.name, entry.begin,
                         entry.end);
    };
    LOOM_CHECK(entry.end >= entry.begin, IoError, "[safetensors] {}: {}: end is before begin", path,
               offsets());
    LOOM_CHECK(entry.begin >= cursor, IoError,
               "[safetensors] {}: {}, overlapping tensor '{}' [{}, {}]", path, offsets(),
               previous->name, previous->begin, previous->end);
    LOOM_CHECK(entry.begin == cursor, IoError,
               "[safetensors] {}: {}, leaving a gap of {} bytes after {} (tensors must be packed "
               "from offset 0)",
               path, offsets(), entry.begin - cursor,
               previous ? fmt::format("tensor '{}'", previous->name) : "the header");
    LOOM_CHECK(entry.end - entry.begin == nbytes[i], IoError,
               "[safetensors] {}: {} but shape {} {} needs {} bytes", path, offsets(),
               shape_str(sizes_of(entry)), dtype_name(entry.dtype), nbytes[i]);
    cursor = entry.end;
    previous = &entry;
  }
  LOOM_CHECK(cursor <= data_bytes, IoError,
             "[safetensors] {}: the file is truncated: its tensors need {} data bytes but only {} "
             "follow the header",
             path, cursor, data_bytes);
  LOOM_CHECK(cursor == data_bytes, IoError,
             "[safetensors] {}: {} unexpected bytes follow the last tensor (tensors end at data "
             "byte {} of {}); a safetensors file ends where its last tensor does",
             path, data_bytes - cursor, cursor, data_bytes);
  std::vector<Entry> sorted;
  for (size_t i : order) sorted.push_back(std::move(entries[i]));
  entries = std::move(sorted);
}

// Any byte but 0 or 1 would be undefined behaviour as a C++ bool.
void check_bool_bytes(const Tensor& t, std::string_view name, std::string_view path) {
  const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
  const auto* end = bytes + t.numel();
  const auto* bad = std::find_if(bytes, end, [](unsigned char b) { return b > 1; });
  LOOM_CHECK(bad == end, IoError,
             "[safetensors] {}: tensor '{}' (BOOL) holds byte {} at element {}; booleans must be "
             "0 or 1",
             path, name, static_cast<int>(*bad), bad - bytes);
}

void check_utf8(std::string_view text, std::string_view what, std::string_view op) {
  LOOM_CHECK(!invalid_utf8_at(text), ValueError,
             "[{}] {} '{}' is not valid UTF-8 (JSON needs UTF-8)", op, what, text);
}

}  // namespace

std::string header_json(const std::vector<Entry>& entries,
                        const std::map<std::string, std::string>& metadata) {
  std::string out = "{";
  if (!metadata.empty()) {
    append_json_string(out, kMetadataKey);
    out += ":{";
    for (const auto& [key, value] : metadata) {
      if (out.back() != '{') out += ',';
      append_json_string(out, key);
      out += ':';
      append_json_string(out, value);
    }
    out += '}';
  }
  for (const Entry& entry : entries) {
    if (out.size() > 1) out += ',';
    append_json_string(out, entry.name);
    out += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", entry.code,
                       fmt::join(entry.shape, ","), entry.begin, entry.end);
  }
  return out + "}";
}

// --- reading -----------------------------------------------------------------------

Header read_header(InputFile& file) {
  const std::string& path = file.path();
  LOOM_CHECK(file.size() >= 8, IoError,
             "[safetensors] {}: the file is {} bytes, too small for the 8-byte header length "
             "(is it a safetensors file?)",
             path, file.size());
  unsigned char length_bytes[8];
  file.read_exact(length_bytes, 8, "the header length");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  LOOM_CHECK(length <= kMaxHeaderBytes, IoError,
             "[safetensors] {}: header length {} exceeds the {}-byte limit (a corrupt length, or "
             "not a safetensors file)",
             path, length, kMaxHeaderBytes);
  LOOM_CHECK(8 + length <= file.size(), IoError,
             "[safetensors] {}: header length {} runs past the end of the {}-byte file", path,
             length, file.size());
  std::string text(length, '\0');
  file.read_exact(text.data(), length, "the header");
  std::optional<size_t> bad = invalid_utf8_at(text);
  LOOM_CHECK(!bad, IoError,
             "[safetensors] {}: header is not valid UTF-8 (byte 0x{:02x} at header byte {})", path,
             static_cast<unsigned char>(text[bad.value_or(0)]), bad.value_or(0));
  Header header = HeaderParser(text, path).parse();
  check_layout(header.entries, file.size() - 8 - length, path);
  return header;
}

uint32_t crc32_of(uint32_t crc, const void* data, uint64_t nbytes) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), nbytes));
}

StateDict read_tensors(InputFile& file, const Header& header, uint32_t* crc) {
  StateDict tensors;
  for (const Entry& entry : header.entries) {
    Tensor t = empty(sizes_of(entry), {.dtype = entry.dtype});
    uint64_t nbytes = entry.end - entry.begin;
    if (nbytes > 0) file.read_exact(t.raw_data(), nbytes, fmt::format("tensor '{}'", entry.name));
    if (crc != nullptr) *crc = crc32_of(*crc, t.raw_data(), nbytes);
    if (entry.dtype == DType::Bool) check_bool_bytes(t, entry.name, file.path());
    tensors.emplace_back(entry.name, std::move(t));
  }
  return tensors;
}

StateDict to_device(StateDict tensors, Device device) {
  if (device.is_cpu()) return tensors;
  for (auto& [name, t] : tensors) t = t.to(device);
  return tensors;
}

// --- writing -----------------------------------------------------------------------

std::vector<OutTensor> prepare(const StateDict& tensors, std::string_view op) {
  std::vector<OutTensor> out;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(t.defined(), ValueError, "[{}] tensor '{}' is undefined", op, name);
    LOOM_CHECK(name != kMetadataKey, ValueError,
               "[{}] '{}' is reserved for metadata; rename the tensor", op, name);
    LOOM_CHECK(names.insert(name).second, ValueError,
               "[{}] tensor name '{}' appears twice (safetensors names must be unique)", op, name);
    check_utf8(name, "tensor name", op);
    Tensor data = t.detach().cpu().contiguous();
    uint64_t nbytes = static_cast<uint64_t>(data.numel()) * element_size(data.dtype());
    Entry entry{.name = name,
                .code = std::string(code_of(data.dtype())),
                .shape = std::vector<uint64_t>(data.sizes().begin(), data.sizes().end()),
                .begin = offset,
                .end = offset + nbytes,
                .dtype = data.dtype()};
    offset += nbytes;
    out.push_back({std::move(entry), std::move(data)});
  }
  return out;
}

std::vector<Entry> entries_of(const std::vector<OutTensor>& tensors) {
  std::vector<Entry> entries;
  for (const OutTensor& t : tensors) entries.push_back(t.entry);
  return entries;
}

void write_file(const std::string& path, const std::vector<OutTensor>& tensors,
                const std::map<std::string, std::string>& metadata) {
  std::string header = header_json(entries_of(tensors), metadata);
  header.append((8 - header.size() % 8) % 8, ' ');  // so the data starts 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  AtomicFile file(path, "safetensors");
  file.write(length, sizeof(length));
  file.write(header.data(), header.size());
  for (const OutTensor& t : tensors) file.write(t.data.raw_data(), t.entry.end - t.entry.begin);
  file.commit();
}

void check_metadata(const std::map<std::string, std::string>& metadata, std::string_view op) {
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "metadata key", op);
    check_utf8(value, "metadata value", op);
  }
}

}  // namespace safetensors_internal

// --- public API ---------------------------------------------------------------------

using safetensors_internal::check_metadata;
using safetensors_internal::code_of;
using safetensors_internal::Header;
using safetensors_internal::prepare;
using safetensors_internal::read_header;
using safetensors_internal::read_tensors;
using safetensors_internal::to_device;
using safetensors_internal::write_file;

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_metadata(metadata, "save_safetensors");
  write_file(path, prepare(tensors, "save_safetensors"), metadata);
}

StateDict load_safetensors(const std::string& path, Device device) {
  InputFile file(path, "safetensors");
  Header header = read_header(file);
  return to_device(read_tensors(file, header, nullptr), device);
}

std::string_view safetensors_dtype(DType dtype) { return code_of(dtype); }

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  InputFile file(path, "safetensors");
  return read_header(file).metadata;
}

void check_save_path(const std::string& path) {
  std::error_code error;
  LOOM_CHECK(!std::filesystem::is_directory(path, error), IoError,
             "[safetensors] {}: is a directory; give a file name to save to", path);
  AtomicFile probe(path, "safetensors");  // its destructor removes the uncommitted file again
}

}  // namespace loom
