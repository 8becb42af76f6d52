package authz

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

const narrow = `{"schema_version": 1, "tools": ["process.*", "system.metrics"]}`

func write(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, CeilingFile)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	// Chmod after writing so the umask cannot hide the bits under test.
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// wantDenied checks that a failed load denies every tool, even one the
// file's content would allow, and says why (the reason `commandcore
// status` shows) without the path or content.
func wantDenied(t *testing.T, name, dir, why string) {
	t.Helper()
	c, err := LoadCeiling(dir)
	if err == nil {
		t.Errorf("%s: loaded without an error", name)
		return
	}
	if !errcode.Is(err, errcode.PermissionDenied) {
		t.Errorf("%s: %v, want code permission_denied", name, err)
	}
	msg := err.Error()
	if want := "permission_denied: the local permission ceiling is invalid: " + why; msg != want {
		t.Errorf("%s: message %q, want %q", name, msg, want)
	}
	for _, leak := range []string{dir, CeilingFile, "process", "system", "secret"} {
		if strings.Contains(msg, leak) {
			t.Errorf("%s: message %q echoes %q", name, msg, leak)
		}
	}
	if c == nil {
		t.Errorf("%s: no ceiling returned", name)
		return
	}
	if !c.Present() {
		t.Errorf("%s: an invalid ceiling reports itself absent", name)
	}
	for _, tool := range []string{"process.start", "system.metrics", "files.search"} {
		if c.Allows(tool) {
			t.Errorf("%s: allows %s", name, tool)
		}
		if cerr := c.Check(tool); cerr != err {
			t.Errorf("%s: Check(%s) = %v, want the load error", name, tool, cerr)
		}
	}
}

