package jobstore

import (
	"testing"

	"github.com/commandcore/commandcore/internal/procid"
)

// TestIndexDecodedOncePerVersion: listings share the index decoded from a
// file until the file changes, so a busy listing does not decode it each
// time, and the index a launch wrote is not decoded at all.
func TestIndexDecodedOncePerVersion(t *testing.T) {
	s, err := Open(t.TempDir(), procid.Default())
	if err != nil {
		t.Fatal(err)
	}
	written := &index{Schema: indexSchema, Jobs: map[string]indexEntry{}}
	s.writeIndex(written)
	first := s.readIndex()
	if first != written {
		t.Errorf("the index just written was decoded again")
	}
	if again := s.readIndex(); again != first {
		t.Errorf("the same index file was decoded again")
	}
	s.writeIndex(&index{Schema: indexSchema, Jobs: map[string]indexEntry{}})
	if changed := s.readIndex(); changed == first {
		t.Errorf("a replaced index file was not decoded again")
	}
}
