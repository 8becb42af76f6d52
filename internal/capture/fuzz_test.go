package capture

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// fixCRC makes a header's checksum match its fields, so fuzzing reaches the
// field validation behind the checksum.
func fixCRC(b []byte) {
	if len(b) >= fieldsLen {
		binary.LittleEndian.PutUint32(b[offCRC:], crc32.ChecksumIEEE(b[:offCRC]))
	}
}

// seedFile returns the bytes of a sealed (or live) capture of n
// position-derived bytes.
func seedFile(f *testing.F, n int, seal bool) []byte {
	f.Helper()
	path := filepath.Join(f.TempDir(), "seed.cap")
	w, err := Create(path)
	if err != nil {
		f.Fatal(err)
	}
	buf := make([]byte, n)
	fillPos(buf, 0)
	w.Write(buf)
	if seal {
		w.Seal()
	}
	w.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// fuzzFile returns a function that writes content (CRC fixed if asked,
// sparsely extended by extend bytes) to one reused file: each fuzz worker is a
// process that runs its inputs one at a time.
func fuzzFile(f *testing.F) func(t *testing.T, content []byte, fix bool, extend uint32) string {
	headerRetryDelay = 0 // a checksum mismatch here is never a race
	path := filepath.Join(f.TempDir(), "fuzz.cap")
	return func(t *testing.T, content []byte, fix bool, extend uint32) string {
		if fix {
			fixCRC(content)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if extend > 0 { // sparse zeros, so small inputs can back large claims
			size := int64(len(content)) + int64(extend)%(ringOffset+ringBytes+1)
			if err := os.Truncate(path, size); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
}

func checkMetaInvariants(t *testing.T, m Meta) {
	t.Helper()
	if m.ObservedBytes < 0 || m.RetainedBytes < 0 || m.RetainedBytes > headBytes+tailBytes ||
		m.RetainedBytes > m.ObservedBytes || m.RetainedBytes+m.DroppedBytes != m.ObservedBytes ||
		m.Truncated != (m.DroppedBytes > 0) || (m.DroppedBytes > 0 && m.ObservedBytes <= headBytes+tailBytes && !m.WriteError) {
		t.Fatalf("inconsistent meta %+v", m)
	}
}

func FuzzReadMeta(f *testing.F) {
	small := seedFile(f, 100, true)
	big := seedFile(f, headBytes+tailBytes+5000, false)
	f.Add(small, false)
	f.Add(small[:headerSize], false)
	f.Add(big[:headerSize], true)
	f.Add(small[:fieldsLen], true)
	f.Add([]byte("not a capture"), false)
	f.Add([]byte{}, false)
	writeFile := fuzzFile(f)
	f.Fuzz(func(t *testing.T, content []byte, fix bool) {
		m, err := readMeta(writeFile(t, content, fix, 0))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		checkMetaInvariants(t, m)
	})
}

func FuzzReadPage(f *testing.F) {
	small := seedFile(f, 100, true)
	big := seedFile(f, headBytes+tailBytes+5000, true)
	f.Add(small, false, uint32(0), int64(0), 64)
	f.Add(small, false, uint32(0), int64(99), 64)
	f.Add(small, false, uint32(0), int64(101), 64)
	f.Add(small[:headerSize+50], false, uint32(0), int64(0), 1000)
	f.Add(big[:headerSize], true, uint32(len(big)-headerSize), int64(headBytes+7), 1<<20)
	f.Add(big[:headerSize], true, uint32(len(big)-headerSize), int64(headBytes-7), 100)
	f.Add([]byte("garbage"), true, uint32(1<<20), int64(3), 1)
	writeFile := fuzzFile(f)
	f.Fuzz(func(t *testing.T, content []byte, fix bool, extend uint32, offset int64, maxBytes int) {
		path := writeFile(t, content, fix, extend)
		p, m, err := readPage(path, offset, maxBytes)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrOffsetBeyondEnd) {
				t.Fatalf("unexpected error %v", err)
			}
			if errors.Is(err, ErrInvalid) != (offset < 0 || maxBytes <= 0) {
				t.Fatalf("ErrInvalid mismatch for offset %d max %d: %v", offset, maxBytes, err)
			}
			return
		}
		checkPage(t, p, m, offset, maxBytes)
		checkMetaInvariants(t, m)
		if len(p.Data) > 0 && p.NextOffset > m.ObservedBytes {
			t.Fatalf("data [%d,%d) beyond observed %d", p.Offset, p.NextOffset, m.ObservedBytes)
		}
		if offset <= m.ObservedBytes && p.NextOffset > m.ObservedBytes {
			t.Fatalf("next offset %d beyond observed %d", p.NextOffset, m.ObservedBytes)
		}
		if mm, err := readMeta(path); err != nil || mm != m {
			t.Fatalf("ReadMeta %+v, %v disagrees with page meta %+v", mm, err, m)
		}
	})
}