func TestAbsentAllowsAll(t *testing.T) {
	for name, dir := range map[string]string{
		"no file":      t.TempDir(),
		"no directory": filepath.Join(t.TempDir(), "missing"),
	} {
		c, err := LoadCeiling(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Present() {
			t.Errorf("%s: reports a ceiling", name)
		}
		for _, tool := range []string{"process.start", "files.search", "anything"} {
			if !c.Allows(tool) || c.Check(tool) != nil {
				t.Errorf("%s: denies %s", name, tool)
			}
		}
	}
}

func TestValidNarrows(t *testing.T) {
	c, err := LoadCeiling(write(t, narrow, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Present() {
		t.Fatal("a loaded ceiling reports itself absent")
	}
	for tool, want := range map[string]bool{
		"process.start":   true,
		"process.output":  true,
		"system.metrics":  true,
		"files.search":    false,
		"system.metricsx": false,
		"process":         false,
		"devices.list":    false,
	} {
		if got := c.Allows(tool); got != want {
			t.Errorf("Allows(%s) = %v, want %v", tool, got, want)
		}
		err := c.Check(tool)
		if want != (err == nil) {
			t.Errorf("Check(%s) = %v", tool, err)
		}
		if err != nil {
			if !errcode.Is(err, errcode.PermissionDenied) {
				t.Errorf("Check(%s): code of %v", tool, err)
			}
			if got := errcode.From(err).Message; got != "the machine's owner does not allow this tool here" {
				t.Errorf("Check(%s): message %q", tool, got)
			}
		}
	}
}

func TestWildcardAllowsAll(t *testing.T) {
	c, err := LoadCeiling(write(t, `{"tools":["*"],"schema_version":1}`, 0o400))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Allows("files.search") || !c.Allows("process.start") {
		t.Fatal("a * ceiling denies a tool")
	}
}

// TestNoToolsListAllowsEveryTool: a file that only cuts jobs off the user
// manager, or only refuses admins, narrows no tool, as no file does; what
// it says it keeps.
func TestNoToolsListAllowsEveryTool(t *testing.T) {
	for content, want := range map[string]struct{ reach, admins bool }{
		`{"schema_version": 1, "jobs_reach_user_manager": false}`: {false, true},
		`{"schema_version": 1, "admin": false}`:                   {true, false},
		`{"schema_version": 1}`:                                   {true, true},
	} {
		c, err := LoadCeiling(write(t, content, 0o600))
		if err != nil {
			t.Fatalf("%s: %v", content, err)
		}
		for _, tool := range []string{"process.start", "files.write", "system.metrics"} {
			if !c.Allows(tool) || c.Check(tool) != nil {
				t.Errorf("%s: denies %s", content, tool)
			}
		}
		if !c.Present() || !slices.Equal(c.Tools(), []string{"*"}) {
			t.Errorf("%s: present %v, tools %q; want a ceiling of *", content, c.Present(), c.Tools())
		}
		if c.JobsReachUserManager() != want.reach || c.AdminsAllowed() != want.admins {
			t.Errorf("%s: reach %v admins %v, want %+v", content, c.JobsReachUserManager(), c.AdminsAllowed(), want)
		}
	}
}

func TestEmptyListAllowsNothing(t *testing.T) {
	c, err := LoadCeiling(write(t, `{"schema_version": 1, "tools": []}`, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Present() {
		t.Fatal("reports itself absent")
	}
	for _, tool := range []string{"process.start", "system.metrics", ""} {
		if c.Allows(tool) || !errcode.Is(c.Check(tool), errcode.PermissionDenied) {
			t.Errorf("an empty list allows %q", tool)
		}
	}
}

func TestFailsClosed(t *testing.T) {
	pad := strings.Repeat(" ", limits.MaxPermissionsBytes-len(narrow)+1)
	cases := []struct {
		name, content string
		mode          os.FileMode
		why           string
	}{
		{"group readable", narrow, 0o640, "it is accessible by other users"},
		{"group executable", narrow, 0o610, "it is accessible by other users"},
		{"world readable", narrow, 0o604, "it is accessible by other users"},
		{"world writable", narrow, 0o602, "it is accessible by other users"},
		{"oversize", narrow + pad, 0o600, "it is larger than 65536 bytes"},
		{"empty file", ``, 0o600, "it is not a JSON object"},
		{"malformed", `{"schema_version": 1, "tools": [`, 0o600, "it is malformed JSON"},
		{"not an object", `["process.*"]`, 0o600, "it is not a JSON object"},
		{"null document", `null`, 0o600, "it is not a JSON object"},
		{"unknown field", `{"schema_version": 1, "tools": ["process.*"], "secret": true}`, 0o600, "it has an unknown field"},
		{"case-folded field", `{"Schema_Version": 1, "tools": ["process.*"]}`, 0o600, "it has an unknown field"},
		{"duplicate field", `{"schema_version": 1, "tools": [], "tools": ["process.*", "system.*", "files.*"]}`, 0o600, "it has a duplicate field"},
		{"trailing data", narrow + ` {}`, 0o600, "it has trailing data"},
		{"trailing garbage", narrow + `x`, 0o600, "it has trailing data"},
		{"schema 2", `{"schema_version": 2, "tools": ["process.*"]}`, 0o600, "schema_version must be 1"},
		{"schema 0", `{"schema_version": 0, "tools": ["process.*"]}`, 0o600, "schema_version must be 1"},
		{"schema string", `{"schema_version": "1", "tools": ["process.*"]}`, 0o600, "schema_version must be 1"},
		{"schema float", `{"schema_version": 1.0, "tools": ["process.*"]}`, 0o600, "schema_version must be 1"},
		{"schema null", `{"schema_version": null, "tools": ["process.*"]}`, 0o600, "schema_version must be 1"},
		{"schema missing", `{"tools": ["process.*"]}`, 0o600, "schema_version is missing"},
		{"tools null", `{"schema_version": 1, "tools": null}`, 0o600, "tools must be a list of tool names or patterns"},
		{"tools a string", `{"schema_version": 1, "tools": "process.*"}`, 0o600, "tools must be a list of tool names or patterns"},
		{"tools null entry", `{"schema_version": 1, "tools": ["process.*", null]}`, 0o600, "tools entry 2 is not a valid name or pattern"},
		{"invalid pattern", `{"schema_version": 1, "tools": ["process.*", "secret*"]}`, 0o600, "tools entry 2 is not a valid name or pattern"},
		{"empty pattern", `{"schema_version": 1, "tools": ["process.*", ""]}`, 0o600, "tools entry 2 is not a valid name or pattern"},
		{"reach a string", `{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": "false"}`, 0o600, "jobs_reach_user_manager must be true or false"},
		{"reach a number", `{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": 0}`, 0o600, "jobs_reach_user_manager must be true or false"},
		{"reach null", `{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": null}`, 0o600, "jobs_reach_user_manager must be true or false"},
		{"reach a list", `{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": [false]}`, 0o600, "jobs_reach_user_manager must be true or false"},
		{"reach twice", `{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": false, "jobs_reach_user_manager": true}`, 0o600, "it has a duplicate field"},
		{"reach case-folded", `{"schema_version": 1, "tools": ["process.*"], "Jobs_Reach_User_Manager": false}`, 0o600, "it has an unknown field"},
		{"admin null", `{"schema_version": 1, "tools": ["process.*"], "admin": null}`, 0o600, "admin must be true or false"},
		{"admin a string", `{"schema_version": 1, "tools": ["process.*"], "admin": "x"}`, 0o600, "admin must be true or false"},
		{"admin a quoted false", `{"schema_version": 1, "tools": ["process.*"], "admin": "false"}`, 0o600, "admin must be true or false"},
		{"admin a number", `{"schema_version": 1, "tools": ["process.*"], "admin": 0}`, 0o600, "admin must be true or false"},
		{"admin twice", `{"schema_version": 1, "tools": ["process.*"], "admin": false, "admin": true}`, 0o600, "it has a duplicate field"},
		{"admin case-folded", `{"schema_version": 1, "tools": ["process.*"], "Admin": false}`, 0o600, "it has an unknown field"},
	}
	for _, c := range cases {
		wantDenied(t, c.name, write(t, c.content, c.mode), c.why)
	}
}

// TestJobsReachUserManager: the owner's "jobs_reach_user_manager" is what
// the ceiling reports, true unless a valid file says false, and it narrows
// no tool list: a cut-off ceiling still allows the tools it names.
func TestJobsReachUserManager(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		reach   bool
	}{
		"false":  {`{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": false}`, false},
		"true":   {`{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": true}`, true},
		"absent": {`{"schema_version": 1, "tools": ["process.*"]}`, true},
		"first":  {`{"jobs_reach_user_manager": false, "tools": ["process.*"], "schema_version": 1}`, false},
	} {
		c, err := LoadCeiling(write(t, tc.content, 0o600))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := c.JobsReachUserManager(); got != tc.reach {
			t.Errorf("%s: JobsReachUserManager() = %v, want %v", name, got, tc.reach)
		}
		if !c.Allows("process.start") || !c.Allows("process.run") || c.Allows("files.read") {
			t.Errorf("%s: the key changed which tools the ceiling allows", name)
		}
	}
	absent, err := LoadCeiling(t.TempDir())
	if err != nil || !absent.JobsReachUserManager() {
		t.Errorf("without a file jobs must reach the user manager: %v", err)
	}
	// A refused file runs nothing; it establishes no cut either.
	refused, _ := LoadCeiling(write(t, `{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": "no"}`, 0o600))
	if !refused.JobsReachUserManager() || refused.Allows("process.start") {
		t.Error("an invalid ceiling claims a cut or allows a tool")
	}
}

// TestAdminsAllowed: the owner's "admin" is what the ceiling reports, true
// unless a valid file says false, and it narrows no tool list.
func TestAdminsAllowed(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		allowed bool
	}{
		"false":          {`{"schema_version": 1, "tools": ["process.*"], "admin": false}`, false},
		"true":           {`{"schema_version": 1, "tools": ["process.*"], "admin": true}`, true},
		"absent":         {`{"schema_version": 1, "tools": ["process.*"]}`, true},
		"first":          {`{"admin": false, "tools": ["process.*"], "schema_version": 1}`, false},
		"beside the cut": {`{"schema_version": 1, "tools": ["process.*"], "jobs_reach_user_manager": false, "admin": true}`, true},
	} {
		c, err := LoadCeiling(write(t, tc.content, 0o600))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := c.AdminsAllowed(); got != tc.allowed {
			t.Errorf("%s: AdminsAllowed() = %v, want %v", name, got, tc.allowed)
		}
		if !c.Allows("process.stop") || c.Allows("files.read") {
			t.Errorf("%s: the key changed which tools the ceiling allows", name)
		}
	}
	absent, err := LoadCeiling(t.TempDir())
	if err != nil || !absent.AdminsAllowed() {
		t.Errorf("without a file admins must be allowed: %v", err)
	}
	// A refused file runs nothing, for admins neither.
	refused, _ := LoadCeiling(write(t, `{"schema_version": 1, "tools": ["*"], "admin": null}`, 0o600))
	if refused.AdminsAllowed() {
		t.Error("an invalid ceiling allows admins")
	}
}

// TestJobsCutOffReadsTheFileAtEachCall: the owner's word the launches
// ask is the file as it is at that moment: an edit takes effect at the
// next call, and a broken file is an error, not a silent default.
func TestJobsCutOffReadsTheFileAtEachCall(t *testing.T) {
	dir := t.TempDir()
	cutOff := JobsCutOff(dir)
	for _, step := range []struct {
		content string
		cut     bool
		fails   bool
	}{
		{"", false, false},
		{`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": false}`, true, false},
		{`{"schema_version": 1, "tools": ["*"]}`, false, false},
		{`{"schema_version": 1, "tools": ["*"], "jobs_reach_user_manager": 0}`, false, true},
	} {
		if step.content != "" {
			if err := os.WriteFile(filepath.Join(dir, CeilingFile), []byte(step.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cut, err := cutOff()
		if cut != step.cut || (err != nil) != step.fails {
			t.Errorf("%q: cut %v, %v; want cut %v, failure %v", step.content, cut, err, step.cut, step.fails)
		}
	}
}

// The oversize case above must fail only for its size.
func TestPaddedToTheLimitLoads(t *testing.T) {
	pad := strings.Repeat(" ", limits.MaxPermissionsBytes-len(narrow))
	if _, err := LoadCeiling(write(t, narrow+pad, 0o600)); err != nil {
		t.Fatal(err)
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := write(t, narrow, 0o600)
	target := filepath.Join(dir, "real.json")
	if err := os.Rename(filepath.Join(dir, CeilingFile), target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, CeilingFile)); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, "symlink", dir, "it is a symbolic link")

	// A dangling link is not an absent file.
	dangling := t.TempDir()
	if err := os.Symlink(filepath.Join(dangling, "nowhere"), filepath.Join(dangling, CeilingFile)); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, "dangling symlink", dangling, "it is a symbolic link")
}

func TestNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, CeilingFile), 0o700); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, "directory", dir, "it is not a regular file")

	// Opening a FIFO for reading would block until a writer appears; the
	// load must refuse it at once instead.
	fifo := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifo, CeilingFile), 0o600); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, "fifo", fifo, "it is not a regular file")
}

