# Doxygen INPUT_FILTER (see Doxyfile): Loom's headers document their API in
# plain // comments, which Doxygen skips. This turns each block of // lines
# into a /** */ block shown verbatim (the comments hold code samples, shapes and
# formulas that Doxygen's markup would mangle), a "File:" block into the
# file's documentation, and a // after a declaration into its ///< note.
function flush(    i, text) {
  if (n == 0) return
  if (lines[1] ~ /^File: /) print indent "/** \\file"
  for (i = 1; i <= n; ++i) {
    text = lines[i]
    gsub(/\*\//, "* /", text)  # a "*/" in the text would end the block
    if (i == 1) text = (lines[1] ~ /^File: / ? "" : "/** ") "\\verbatim " text
    if (i == n) text = text " \\endverbatim */"
    print indent text
  }
  n = 0
}
{
  if (match($0, /^[ \t]*\/\/( |$)/)) {
    if (n == 0) indent = substr($0, 1, RLENGTH - (substr($0, RLENGTH, 1) == " " ? 3 : 2))
    lines[++n] = substr($0, RLENGTH + 1)
    next
  }
  flush()
  # "declaration;  // note": the code part ends in ; or , and holds no quote.
  if (match($0, /[;,][ \t]+\/\/ /) && substr($0, 1, RSTART) !~ /["']/) {
    print substr($0, 1, RSTART) "  ///< \\verbatim " substr($0, RSTART + RLENGTH) " \\endverbatim"
    next
  }
  print
}
END { flush() }
