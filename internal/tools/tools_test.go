package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/proclist"
)

// maxMessage bounds any Decode error message: a fixed text plus at most
// one clipped field name.
const maxMessage = 160

// invalid asserts err is exactly an *errcode.Error with invalid_argument
// and a short, valid UTF-8 message, and returns the message.
func invalid(t testing.TB, err error) string {
	t.Helper()
	e, ok := err.(*errcode.Error)
	if !ok {
		t.Fatalf("err = %T %v, want *errcode.Error", err, err)
	}
	if e.Code != errcode.InvalidArgument {
		t.Fatalf("code = %s (%s), want invalid_argument", e.Code, e.Message)
	}
	if e.Message == "" || len(e.Message) > maxMessage || !utf8.ValidString(e.Message) {
		t.Fatalf("message %q: empty, longer than %d bytes or not UTF-8", e.Message, maxMessage)
	}
	return e.Message
}

func TestDecodeValid(t *testing.T) {
	var in jobs.StartRequest
	err := Decode(json.RawMessage(` {"command":"make test","cwd":"/srv","env":{"A":"1","B":""},"name":"ci","wait_ms":2500} `), &in)
	if err != nil {
		t.Fatal(err)
	}
	want := jobs.StartRequest{Command: "make test", Cwd: "/srv", Env: map[string]string{"A": "1", "B": ""}, Name: "ci", WaitMS: 2500}
	if !reflect.DeepEqual(in, want) {
		t.Errorf("decoded %+v, want %+v", in, want)
	}
	var out jobs.OutputRequest
	if err := Decode(json.RawMessage(`{"process_id":"p","stdout_offset":10,"stderr_offset":20,"max_bytes":4096,"wait_ms":0}`), &out); err != nil {
		t.Fatal(err)
	}
	if out != (jobs.OutputRequest{ProcessID: "p", StdoutOffset: 10, StderrOffset: 20, MaxBytes: 4096}) {
		t.Errorf("decoded %+v", out)
	}
}

func TestDecodeEmptyIsObject(t *testing.T) {
	for _, raw := range []string{"", " ", "\n\t ", "null", " null\n", "{}", " { } "} {
		var in jobs.StartRequest
		if err := Decode(json.RawMessage(raw), &in); err != nil {
			t.Errorf("Decode(%q) into StartRequest: %v", raw, err)
		}
		if !reflect.DeepEqual(in, jobs.StartRequest{}) {
			t.Errorf("Decode(%q) = %+v, want zero", raw, in)
		}
		var none NoArgs
		if err := Decode(json.RawMessage(raw), &none); err != nil {
			t.Errorf("Decode(%q) into NoArgs: %v", raw, err)
		}
	}
	if err := Decode(nil, &NoArgs{}); err != nil {
		t.Errorf("Decode(nil): %v", err)
	}
}

func TestDecodeUnknownArgument(t *testing.T) {
	cases := []struct {
		raw  string
		into any
		name string
	}{
		{`{"command":"secret-cmd","bogus":1}`, &jobs.StartRequest{}, `"bogus"`},
		{`{"bogus":"secret-value"}`, &jobs.StartRequest{}, `"bogus"`},
		{`{"process_id":"p","max":5}`, &jobs.OutputRequest{}, `"max"`},
		{`{"process_id":"p","stdout_offset":1,"memory_max_bytes":1}`, &jobs.OutputRequest{}, `"memory_max_bytes"`},
		{`{"process_id":"p","command":"x"}`, &IDRequest{}, `"command"`},
		{`{"x":1}`, &NoArgs{}, `"x"`},
		{`{"":1}`, &NoArgs{}, `""`},
	}
	for _, c := range cases {
		msg := invalid(t, Decode(json.RawMessage(c.raw), c.into))
		if !strings.Contains(msg, "unknown argument") || !strings.Contains(msg, c.name) {
			t.Errorf("Decode(%s): message %q does not name the unknown argument %s", c.raw, msg, c.name)
		}
		if strings.Contains(msg, "secret") {
			t.Errorf("Decode(%s): message %q echoes a value", c.raw, msg)
		}
	}
}

