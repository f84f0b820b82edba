// File: core/serialize.cc
// Safetensors reading and writing (a strict, schema-driven JSON header parser
// and a compact writer), atomic file replacement, and training checkpoints.
#include "core/serialize.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace loom {

// Tensor bytes go to and from disk as they lie in memory; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little,
              "Loom's safetensors I/O assumes a little-endian host");

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

// One tensor's line in the header. Offsets count from the end of the header.
struct Entry {
  std::string name;
  std::string code;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;
  DType dtype = DType::Float32;  // set once the entry is validated
};

struct Header {
  std::vector<Entry> entries;  // in data order once validated
  std::map<std::string, std::string> metadata;
};

std::string errno_text(int error) { return std::generic_category().message(error); }

// --- UTF-8 and JSON text -----------------------------------------------------

// Length of the valid UTF-8 sequence at `s[i]`, or 0 (overlong forms,
// surrogates and code points past U+10FFFF are invalid, as RFC 3629 says).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
  if (length == 0 || lead > 0xF4 || i + length > s.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  unsigned char second = byte(i + 1);
  if (lead == 0xE0 && second < 0xA0) return 0;  // overlong
  if (lead == 0xED && second > 0x9F) return 0;  // surrogate
  if (lead == 0xF0 && second < 0x90) return 0;  // overlong
  if (lead == 0xF4 && second > 0x8F) return 0;  // past U+10FFFF
  return length;
}

