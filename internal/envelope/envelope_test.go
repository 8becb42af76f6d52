package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/limits"
)

func valid() *Envelope {
	return &Envelope{Version: Version, Command: "echo hi", Env: []string{"A=1", "B="}, Cwd: "/", Shell: "/bin/sh"}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := valid()
	in.Command = "printf '\\xff' && echo \"ü\""
	if err := Encode(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if out.Command != in.Command || strings.Join(out.Env, ",") != "A=1,B=" || out.Cwd != "/" || out.Shell != "/bin/sh" {
		t.Fatalf("round trip changed the envelope: %+v", out)
	}
}

func TestLargeEnvironment(t *testing.T) {
	e := valid()
	val := strings.Repeat("x", 64<<10)
	for i := 0; i < 17; i++ {
		e.Env = append(e.Env, "BIG"+string(rune('A'+i))+"="+val)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, e); err != nil {
		t.Fatal(err)
	}
	if buf.Len() < 1<<20 {
		t.Fatalf("test envelope is only %d bytes", buf.Len())
	}
	out, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Env) != len(e.Env) {
		t.Fatalf("env entries: got %d want %d", len(out.Env), len(e.Env))
	}
}

func TestRejects(t *testing.T) {
	cases := map[string]string{
		"unknown field": `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh","extra":1}`,
		"trailing":      `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh"} {}`,
		"bad version":   `{"version":2,"command":"x","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"empty command": `{"version":1,"command":"","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"relative cwd":  `{"version":1,"command":"x","env":[],"cwd":"tmp","shell":"/bin/sh"}`,
		"env no equals": `{"version":1,"command":"x","env":["A"],"cwd":"/","shell":"/bin/sh"}`,
		"env empty key": `{"version":1,"command":"x","env":["=1"],"cwd":"/","shell":"/bin/sh"}`,
		"nul command":   `{"version":1,"command":"a\u0000b","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"not json":      `hello`,
		"empty":         ``,
	}
	for name, in := range cases {
		if _, err := Decode(strings.NewReader(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

func TestOversized(t *testing.T) {
	big := `{"version":1,"command":"` + strings.Repeat("a", limits.MaxEnvelopeBytes) + `","env":[],"cwd":"/","shell":"/bin/sh"}`
	if _, err := Decode(strings.NewReader(big)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"command":"echo hi","env":["A=1"],"cwd":"/","shell":"/bin/sh"}`))
	f.Add([]byte(`{"version":1,"command":"x","env":null,"cwd":"/tmp","shell":"/bin/bash"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Decode(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode error not ErrInvalid: %v", err)
			}
			return
		}
		if e.Validate() != nil {
			t.Fatal("decoded envelope does not validate")
		}
		var buf bytes.Buffer
		if err := Encode(&buf, e); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