// TestDecodeWrongType: a mistyped argument's message names the argument
// and the JSON it wants, never a type of the implementation, and never
// echoes the value.
func TestDecodeWrongType(t *testing.T) {
	cases := []struct {
		raw  string
		into any
		want string
	}{
		{`{"command":"ls","wait_ms":"secret-soon"}`, &jobs.StartRequest{}, `argument "wait_ms" must be an integer`},
		{`{"command":5}`, &jobs.StartRequest{}, `argument "command" must be a string`},
		{`{"command":"ls","wait_ms":1.5}`, &jobs.StartRequest{}, `argument "wait_ms" must be an integer`},
		{`{"command":"ls","wait_ms":99999999999999999999}`, &jobs.StartRequest{}, `argument "wait_ms" must be an integer`},
		{`{"command":"ls","env":["A=secret"]}`, &jobs.StartRequest{}, `argument "env" must be an object of strings`},
		{`{"command":"ls","env":{"A":1}}`, &jobs.StartRequest{}, `argument "env" must be an object of strings`},
		{`{"command":["secret"]}`, &jobs.StartRequest{}, `argument "command" must be a string`},
		{`{"command":"ls","stdin":"yes"}`, &jobs.StartRequest{}, `argument "stdin" must be true or false`},
		{`{"process_id":"p","stdout_offset":"0"}`, &jobs.OutputRequest{}, `argument "stdout_offset" must be an integer`},
		{`{"process_id":7}`, &IDRequest{}, `argument "process_id" must be a string`},
		{`{"process_id":true}`, &jobs.OutputRequest{}, `argument "process_id" must be a string`},
		{`{"process_ids":"p"}`, &jobs.WaitRequest{}, `argument "process_ids" must be an array of strings`},
		{`{"process_ids":["p"],"until":{"output":5}}`, &jobs.WaitRequest{}, `argument "until.output" must be a string or an object`},
		{`{"process_ids":["p"],"until":{"output":["secret"]}}`, &jobs.WaitRequest{}, `argument "until.output" must be a string or an object`},
	}
	for _, c := range cases {
		msg := invalid(t, Decode(json.RawMessage(c.raw), c.into))
		if msg != c.want {
			t.Errorf("Decode(%s): %q, want %q", c.raw, msg, c.want)
		}
		if strings.Contains(msg, "secret") {
			t.Errorf("Decode(%s): message %q echoes a value", c.raw, msg)
		}
	}
}

func TestDecodeNotOneObject(t *testing.T) {
	cases := []string{
		// Not an object.
		`[]`, `[{"command":"ls"}]`, `"ls"`, `5`, `true`,
		// Trailing data after the object.
		`{} {}`, `{}]`, `{}}`, `{} x`, `{"command":"ls"}}`, `{"command":"ls"} null`, `{"command":"ls"},`,
		`null null`, `{}{"command":"rm"}`,
		// Not JSON.
		`{`, `{"command":`, `{"command":"ls"`, `{command:"ls"}`, `{'command':'ls'}`, "\x00", `nul`,
	}
	fixed := map[string]bool{
		"arguments must be a JSON object":   true,
		"arguments must be one JSON object": true,
		"arguments are not valid JSON":      true,
		"arguments could not be decoded":    true,
	}
	for _, raw := range cases {
		var in jobs.StartRequest
		if msg := invalid(t, Decode(json.RawMessage(raw), &in)); !fixed[msg] {
			t.Errorf("Decode(%q): message %q is not one of the fixed messages", raw, msg)
		}
	}
}

func TestDecodeClipsHugeFieldName(t *testing.T) {
	long := strings.Repeat("a", 100000)
	check := func(label, raw, want string) {
		t.Helper()
		msg := invalid(t, Decode(json.RawMessage(raw), &jobs.StartRequest{}))
		if !strings.Contains(msg, want) || !strings.Contains(msg, "...") {
			t.Errorf("%s: message %q does not hold the clipped name", label, msg)
		}
		if strings.Contains(msg, strings.Repeat("a", maxFieldEcho+1)) {
			t.Errorf("%s: message echoes more than %d bytes of the name", label, maxFieldEcho)
		}
	}
	check("unknown", fmt.Sprintf(`{%q:1}`, long), `"aaaa`)
	// Multi-byte names are clipped on a character boundary.
	wide := strings.Repeat("é", 1000)
	check("unknown, multi-byte", fmt.Sprintf(`{%q:1}`, wide), `"éé`)
	// A mistyped value under a huge key names the argument, not the key.
	msg := invalid(t, Decode(json.RawMessage(fmt.Sprintf(`{"env":{%q:1}}`, long)), &jobs.StartRequest{}))
	if !strings.Contains(msg, `"env"`) || strings.Contains(msg, "aaaa") {
		t.Errorf("wrong type under a huge env key: %q", msg)
	}
	// Short names are not clipped.
	msg = invalid(t, Decode(json.RawMessage(`{"abc":1}`), &jobs.StartRequest{}))
	if msg != `unknown argument "abc"` {
		t.Errorf("short unknown name: %q", msg)
	}
}

// TestDecodeProcessListRequest: process.list's filters are decoded as
// strictly as every tool's arguments (an unknown or case-folded filter, a
// wrong type, trailing data), then validated.
func TestDecodeProcessListRequest(t *testing.T) {
	for _, bad := range []string{
		`{"command":"sleep"}`, `{"regex":"cc.*"}`, `{"name":"x","Name":"y","cmdline":"z"}`,
		`{"pid":"12"}`, `{"managed":"yes"}`, `[1]`, `{"name":"x"} {"name":"y"}`, `{"state":"Q"}`,
	} {
		var r proclist.Request
		err := Decode(json.RawMessage(bad), &r)
		if err == nil {
			err = r.Validate()
		}
		var e *errcode.Error
		if !errors.As(err, &e) || e.Code != errcode.InvalidArgument {
			t.Errorf("%s: %v", bad, err)
		}
	}
	var r proclist.Request
	if msg := invalid(t, Decode(json.RawMessage(`{"command":"sleep"}`), &r)); msg != `unknown argument "command"` {
		t.Errorf("unknown filter message: %q", msg)
	}
	raw := `{"name":"cc.test","user":"0","pid":1,"ppid":0,"state":"S","cgroup":"/","managed":false,"limit":5}`
	if err := Decode(json.RawMessage(raw), &r); err != nil || r.Validate() != nil || r.Name != "cc.test" || *r.PPID != 0 || *r.Managed || r.Limit != 5 {
		t.Fatalf("%+v %v", r, err)
	}
}