// Byte offset of the first invalid UTF-8 sequence, if any.
std::optional<size_t> invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t length = utf8_sequence_length(s, i);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_code_point(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The header as the Rust crate writes it: compact, __metadata__ first (when
// there is any), then the tensors in data order. Unpadded.
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

// --- the header parser ---------------------------------------------------------

// Reads the header JSON against the one schema safetensors allows: an object of
// tensor objects plus an optional object of strings. Knowing the schema means no
// recursion and no generic JSON values, so the header length bounds everything.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view path) : text_(text), path_(path) {}

  Header parse() {
    Header header;
    skip_space();  // writers may pad before the '{' too
    parse_object("the header", [&](std::string key) {
      if (key == kMetadataKey) {
        header.metadata = parse_metadata();
      } else {
        header.entries.push_back(parse_entry(std::move(key)));
      }
    });
    skip_space();
    if (pos_ < text_.size()) syntax_error("only space padding may follow the closing '}'");
    return header;
  }

 private:
  [[noreturn]] void syntax_error(std::string_view message) const {
    throw IoError(fmt::format("[safetensors] {}: header is not valid JSON at byte {}: {}", path_,
                              pos_, message));
  }
  [[noreturn]] void schema_error(std::string_view message) const {
    throw IoError(fmt::format("[safetensors] {}: {}", path_, message));
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= text_.size(); }
  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
      ++pos_;
    }
  }
  bool consume(char c) {
    if (at_end() || peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, std::string_view context) {
    if (!consume(c)) {
      syntax_error(at_end()
                       ? fmt::format("the header ends where '{}' was expected in {}", c, context)
                       : fmt::format("expected '{}' in {}, found '{}'", c, context, peek()));
    }
  }

  // What the value starting here is, for "must be a string, got a number".
  std::string_view value_kind() const {
    char c = peek();
    if (at_end()) return "the end of the header";
    if (c == '"') return "a string";
    if (c == '{') return "an object";
    if (c == '[') return "an array";
    if (c == 't' || c == 'f') return "a boolean";
    if (c == 'n') return "null";
    return c == '-' || (c >= '0' && c <= '9') ? "a number" : "something that is not JSON";
  }
  void expect_kind(char open, std::string_view kind, std::string_view what) {
    if (peek() != open)
      schema_error(fmt::format("{} must be {}, got {}", what, kind, value_kind()));
  }

  // Calls on_member(key) with the parser at each member's value. Duplicate keys
  // are errors: JSON parsers disagree on which one wins.
  template <class Fn>
  void parse_object(std::string_view what, Fn&& on_member) {
    expect('{', what);
    std::set<std::string> seen;
    skip_space();
    if (consume('}')) return;
    while (true) {
      skip_space();
      if (peek() != '"') syntax_error(fmt::format("expected a quoted key in {}", what));
      std::string key = parse_string();
      if (!seen.insert(key).second)
        schema_error(fmt::format("duplicate key '{}' in {}", key, what));
      skip_space();
      expect(':', what);
      skip_space();
      on_member(std::move(key));
      skip_space();
      if (consume('}')) return;
      expect(',', what);
    }
  }

  uint32_t parse_hex4() {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      char c = peek();
      int digit = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
      if (digit < 0) syntax_error("\\u must be followed by four hex digits");
      value = value * 16 + digit;
    }
    return value;
  }

  // After "\u": one code point, joining a UTF-16 surrogate pair.
  uint32_t parse_unicode_escape() {
    uint32_t unit = parse_hex4();
    if (unit >= 0xDC00 && unit <= 0xDFFF) syntax_error("lone low surrogate in \\u escape");
    if (unit < 0xD800 || unit > 0xDBFF) return unit;
    if (!consume('\\') || !consume('u'))
      syntax_error("high surrogate not followed by \\u low surrogate");
    uint32_t low = parse_hex4();
    if (low < 0xDC00 || low > 0xDFFF)
      syntax_error("high surrogate not followed by a low surrogate");
    return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
  }

  // After a backslash.
  void parse_escape(std::string& out) {
    constexpr std::string_view kEscaped = "\"\\/bfnrt", kMeaning = "\"\\/\b\f\n\r\t";
    if (consume('u')) {
      append_code_point(out, parse_unicode_escape());
      return;
    }
    size_t which = kEscaped.find(peek());
    if (at_end() || which == std::string_view::npos) syntax_error("unknown escape in string");
    out += kMeaning[which];
    ++pos_;
  }

  // The header is already known to be UTF-8, so bytes pass through.
  std::string parse_string() {
    expect('"', "a string");
    std::string out;
    while (true) {
      if (at_end()) syntax_error("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        syntax_error("control character inside a string (escape it)");
      }
      if (c == '\\') {
        parse_escape(out);
      } else {
        out += c;
      }
    }
  }

  // A JSON integer >= 0 that fits 64 bits; fractions and exponents are refused.
  uint64_t parse_uint(std::string_view what) {
    if (peek() == '-') schema_error(fmt::format("{} is negative", what));
    expect_digit(what);
    size_t start = pos_;
    uint64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      uint64_t digit = peek() - '0';
      if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
        schema_error(fmt::format("{} overflows: it does not fit in 64 bits", what));
      }
      value = value * 10 + digit;
      ++pos_;
    }
    if (text_[start] == '0' && pos_ - start > 1) syntax_error("numbers may not have leading zeros");
    if (peek() == '.' || peek() == 'e' || peek() == 'E') {
      schema_error(fmt::format("{} must be an integer", what));
    }
    return value;
  }
  void expect_digit(std::string_view what) {
    if (peek() < '0' || peek() > '9') {
      schema_error(fmt::format("{} must be a non-negative integer, got {}", what, value_kind()));
    }
  }

  std::vector<uint64_t> parse_uint_array(std::string_view what) {
    expect_kind('[', "an array", what);
    expect('[', what);
    std::vector<uint64_t> values;
    skip_space();
    if (consume(']')) return values;
    while (true) {
      skip_space();
      values.push_back(parse_uint(what));
      skip_space();
      if (consume(']')) return values;
      expect(',', what);
    }
  }

  std::map<std::string, std::string> parse_metadata() {
    std::map<std::string, std::string> metadata;
    expect_kind('{', "an object of strings", "__metadata__");
    parse_object("__metadata__", [&](std::string key) {
      expect_kind('"', "a string", fmt::format("__metadata__ value '{}'", key));
      metadata[std::move(key)] = parse_string();
    });
    return metadata;
  }

  Entry parse_entry(std::string name) {
    Entry entry;
    entry.name = std::move(name);
    std::string what = fmt::format("tensor '{}'", entry.name);
    expect_kind('{', "an object {\"dtype\", \"shape\", \"data_offsets\"}", what);
    std::set<std::string> fields;
    parse_object(what, [&](std::string field) {
      std::string where = fmt::format("{} field '{}'", what, field);
      if (field == "dtype") {
        expect_kind('"', "a string", where);
        entry.code = parse_string();
      } else if (field == "shape") {
        entry.shape = parse_uint_array(fmt::format("{} shape entry", what));
      } else if (field == "data_offsets") {
        std::vector<uint64_t> offsets = parse_uint_array(fmt::format("{} data offset", what));
        if (offsets.size() != 2)
          schema_error(fmt::format("{} needs two numbers [begin, end]", where));
        entry.begin = offsets[0];
        entry.end = offsets[1];
      } else {
        schema_error(fmt::format("{} has unknown field '{}' (expected dtype, shape, data_offsets)",
                                 what, field));
      }
      fields.insert(std::move(field));
    });
    for (std::string_view field : {"dtype", "shape", "data_offsets"}) {
      if (!fields.contains(std::string(field)))
        schema_error(fmt::format("{} has no '{}'", what, field));
    }
    return entry;
  }

  std::string_view text_;
  std::string_view path_;
  size_t pos_ = 0;
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

