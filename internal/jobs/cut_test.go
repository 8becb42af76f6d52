package jobs

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/principal"
)

// TestCutRefusedWhereTheHostCannot: where the owner cuts jobs off the
// user manager and this host cannot (no probe found it works),
// process.start and process.run are refused with permission_denied,
// saying so, and no job is admitted; an owner's word that cannot be read
// refuses them too; without the cut they run as before.
func TestCutRefusedWhereTheHostCannot(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svc := service(t, exe)
	svc.ownerCut = func() (bool, error) { return true, nil }
	_, err = svc.Start(context.Background(), principal.Local, StartRequest{Command: "true"})
	if !errcode.Is(err, errcode.PermissionDenied) || !strings.Contains(err.Error(), "keeps jobs off the user manager (permissions.json), which this host cannot do") {
		t.Fatalf("a cut-off launch this host cannot make: %v", err)
	}
	if _, _, err := svc.RunConfinement(); !errcode.Is(err, errcode.PermissionDenied) || !strings.Contains(err.Error(), "keeps commands off") {
		t.Fatalf("a cut-off process.run this host cannot make: %v", err)
	}
	unreadable := errcode.New(errcode.PermissionDenied, "the local permission ceiling is invalid")
	svc.ownerCut = func() (bool, error) { return false, unreadable }
	if _, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true"}); !errors.Is(err, unreadable) {
		t.Fatalf("a launch under an unreadable ceiling: %v", err)
	}
	if _, _, err := svc.RunConfinement(); !errors.Is(err, unreadable) {
		t.Fatalf("process.run under an unreadable ceiling: %v", err)
	}
	if recs, _ := svc.store.List(); len(recs) != 0 {
		t.Fatalf("refused launches left %d jobs", len(recs))
	}
	svc.ownerCut = func() (bool, error) { return false, nil }
	res, err := svc.Start(context.Background(), principal.Local, StartRequest{Command: "true", WaitMS: 10000})
	if err != nil || res.State != "exited" {
		t.Fatalf("a launch that reaches the user manager: %+v %v", res, err)
	}
	if _, cut, err := svc.RunConfinement(); err != nil || cut {
		t.Fatalf("process.run that reaches the user manager: cut %v, %v", cut, err)
	}
}