func FuzzDecodeArguments(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `{"command":"ls"}`, `{"command":"ls","env":{"A":"b"},"wait_ms":5}`,
		`{"process_id":"p","stdout_offset":1,"stderr_offset":2,"max_bytes":3,"wait_ms":4}`,
		`{"env":{}}`, `{"bogus":1}`, `{"wait_ms":"x"}`, `{} {}`, `{}]`, `[]`, `{"env":{"ééééé":1}}`, `{"COMMAND":"x"}`,
		`{"process_ids":["a","b"],"mode":"all","timeout_ms":0}`, `{"process_ids":null,"timeout_ms":null}`, `{"process_ids":[1]}`,
		`{"command":"cat","stdin":true,"pty":{"cols":80,"rows":24}}`, `{"pty":{"cols":80,"rows":24,"x":1}}`, `{"pty":null}`,
		`{"process_id":"p","data":"aGk=","encoding":"base64","eof":true,"wait_ms":10}`, `{"process_id":"p","cols":80,"rows":24}`,
		`{"process_id":"p","secret_prompt":"Password:","wait_ms":10}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var start jobs.StartRequest
		var out jobs.OutputRequest
		var wait jobs.WaitRequest
		var input jobs.InputRequest
		var resize jobs.ResizeRequest
		for _, v := range []any{&start, &out, &wait, &input, &resize} {
			err := Decode(raw, v)
			if err != nil {
				invalid(t, err)
				var e *errcode.Error
				if !errors.As(err, &e) {
					t.Fatal("not an errcode.Error")
				}
				continue
			}
			// An accepted request re-encodes into arguments that are
			// accepted again, as the same request.
			enc, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("accepted value does not encode: %v", err)
			}
			again := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if err := Decode(enc, again); err != nil {
				t.Fatalf("re-encoded arguments rejected: %v\n%s", err, enc)
			}
			// Compared as encoded: an empty env map and an absent one
			// are the same request.
			enc2, err := json.Marshal(again)
			if err != nil || string(enc) != string(enc2) {
				t.Fatalf("round trip changed the request: %s vs %s (%v)", enc, enc2, err)
			}
		}
	})
}

func TestDecodeIsCaseSensitiveAndRejectsRepeats(t *testing.T) {
	for _, raw := range []string{
		`{"COMMAND":"x"}`,
		`{"command":"x","Wait_MS":5}`,
		`{"command":"x","command":"y"}`,
	} {
		var in jobs.StartRequest
		if err := Decode(json.RawMessage(raw), &in); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("%s: got %v, want invalid_argument", raw, err)
		}
	}
	var in jobs.StartRequest
	if err := Decode(json.RawMessage(`{"command":"x","env":{"Path":"a","PATH":"b"}}`), &in); err != nil || len(in.Env) != 2 {
		t.Fatalf("env keys differing in case are distinct variables: %v %v", err, in.Env)
	}
}

// TestUntilOutputTakesTheTextOrTheLongForm: until.output is the text
// alone, as the tool's description offers it, or {text, stream,
// from_offset}; the long form is as strict as any argument.
func TestUntilOutputTakesTheTextOrTheLongForm(t *testing.T) {
	var short jobs.WaitRequest
	if err := Decode(json.RawMessage(`{"process_ids":["p"],"until":{"output":"ready"}}`), &short); err != nil {
		t.Fatal(err)
	}
	if o := short.Until.Output; o == nil || *o != (jobs.OutputUntil{Text: "ready"}) {
		t.Fatalf("the short form decoded as %+v", o)
	}
	var long jobs.WaitRequest
	if err := Decode(json.RawMessage(`{"process_ids":["p"],"until":{"output":{"text":"ready","stream":"stderr","from_offset":{"stderr":7}}}}`), &long); err != nil {
		t.Fatal(err)
	}
	if o := long.Until.Output; o == nil || o.Text != "ready" || o.Stream != "stderr" || o.FromOffset == nil || o.FromOffset.Stderr != 7 {
		t.Fatalf("the long form decoded as %+v", o)
	}
	msg := invalid(t, Decode(json.RawMessage(`{"process_ids":["p"],"until":{"output":{"text":"a","colour":"red"}}}`), &jobs.WaitRequest{}))
	if msg != `unknown argument "colour"` {
		t.Fatalf("an unknown key in the long form: %q", msg)
	}
}