// --- reading -----------------------------------------------------------------------

class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    // O_NONBLOCK so that a FIFO cannot hang us before fstat rejects it; regular
    // files ignore it.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    LOOM_CHECK(fd_ >= 0, IoError, "[safetensors] {}: cannot open: {}", path, errno_text(errno));
    struct stat info = {};
    bool stat_ok = ::fstat(fd_, &info) == 0;
    int error = errno;
    if (!stat_ok || !S_ISREG(info.st_mode)) {
      ::close(fd_);
      throw IoError(fmt::format("[safetensors] {}: {}", path,
                                stat_ok ? "not a regular file" : errno_text(error)));
    }
    size_ = static_cast<uint64_t>(info.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  void read_exact(void* data, uint64_t nbytes, std::string_view what) {
    auto* out = static_cast<char*>(data);
    while (nbytes > 0) {
      ssize_t got = ::read(fd_, out, std::min<uint64_t>(nbytes, 1u << 30));
      if (got < 0 && errno == EINTR) continue;
      LOOM_CHECK(got > 0, IoError, "[safetensors] {}: cannot read {}: {}", path_, what,
                 got == 0 ? "unexpected end of file (did it shrink while being read?)"
                          : errno_text(errno));
      out += got;
      nbytes -= static_cast<uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Reads and validates the header, leaving the file at the first data byte.
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

// Reads the data section (the file must be at its start) into CPU tensors, in
// data order; `crc` accumulates its CRC-32 when given.
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

// The umask, read without changing it (umask(2) can only be read by setting
// it, which races with other threads creating files).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (!line.starts_with("Umask:")) continue;
    const size_t digits = line.find_first_not_of(" \t", 6);
    unsigned mask = 0;
    if (digits == std::string::npos) break;
    if (std::from_chars(line.data() + digits, line.data() + line.size(), mask, 8).ec == std::errc()) {
      return static_cast<mode_t>(mask & 0777);
    }
    break;
  }
  return 022;  // the usual umask, where /proc does not say
}

// Temporary files left older than this process by a writer that no longer
// holds their lock are stale. (A container restarts its trainer with the same
// PID, so the PID in the name cannot tell a dead writer from us.)
const std::filesystem::file_time_type kProcessStart = std::filesystem::file_time_type::clock::now();

// The PID in "<name>.tmp.<pid>" or "<name>.tmp.<pid>.<suffix>", if `entry` is such a name.
std::optional<pid_t> temp_owner(std::string_view entry, std::string_view name) {
  std::string prefix = fmt::format("{}.tmp.", name);
  if (!entry.starts_with(prefix)) return std::nullopt;
  std::string_view rest = entry.substr(prefix.size());
  pid_t pid = 0;
  auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (error != std::errc() || end == rest.data() || pid <= 0) return std::nullopt;
  if (end != rest.data() + rest.size() && *end != '.') return std::nullopt;
  return pid;
}

// Removes the temporary files of earlier saves to `path` whose writers died
// mid-save. A live writer holds an exclusive flock on its temporary file, so a
// file we can lock belongs to a dead one; a file made after we started may be
// a writer between mkstemp and flock, so it is left unless its PID is gone.
void remove_stale_temps(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) return;  // the save itself reports an unusable folder
  std::string name = path.filename().string();
  for (const fs::directory_entry& entry : it) {
    std::optional<pid_t> owner = temp_owner(entry.path().filename().string(), name);
    if (!owner || !entry.is_regular_file(error)) continue;
    int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    bool unlocked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    bool owner_gone = ::kill(*owner, 0) != 0 && errno == ESRCH;
    bool older = entry.last_write_time(error) < kProcessStart && !error;
    if (unlocked && (owner_gone || older)) ::unlink(entry.path().c_str());
    ::close(fd);
  }
}

