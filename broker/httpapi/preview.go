package httpapi

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// previewLimit bounds the body shown by lookups.
const previewLimit = 4096

// preview renders a message body three ways: as text (invalid UTF-8
// replaced), as a hex dump, and indented when it is JSON. binary reports
// control bytes or invalid UTF-8 (the page then opens the hex view).
func preview(body []byte) (text, hexDump, js string, binary, truncated bool) {
	b := body
	if len(b) > previewLimit {
		b, truncated = b[:previewLimit], true
	}
	binary = !utf8.Valid(b)
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
			binary = true
			break
		}
	}
	text = strings.ToValidUTF8(string(b), "\uFFFD")
	hexDump = hex.Dump(b)
	if !truncated && json.Valid(body) {
		var buf bytes.Buffer
		if json.Indent(&buf, body, "", "  ") == nil {
			js = buf.String()
		}
	}
	return
}
