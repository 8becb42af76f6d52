package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
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

// TestTimeLimit: the limit reaches the supervisor unchanged, up to the
// contract's 2592000 s; none is 0.
func TestTimeLimit(t *testing.T) {
	for _, secs := range []int{0, 1, 2592000} {
		in := valid()
		in.TimeoutS = secs
		var buf bytes.Buffer
		if err := Encode(&buf, in); err != nil {
			t.Fatalf("%d s: %v", secs, err)
		}
		out, err := Decode(&buf)
		if err != nil {
			t.Fatalf("%d s: %v", secs, err)
		}
		if out.Timeout() != time.Duration(secs)*time.Second {
			t.Errorf("%d s: decoded %v", secs, out.Timeout())
		}
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
		"unknown field":  `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh","extra":1}`,
		"trailing":       `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh"} {}`,
		"bad version":    `{"version":2,"command":"x","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"empty command":  `{"version":1,"command":"","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"relative cwd":   `{"version":1,"command":"x","env":[],"cwd":"tmp","shell":"/bin/sh"}`,
		"env no equals":  `{"version":1,"command":"x","env":["A"],"cwd":"/","shell":"/bin/sh"}`,
		"env empty key":  `{"version":1,"command":"x","env":["=1"],"cwd":"/","shell":"/bin/sh"}`,
		"nul command":    `{"version":1,"command":"a\u0000b","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"version 0":      `{"version":0,"command":"x","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"no version":     `{"command":"x","env":[],"cwd":"/","shell":"/bin/sh"}`,
		"relative shell": `{"version":1,"command":"x","env":[],"cwd":"/","shell":"bin/sh"}`,
		"bare shell":     `{"version":1,"command":"x","env":[],"cwd":"/","shell":"sh"}`,
		"nul shell":      `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh\u0000x"}`,
		"nul cwd":        `{"version":1,"command":"x","env":[],"cwd":"/tmp\u0000/x","shell":"/bin/sh"}`,
		"nul env value":  `{"version":1,"command":"x","env":["A=1\u00002"],"cwd":"/","shell":"/bin/sh"}`,
		"nul env key":    `{"version":1,"command":"x","env":["A\u0000B=1"],"cwd":"/","shell":"/bin/sh"}`,
		"negative limit": `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh","timeout_s":-1}`,
		"limit too long": `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh","timeout_s":2592001}`,
		"limit not int":  `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh","timeout_s":1.5}`,
		"limit overflow": `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh","timeout_s":1e30}`,
		"limit wraps":    `{"version":1,"command":"x","env":[],"cwd":"/","shell":"/bin/sh","timeout_s":1099511627776}`,
		"not json":       `hello`,
		"empty":          ``,
	}
	for name, in := range cases {
		if _, err := Decode(strings.NewReader(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

// sized returns a valid envelope document of exactly n bytes.
func sized(n int) string {
	head, tail := `{"version":1,"command":"`, `","env":[],"cwd":"/","shell":"/bin/sh"}`
	return head + strings.Repeat("a", n-len(head)-len(tail)) + tail
}

// TestEightMiBBound pins the envelope bound: a document of exactly 8 MiB is
// read whole, one byte more is refused.
func TestEightMiBBound(t *testing.T) {
	e, err := Decode(strings.NewReader(sized(8 << 20)))
	if err != nil {
		t.Fatalf("8 MiB envelope: %v", err)
	}
	if !strings.HasPrefix(e.Command, "aaa") || len(e.Command) < 8<<20-100 {
		t.Fatalf("8 MiB envelope decoded a %d-byte command", len(e.Command))
	}
	_, err = Decode(strings.NewReader(sized(8<<20 + 1)))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than 8388608 bytes") {
		t.Fatalf("8 MiB + 1 envelope: %v, want ErrInvalid for its size", err)
	}
	if _, err := Decode(strings.NewReader(sized(16 << 20))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("16 MiB envelope: %v, want ErrInvalid", err)
	}
}

func TestEncodeRefusesWhatDecodeRefuses(t *testing.T) {
	for name, edit := range map[string]func(*Envelope){
		"version 0":      func(e *Envelope) { e.Version = 0 },
		"relative shell": func(e *Envelope) { e.Shell = "sh" },
		"relative cwd":   func(e *Envelope) { e.Cwd = "." },
		"nul in env":     func(e *Envelope) { e.Env = append(e.Env, "X=a\x00b") },
		"empty command":  func(e *Envelope) { e.Command = "" },
	} {
		e := valid()
		edit(e)
		var buf bytes.Buffer
		if err := Encode(&buf, e); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Encode = %v, want ErrInvalid", name, err)
		}
		if buf.Len() != 0 {
			t.Errorf("%s: Encode wrote %d bytes of an invalid envelope", name, buf.Len())
		}
	}
}

func TestValidEnvKey(t *testing.T) {
	for _, k := range []string{"PATH", "a", "_X1", "weird-name.ok"} {
		if err := ValidEnvKey(k); err != nil {
			t.Errorf("ValidEnvKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "A=B", "=", "A\x00B", "\x00"} {
		if err := ValidEnvKey(k); err == nil {
			t.Errorf("ValidEnvKey(%q) accepted", k)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"command":"echo hi","env":["A=1"],"cwd":"/","shell":"/bin/sh"}`))
	f.Add([]byte(`{"version":1,"command":"x","env":null,"cwd":"/tmp","shell":"/bin/bash"}`))
	f.Add([]byte(`{"version":1,"command":"sleep 9","env":[],"cwd":"/","shell":"/bin/sh","timeout_s":2}`))
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
