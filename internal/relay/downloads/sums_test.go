package downloads

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/limits"
)

func TestParseSums(t *testing.T) {
	h := fmt.Sprintf("%x", sha256.Sum256([]byte("x")))
	good := h + "  b.deb\n" + h + " *a-1.2.3_x.rpm\n"
	sums, err := ParseSums([]byte(good))
	if err != nil || len(sums) != 2 || sums[0].Name != "a-1.2.3_x.rpm" || sums[1].Name != "b.deb" || sums[0].SHA256 != sha256.Sum256([]byte("x")) {
		t.Fatalf("%+v %v", sums, err)
	}
	if sums, err := ParseSums(nil); err != nil || len(sums) != 0 {
		t.Fatalf("empty: %v %v", sums, err)
	}
	var many strings.Builder
	for i := range limits.DownloadsMaxFiles + 1 {
		fmt.Fprintf(&many, "%s  f%d\n", h, i)
	}
	for name, bad := range map[string]string{
		"no newline":     h + "  b.deb",
		"one space":      h + " b.deb\n",
		"upper hex":      strings.ToUpper(h) + "  b.deb\n",
		"short hash":     h[:63] + "  b.deb\n",
		"no name":        h + "  \n",
		"slash":          h + "  a/b\n",
		"dot dot":        h + "  ..\n",
		"hidden":         h + "  .deb\n",
		"space in name":  h + "  a b\n",
		"twice":          h + "  b\n" + h + "  b\n",
		"blank line":     h + "  b\n\n",
		"crlf":           h + "  b\r\n",
		"long name":      h + "  " + strings.Repeat("a", limits.DownloadNameMaxBytes+1) + "\n",
		"too many files": many.String(),
	} {
		if _, err := ParseSums([]byte(bad)); err == nil {
			t.Errorf("%s: accepted %q", name, bad)
		}
	}
	if _, err := ParseSums(bytes.Repeat([]byte(h+"  "+strings.Repeat("a", 128)+"\n"), 100)); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("over the byte bound: %v", err)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "SHA256SUMS", "commandcore_1.2.3_amd64.deb", "commandcore-1.2.3-1.x86_64.rpm", strings.Repeat("a", limits.DownloadNameMaxBytes)} {
		if !ValidName(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", ".", "..", ".hidden", "a/b", "a\\b", "a b", "a\x00", "é", strings.Repeat("a", limits.DownloadNameMaxBytes+1)} {
		if ValidName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParseSums: whatever a SHA256SUMS holds, what is accepted names only
// single, valid, distinct path segments, and formats back to a file that
// parses the same.
func FuzzParseSums(f *testing.F) {
	h := fmt.Sprintf("%x", sha256.Sum256(nil))
	f.Add([]byte(h + "  commandcore-linux-amd64\n" + h + " *commandcore_1.2.3_arm64.deb\n"))
	f.Add([]byte(h + "  ../etc/passwd\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		sums, err := ParseSums(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, s := range sums {
			if !ValidName(s.Name) || strings.ContainsAny(s.Name, "/\\\x00") || s.Name == "." || s.Name == ".." || seen[s.Name] {
				t.Fatalf("accepted name %q", s.Name)
			}
			seen[s.Name] = true
		}
		again, err := ParseSums(FormatSums(sums))
		if err != nil || len(again) != len(sums) {
			t.Fatalf("formatted sums do not parse back: %v", err)
		}
		for i := range again {
			if again[i] != sums[i] {
				t.Fatalf("round trip changed %+v to %+v", sums[i], again[i])
			}
		}
	})
}

// FuzzValidName: a valid name is one path segment that is no directory's
// own name.
func FuzzValidName(f *testing.F) {
	f.Add("commandcore-linux-amd64")
	f.Add("..")
	f.Fuzz(func(t *testing.T, name string) {
		if ValidName(name) && (strings.ContainsAny(name, "/\\\x00") || strings.HasPrefix(name, ".") || len(name) > limits.DownloadNameMaxBytes) {
			t.Fatalf("accepted %q", name)
		}
	})
}
