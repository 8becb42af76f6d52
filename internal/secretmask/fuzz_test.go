package secretmask

import (
	"bytes"
	"io"
	"testing"
)

// FuzzMask: whatever the job writes and however its writes are cut, what a
// Reader hands on is what masking the whole stream at once gives, and
// holds no secret (secrets here have no '*', which Mask is made of).
func FuzzMask(f *testing.F) {
	f.Add([]byte("ab\x00abcd"), []byte("xxabcdyyabab"), []byte{3, 1, 2})
	f.Add([]byte("hunter2"), []byte("pw: hunter2\npw: hunter2"), []byte{6, 6, 1})
	f.Add([]byte("aa\x00aab"), []byte("aaaaab"), []byte{1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, secretList, data, cuts []byte) {
		s := &Set{}
		for _, k := range bytes.Split(secretList, []byte{0}) {
			if len(k) > 0 && !bytes.ContainsRune(k, '*') {
				s.Add(k)
			}
		}
		var parts []string
		rest := data
		for _, c := range cuts {
			n := min(int(c), len(rest))
			parts = append(parts, string(rest[:n]))
			rest = rest[n:]
		}
		parts = append(parts, string(rest))
		got, err := io.ReadAll(s.Reader(&pieces{p: parts}))
		if err != nil {
			t.Fatal(err)
		}
		whole, held := mask(nil, data, s.snapshot(), true)
		if held != 0 || !bytes.Equal(got, whole) {
			t.Fatalf("in pieces %q: %q; at once: %q (%d held)", parts, got, whole, held)
		}
		for _, k := range s.snapshot() {
			if bytes.Contains(got, k.b) {
				t.Fatalf("secret %q in %q", k.b, got)
			}
		}
	})
}