// A file written under a temporary name beside `path` and renamed over it by
// commit(). Destroyed uncommitted (an exception mid-save), it removes the
// temporary file, so whatever was at `path` is left as it was. The name is
// ours alone (mkstemp), and held under flock until the rename, so that a
// later save can tell our leftovers, should we be killed, from a live save.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)) {
    remove_stale_temps(path_);
    std::string pattern = fmt::format("{}.tmp.{}.XXXXXX", path_, ::getpid());
    fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
    temp_path_ = pattern;
    if (fd_ < 0) fail(fmt::format("cannot create a temporary file {}", temp_path_));
    // mkstemp makes the file 0600; a checkpoint gets the mode a plain create would give it.
    if (::flock(fd_, LOCK_EX) != 0 || ::fchmod(fd_, 0666 & ~current_umask()) != 0) {
      int error = errno;
      ::close(std::exchange(fd_, -1));
      ::unlink(temp_path_.c_str());
      errno = error;
      fail(fmt::format("cannot lock the temporary file {}", temp_path_));
    }
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t nbytes) {
    const auto* in = static_cast<const char*>(data);
    while (nbytes > 0) {
      ssize_t put = ::write(fd_, in, std::min<uint64_t>(nbytes, 1u << 30));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) fail(fmt::format("cannot write {}", temp_path_));
      in += put;
      nbytes -= static_cast<uint64_t>(put);
    }
  }

  // Data on disk before the name points at it, and the name on disk before we
  // return. The lock is held until after the rename, so no other save takes
  // our file for a dead writer's.
  void commit() {
    if (::fsync(fd_) != 0) fail(fmt::format("cannot fsync {}", temp_path_));
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      fail(fmt::format("cannot rename {} over it", temp_path_));
    }
    renamed_ = true;
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail(fmt::format("cannot close {}", temp_path_));
    std::filesystem::path dir = std::filesystem::path(path_).parent_path();
    if (dir.empty()) dir = ".";
    int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool synced = dir_fd >= 0 && ::fsync(dir_fd) == 0;
    int error = errno;
    if (dir_fd >= 0) ::close(dir_fd);
    LOOM_CHECK(synced, IoError,
               "[safetensors] {}: saved, but cannot fsync the directory {}: {} (the new file may "
               "not survive a power loss)",
               path_, dir.string(), errno_text(error));
  }

 private:
  [[noreturn]] void fail(std::string_view action) {
    int error = errno;
    throw IoError(fmt::format("[safetensors] {}: {}: {} (any previous file there is untouched)",
                              path_, action, errno_text(error)));
  }

  std::string path_, temp_path_;
  int fd_ = -1;
  bool renamed_ = false;
};

// A tensor ready to write: dense, on the CPU, no history.
struct OutTensor {
  Entry entry;
  Tensor data;
};

void check_utf8(std::string_view text, std::string_view what, std::string_view op) {
  LOOM_CHECK(!invalid_utf8_at(text), ValueError,
             "[{}] {} '{}' is not valid UTF-8 (JSON needs UTF-8)", op, what, text);
}

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
  AtomicFile file(path);
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

// --- checkpoints ------------------------------------------------------------------