func TestNotOwned(t *testing.T) {
	dir := write(t, narrow, 0o600)
	if err := os.Chown(filepath.Join(dir, CeilingFile), 65534, 65534); err != nil {
		t.Skipf("cannot chown here (not root): %v", err)
	}
	wantDenied(t, "owned by nobody", dir, "it is not owned by the agent's user")
}

// TestTools: what `commandcore status` lists as the ceiling. nil means "no
// list to show" (no ceiling, which allows every tool, or an invalid one,
// which allows none); an empty list is a ceiling that allows nothing.
func TestTools(t *testing.T) {
	absent, err := LoadCeiling(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := absent.Tools(); got != nil {
		t.Errorf("no ceiling: Tools() = %#v, want nil", got)
	}
	invalid, err := LoadCeiling(write(t, narrow, 0o644))
	if err == nil {
		t.Fatal("a world-readable ceiling loaded")
	}
	if got := invalid.Tools(); got != nil {
		t.Errorf("an invalid ceiling: Tools() = %#v, want nil", got)
	}
	if got := (*Ceiling)(nil).Tools(); got != nil {
		t.Errorf("nil ceiling: Tools() = %#v", got)
	}
	empty, err := LoadCeiling(write(t, `{"schema_version": 1, "tools": []}`, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if got := empty.Tools(); got == nil || len(got) != 0 {
		t.Errorf("an empty list: Tools() = %#v, want an empty list", got)
	}
	c, err := LoadCeiling(write(t, narrow, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Tools()
	if !slices.Equal(got, []string{"process.*", "system.metrics"}) {
		t.Fatalf("Tools() = %q", got)
	}
	got[0] = "*"
	if c.Allows("files.search") {
		t.Fatal("changing the returned list widened the ceiling")
	}
}

func TestNilAndZeroDeny(t *testing.T) {
	for name, c := range map[string]*Ceiling{"nil": nil, "zero": {}} {
		if c.Allows("process.start") {
			t.Errorf("%s ceiling allows a tool", name)
		}
		if !errcode.Is(c.Check("process.start"), errcode.PermissionDenied) {
			t.Errorf("%s ceiling: Check passes", name)
		}
		if c.Present() {
			t.Errorf("%s ceiling reports itself present", name)
		}
		if c.AdminsAllowed() {
			t.Errorf("%s ceiling allows admins", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		narrow, `{"schema_version":1,"tools":[]}`, `{"schema_version":1,"tools":["*"]}`,
		`{"schema_version": 1, "tools": ["a.*", "b"]} `, `{"tools":[],"schema_version":1}`,
		`{"schema_version":1,"tools":["a*"]}`, `{"schema_version":1,"tools":[]}{}`,
		`{"schema_version":1,"tools":[],"tools":[]}`, `{"schema_version":1.0,"tools":[]}`,
		`{"schema_version":1,"tools":["\u0061"]}`, ``, `{`, `null`,
		`{"schema_version":1,"tools":[],"jobs_reach_user_manager":false}`,
		`{"schema_version":1,"tools":["*"],"jobs_reach_user_manager":true}`,
		`{"schema_version":1,"tools":[],"jobs_reach_user_manager":null}`,
		`{"schema_version":1,"tools":[],"jobs_reach_user_manager":"false"}`,
		`{"schema_version":1,"tools":[],"jobs_reach_user_\u006danager":false}`,
		`{"schema_version":1,"tools":["process.*"],"admin":false}`,
		`{"schema_version":1,"tools":[],"admin":true,"jobs_reach_user_manager":false}`,
		`{"schema_version":1,"tools":[],"admin":null}`, `{"schema_version":1,"tools":[],"admin":"x"}`,
		`{"schema_version":1,"tools":[],"\u0061dmin":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCeiling(data)
		if c == nil {
			t.Fatal("no ceiling returned")
		}
		if !c.Present() {
			t.Fatal("a decoded ceiling reports itself absent")
		}
		if err != nil {
			if !errcode.Is(err, errcode.PermissionDenied) {
				t.Fatalf("error without permission_denied: %v", err)
			}
			if c.Allows("process.start") || c.Allows("") || c.Check("x") != err {
				t.Fatal("a refused ceiling allows a tool")
			}
			if !c.JobsReachUserManager() {
				t.Fatal("a refused ceiling claims to cut jobs off the user manager")
			}
			if c.AdminsAllowed() {
				t.Fatal("a refused ceiling allows admins")
			}
			return
		}
		// Admins are refused only by the literal false of the owner's file.
		if !c.AdminsAllowed() && !bytes.Contains(data, []byte("false")) {
			t.Fatalf("refused admins without a false in %q", data)
		}
		// A cut comes only from the literal false of the owner's file.
		if !c.JobsReachUserManager() && !bytes.Contains(data, []byte("false")) {
			t.Fatalf("cut jobs off without a false in %q", data)
		}
		for _, tool := range c.tools {
			if !ValidScope(tool) {
				t.Fatalf("accepted invalid entry %q", tool)
			}
		}
	})
}
