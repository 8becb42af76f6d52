// Package textenc carries arbitrary output bytes in JSON losslessly: as
// text when they are valid UTF-8, else as base64. process.output,
// process.run and its live chunks share this one convention.
package textenc

import (
	"encoding/base64"
	"unicode/utf8"
)

// Encodings.
const (
	UTF8   = "utf-8"
	Base64 = "base64"
)

// Encode returns b as UTF-8 text when it is valid UTF-8, else as base64,
// with the encoding's name.
func Encode(b []byte) (data, encoding string) {
	if utf8.Valid(b) {
		return string(b), UTF8
	}
	return base64.StdEncoding.EncodeToString(b), Base64
}

// PartialTail returns how many bytes at the end of b begin a UTF-8
// character that is not complete yet, when b is otherwise valid text; 0
// otherwise. Cutting them off (to send with what follows) keeps a text
// stream text across chunk or page boundaries.
func PartialTail(b []byte) int {
	if utf8.Valid(b) {
		return 0
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) && utf8.Valid(b[:i]) {
				return len(b) - i
			}
			return 0
		}
	}
	return 0
}