constexpr std::string_view kModelPrefix = "model.", kOptimizerPrefix = "optimizer.",
                           kExtraPrefix = "extra.";
constexpr std::string_view kFormatKey = "loom.checkpoint", kFormatVersion = "1";
constexpr std::string_view kEpochKey = "loom.epoch", kStepKey = "loom.step",
                           kSeedKey = "loom.rng_seed", kOffsetKey = "loom.rng_offset";
// data_crc32 is the CRC-32 of the data section (zlib.crc32 of the bytes after the
// header). header_crc32 covers the rest of the header (names, dtypes, shapes,
// offsets, metadata), recomputed from what was parsed, so a flipped digit in
// "loom.epoch" is caught too.
constexpr std::string_view kDataCrcKey = "loom.data_crc32", kHeaderCrcKey = "loom.header_crc32";

std::string crc_text(uint32_t crc) { return fmt::format("{:08x}", crc); }

uint32_t header_crc(const std::vector<Entry>& entries,
                    std::map<std::string, std::string> metadata) {
  metadata.erase(std::string(kDataCrcKey));
  metadata.erase(std::string(kHeaderCrcKey));
  std::string text = header_json(entries, metadata);
  return crc32_of(0, text.data(), text.size());
}

StateDict prefixed(const StateDict& model, const StateDict& optimizer) {
  StateDict all;
  for (const auto& [name, t] : model) all.emplace_back(std::string(kModelPrefix) + name, t);
  for (const auto& [name, t] : optimizer) all.emplace_back(std::string(kOptimizerPrefix) + name, t);
  return all;
}

std::map<std::string, std::string> checkpoint_metadata(const TrainingCheckpoint& checkpoint) {
  std::map<std::string, std::string> metadata = {
      {std::string(kFormatKey), std::string(kFormatVersion)},
      {std::string(kEpochKey), std::to_string(checkpoint.epoch)},
      {std::string(kStepKey), std::to_string(checkpoint.step)},
      {std::string(kSeedKey), std::to_string(checkpoint.rng_seed)},
      {std::string(kOffsetKey), std::to_string(checkpoint.rng_offset)},
  };
  for (const auto& [key, value] : checkpoint.extra)
    metadata[std::string(kExtraPrefix) + key] = value;
  return metadata;
}

const std::string& required(const std::map<std::string, std::string>& metadata,
                            std::string_view key, std::string_view path) {
  auto it = metadata.find(std::string(key));
  LOOM_CHECK(it != metadata.end(), IoError,
             "[checkpoint] {}: __metadata__ has no '{}' (is this a Loom training checkpoint? a "
             "plain state_dict loads with load_safetensors)",
             path, key);
  return it->second;
}

template <class Int>
Int metadata_int(const std::map<std::string, std::string>& metadata, std::string_view key,
                 std::string_view path, int base = 10) {
  const std::string& text = required(metadata, key, path);
  Int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  LOOM_CHECK(error == std::errc() && end == text.data() + text.size() && !text.empty(), IoError,
             "[checkpoint] {}: __metadata__ '{}' is '{}', not a base-{} integer", path, key, text,
             base);
  return value;
}

// Trainers count epochs in an int; a checkpoint past that is corrupt or forged.
constexpr int64_t kMaxEpoch = std::numeric_limits<int32_t>::max();

int64_t metadata_in_range(const std::map<std::string, std::string>& metadata,
                          std::string_view key, std::string_view path, int64_t max) {
  const std::string& text = required(metadata, key, path);
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  LOOM_CHECK(error == std::errc() && end == text.data() + text.size() && !text.empty() &&
                 value >= 0 && value <= max,
             IoError,
             "[checkpoint] {}: __metadata__ '{}' is '{}'; expected an integer from 0 to {} (the "
             "checkpoint is corrupt or was not written by Loom; use another checkpoint)",
             path, key, text, max);
  return value;
}

void check_crc(const std::map<std::string, std::string>& metadata, std::string_view key,
               uint32_t computed, std::string_view part, std::string_view path) {
  auto stored = metadata_int<uint32_t>(metadata, key, path, 16);
  LOOM_CHECK(stored == computed, IoError,
             "[checkpoint] {}: {} checksum mismatch: stored crc32 {}, computed {} (the file is "
             "corrupt; use an older checkpoint)",
             path, part, crc_text(stored), crc_text(computed));
}

