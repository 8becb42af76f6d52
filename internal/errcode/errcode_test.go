package errcode

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strconv"
	"strings"
	"testing"
)

// wire is every code as clients see it: the words of the README's Tools
// section, spelled out here rather than taken from the
// constants, so that renaming a code fails this table. A new code gets a
// row here with the word the contract gives it.
var wire = map[string]struct {
	code Code
	word string
}{
	"NotFound":           {NotFound, "not_found"},
	"InvalidArgument":    {InvalidArgument, "invalid_argument"},
	"JobTableFull":       {JobTableFull, "job_table_full"},
	"RetentionFull":      {RetentionFull, "retention_full"},
	"PolicyInvalid":      {PolicyInvalid, "policy_invalid"},
	"SystemdUnavailable": {SystemdUnavailable, "systemd_unavailable"},
	"PermissionDenied":   {PermissionDenied, "permission_denied"},
	"GrantInvalid":       {GrantInvalid, "grant_invalid"},
	"IdentityMismatch":   {IdentityMismatch, "identity_mismatch"},
	"Internal":           {Internal, "internal"},
	"NotInteractive":     {NotInteractive, "not_interactive"},
	"NotRunning":         {NotRunning, "not_running"},
	"InputClosed":        {InputClosed, "input_closed"},
	// docs/tools.md, files.write and files.edit.
	"AlreadyExists": {AlreadyExists, "already_exists"},
	"Conflict":      {Conflict, "conflict"},
	"EditMismatch":  {EditMismatch, "edit_mismatch"},
	// README, Tools: the relay's answers when the device cannot be reached
	// or its result does not fit one frame.
	"DeviceOffline":  {DeviceOffline, "device_offline"},
	"ResultTooLarge": {ResultTooLarge, "result_too_large"},
	// README: a second link for a device whose link still answers.
	"DeviceBusy": {DeviceBusy, "device_busy"},
	// README: the relay's refusals of a silent device, a flood and a
	// busy relay.
	"DeviceTimeout": {DeviceTimeout, "device_timeout"},
	"RateLimited":   {RateLimited, "rate_limited"},
	"Unavailable":   {Unavailable, "unavailable"},
	// README: an admin grant where the owner refuses admins.
	"AdminRefused": {AdminRefused, "admin_refused"},
	// README: process.input's secret_prompt at a device.
	"ElicitationUnsupported": {ElicitationUnsupported, "elicitation_unsupported"},
}

// declaredCodes returns every constant of type Code declared in errcode.go,
// by name, with the string literal it is declared as.
func declaredCodes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "errcode.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Code" {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not declared as a string literal", name.Name)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out[name.Name] = s
			}
		}
	}
	return out
}

// TestWireCodes pins every code's word on the wire, and fails when a code
// is declared without a row in the table above.
func TestWireCodes(t *testing.T) {
	declared := declaredCodes(t)
	if len(declared) == 0 {
		t.Fatal("no Code constants found in errcode.go")
	}
	for name, value := range declared {
		w, ok := wire[name]
		if !ok {
			t.Errorf("errcode.%s (%q) has no row in the wire table of TestWireCodes: add it with the word the README gives it", name, value)
			continue
		}
		if value != w.word {
			t.Errorf("errcode.%s is declared %q, the contract says %q", name, value, w.word)
		}
	}
	for name, w := range wire {
		if _, ok := declared[name]; !ok {
			t.Errorf("the wire table names errcode.%s, which errcode.go does not declare", name)
		}
		if string(w.code) != w.word {
			t.Errorf("errcode.%s is %q, the contract says %q", name, w.code, w.word)
		}
		raw, err := json.Marshal(New(w.code, "m"))
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"code":"` + w.word + `","message":"m"}`; string(raw) != want {
			t.Errorf("errcode.%s on the wire: %s, want %s", name, raw, want)
		}
	}
}

// TestWordsAreSnakeCase: every code is a stable snake_case word (README).
func TestWordsAreSnakeCase(t *testing.T) {
	for name, w := range wire {
		ok := w.word != "" && !strings.HasPrefix(w.word, "_") && !strings.HasSuffix(w.word, "_")
		for _, c := range w.word {
			ok = ok && (c >= 'a' && c <= 'z' || c == '_')
		}
		if !ok {
			t.Errorf("errcode.%s: %q is not a snake_case word", name, w.word)
		}
	}
}

// TestDetailsTravelWithTheCode: details appear on the wire beside code and
// message, and WithDetails leaves the original without them.
func TestDetailsTravelWithTheCode(t *testing.T) {
	base := New(EditMismatch, "m")
	raw, err := json.Marshal(base.WithDetails(map[string]int{"found": 2}))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"code":"edit_mismatch","message":"m","details":{"found":2}}`; string(raw) != want {
		t.Fatalf("on the wire: %s, want %s", raw, want)
	}
	if base.Details != nil {
		t.Fatal("WithDetails changed the error it was called on")
	}
}

func TestIsChecksTheCode(t *testing.T) {
	err := New(NotFound, "no such job")
	if !Is(err, NotFound) {
		t.Fatal("Is does not see its own code")
	}
	if Is(err, InvalidArgument) || Is(err, Internal) {
		t.Fatal("Is reports a code the error does not carry")
	}
	wrapped := fmt.Errorf("look up job: %w", err)
	if !Is(wrapped, NotFound) || Is(wrapped, PermissionDenied) {
		t.Fatal("Is through fmt.Errorf's %w")
	}
	if Is(errors.New("not_found"), NotFound) {
		t.Fatal("an error without a code carries one")
	}
	if Is(nil, NotFound) {
		t.Fatal("nil carries a code")
	}
}

func TestWrapKeepsTheCauseLocal(t *testing.T) {
	err := Wrap(Internal, fs.ErrPermission, "cannot write the job record")
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatal("Wrap lost its cause")
	}
	if errors.Unwrap(err) != fs.ErrPermission {
		t.Fatalf("Unwrap = %v", errors.Unwrap(err))
	}
	if err.Error() != "internal: cannot write the job record" {
		t.Fatalf("Error() = %q", err.Error())
	}
	// The cause stays on this machine: it is not part of the wire form.
	raw, jerr := json.Marshal(err)
	if jerr != nil {
		t.Fatal(jerr)
	}
	if string(raw) != `{"code":"internal","message":"cannot write the job record"}` {
		t.Fatalf("wire form %s", raw)
	}
	if errors.Unwrap(New(Internal, "x")) != nil {
		t.Fatal("New has a cause")
	}
	if got := Wrap(NotFound, nil, "job %d of %d", 3, 4).Message; got != "job 3 of 4" {
		t.Fatalf("Wrap message %q", got)
	}
}

func TestFrom(t *testing.T) {
	coded := New(PolicyInvalid, "fix the policy")
	if got := From(fmt.Errorf("launch: %w", coded)); got != coded {
		t.Fatalf("From of a wrapped coded error = %v, want the error itself", got)
	}
	cause := errors.New("open /home/alice/secret: permission denied")
	got := From(cause)
	if got.Code != Internal || got.Message != "internal error" {
		t.Fatalf("From of a plain error = %+v", got)
	}
	if strings.Contains(got.Error(), "alice") {
		t.Fatalf("From repeats the cause: %q", got.Error())
	}
	if !errors.Is(got, cause) {
		t.Fatal("From lost the cause for local diagnosis")
	}
}
