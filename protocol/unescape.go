package protocol

// UnescapeAt decodes the URL-escaped byte of a property key or value at
// raw[i] ('+' is a space, %XX a byte, a malformed escape is kept as is) and
// returns it with the index of the next one. It lets callers compare
// escaped properties without allocating (package protocol/filter).
func UnescapeAt(raw []byte, i int) (byte, int) { return unescapeAt(raw, i) }
