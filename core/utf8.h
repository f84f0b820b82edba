// File: core/utf8.h
// UTF-8 validation and encoding, and `printable`, which makes text read from
// files safe to show in a message: loom::Error passes every message through
// it, so a tensor name, a dtype string or a decoder's reason quoted from a
// corrupt file can neither cut a message short (a NUL), drive a terminal (an
// escape sequence) nor leave invalid UTF-8 in a log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace loom {

// Length of the valid UTF-8 sequence at text[i] (1 to 4), or 0 where no valid
// sequence starts (overlong forms, surrogates and code points past U+10FFFF
// are invalid, as RFC 3629 says).
size_t utf8_sequence_length(std::string_view text, size_t i);

// Byte offset of the first invalid UTF-8 sequence in `text`.
std::optional<size_t> invalid_utf8_at(std::string_view text);

// Appends code point `cp` (at most U+10FFFF, not a surrogate) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// `text` with every byte that would not print as itself written as \xNN:
// control characters other than newline and tab, bytes that are not valid
// UTF-8, and the invisible code points that reorder or hide text (C1
// controls, zero-width and bidirectional marks, the byte-order mark U+FEFF).
// Printable ASCII and other valid UTF-8 pass through unchanged.
std::string printable(std::string_view text);

}  // namespace loom