// Splits "model.x" / "optimizer.y" back into the two state dicts.
void split_prefixed(StateDict tensors, TrainingCheckpoint& checkpoint, std::string_view path) {
  for (auto& [name, t] : tensors) {
    if (name.starts_with(kModelPrefix)) {
      checkpoint.model.emplace_back(name.substr(kModelPrefix.size()), std::move(t));
    } else if (name.starts_with(kOptimizerPrefix)) {
      checkpoint.optimizer.emplace_back(name.substr(kOptimizerPrefix.size()), std::move(t));
    } else {
      LOOM_CHECK(false, IoError,
                 "[checkpoint] {}: tensor '{}' is neither 'model.*' nor 'optimizer.*'", path, name);
    }
  }
}

}  // namespace

// --- public API ---------------------------------------------------------------------

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_metadata(metadata, "save_safetensors");
  write_file(path, prepare(tensors, "save_safetensors"), metadata);
}

StateDict load_safetensors(const std::string& path, Device device) {
  InputFile file(path);
  Header header = read_header(file);
  return to_device(read_tensors(file, header, nullptr), device);
}

std::string_view safetensors_dtype(DType dtype) { return code_of(dtype); }

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  InputFile file(path);
  return read_header(file).metadata;
}

void check_save_path(const std::string& path) {
  std::error_code error;
  LOOM_CHECK(!std::filesystem::is_directory(path, error), IoError,
             "[safetensors] {}: is a directory; give a file name to save to", path);
  AtomicFile probe(path);  // its destructor removes the uncommitted file again
}

void save_checkpoint(const std::string& path, const TrainingCheckpoint& checkpoint) {
  check_metadata(checkpoint.extra, "save_checkpoint");
  std::vector<OutTensor> tensors =
      prepare(prefixed(checkpoint.model, checkpoint.optimizer), "save_checkpoint");
  std::map<std::string, std::string> metadata = checkpoint_metadata(checkpoint);
  uint32_t data_crc = 0;
  for (const OutTensor& t : tensors) {
    data_crc = crc32_of(data_crc, t.data.raw_data(), t.entry.end - t.entry.begin);
  }
  metadata[std::string(kHeaderCrcKey)] = crc_text(header_crc(entries_of(tensors), metadata));
  metadata[std::string(kDataCrcKey)] = crc_text(data_crc);
  write_file(path, tensors, metadata);
}

TrainingCheckpoint load_checkpoint(const std::string& path, Device device) {
  InputFile file(path);
  Header header = read_header(file);
  const std::string& version = required(header.metadata, kFormatKey, path);
  check_crc(header.metadata, kHeaderCrcKey, header_crc(header.entries, header.metadata), "header",
            path);
  LOOM_CHECK(version == kFormatVersion, IoError,
             "[checkpoint] {}: checkpoint format version '{}' is not the one this Loom reads ({})",
             path, version, kFormatVersion);
  uint32_t data_crc = 0;
  StateDict tensors = read_tensors(file, header, &data_crc);
  check_crc(header.metadata, kDataCrcKey, data_crc, "data section", path);

  TrainingCheckpoint checkpoint;
  split_prefixed(to_device(std::move(tensors), device), checkpoint, path);
  checkpoint.epoch = metadata_in_range(header.metadata, kEpochKey, path, kMaxEpoch);
  checkpoint.step = metadata_in_range(header.metadata, kStepKey, path,
                                      std::numeric_limits<int64_t>::max());
  checkpoint.rng_seed = metadata_int<uint64_t>(header.metadata, kSeedKey, path);
  checkpoint.rng_offset = metadata_int<uint64_t>(header.metadata, kOffsetKey, path);
  for (const auto& [key, value] : header.metadata) {
    if (key.starts_with(kExtraPrefix)) checkpoint.extra[key.substr(kExtraPrefix.size())] = value;
  }
  return checkpoint;
}

}  // namespace loom
