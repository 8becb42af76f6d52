package activity

import (
	"strings"
	"testing"
	"time"
)

// TestUserManagerEntry: the agent's change of user manager is one
// content-free entry naming how it noticed, kept by the errors-only view
// even when it reconnected.
func TestUserManagerEntry(t *testing.T) {
	path := dbPath(t)
	j := openT(t, path, options{})
	j.Record(ToolCallEvent(ToolProcessStart, jobA, time.Millisecond, nil))
	j.Record(UserManagerEvent(ReasonUserManagerGone, true))
	j.Record(UserManagerEvent(ReasonBusClosed, false))
	j.flush()
	errs, err := reader(t, path, nil).Last(10, true)
	if err != nil || len(errs) != 2 {
		t.Fatalf("errors-only view: %+v, %v", errs, err)
	}
	if e := errs[0]; e.Kind != KindUserManager || e.Reason != "user_manager_gone" || e.Outcome != OutcomeOK || e.JobID != "" {
		t.Fatalf("entry: %+v", e)
	}
	if e := errs[1]; e.Reason != "bus_closed" || e.Outcome != OutcomeFailed {
		t.Fatalf("entry without a manager to reconnect to: %+v", e)
	}
	if line := Format(errs[0]); !strings.Contains(line, "  user_manager  user_manager_gone ") {
		t.Fatalf("line %q", line)
	}
}
