package jobstore

import (
	"testing"

	"github.com/commandcore/commandcore/internal/procid"
)

// TestIndexDecodedOncePerVersion: listings share the index decoded from a
// file until the file changes, so a busy listing does not decode it each
// time.
func TestIndexDecodedOncePerVersion(t *testing.T) {
	s, err := Open(t.TempDir(), procid.Default())
	if err != nil {
		t.Fatal(err)
	}
	s.writeIndex(&index{Schema: indexSchema, Jobs: map[string]indexEntry{}})
	first := s.readIndex()
	if again := s.readIndex(); again != first {
		t.Errorf("the same index file was decoded again")
	}
	s.writeIndex(&index{Schema: indexSchema, Jobs: map[string]indexEntry{}})
	if changed := s.readIndex(); changed == first {
		t.Errorf("a replaced index file was not decoded again")
	}
}
