package jobmeta_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/atomicfile"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/procid"
)

// TestClaimReadUnderEitherName: the claim is read under its name, under
// the earlier identity.json when only that exists, the current name first
// when both do; with neither there is no claim, and Claimed says the same.
func TestClaimReadUnderEitherName(t *testing.T) {
	dir := t.TempDir()
	claim := func(pid int) *jobmeta.Claim {
		return &jobmeta.Claim{Schema: jobmeta.SchemaVersion, Supervisor: procid.Identity{PID: pid, StartTicks: 1}, BootID: "b", ClaimedAt: time.Now().UTC()}
	}
	if _, err := jobmeta.ReadClaim(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no claim: %v", err)
	}
	if jobmeta.Claimed(dir) {
		t.Fatal("claimed with no claim")
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, "identity.json"), claim(7)); err != nil {
		t.Fatal(err)
	}
	if c, err := jobmeta.ReadClaim(dir); err != nil || c.Supervisor.PID != 7 || !jobmeta.Claimed(dir) {
		t.Fatalf("the earlier name: %+v, %v", c, err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, jobmeta.ClaimFile), claim(8)); err != nil {
		t.Fatal(err)
	}
	if c, err := jobmeta.ReadClaim(dir); err != nil || c.Supervisor.PID != 8 {
		t.Fatalf("both names: %+v, %v", c, err)
	}
	os.Remove(filepath.Join(dir, "identity.json"))
	if c, err := jobmeta.ReadClaim(dir); err != nil || c.Supervisor.PID != 8 || !jobmeta.Claimed(dir) {
		t.Fatalf("the current name: %+v, %v", c, err)
	}
	// Not identity.json, the enrollment credential's name.
	if jobmeta.ClaimFile != "claim.json" {
		t.Fatalf("the claim is written as %s, want claim.json", jobmeta.ClaimFile)
	}
}
