package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/principal"
)

// TestSecretPromptMustBeUTF8: a prompt for a person to read that is not
// UTF-8 is invalid_argument, as a job's name is; JSON arguments cannot
// carry one (the decoder replaces the bytes), a caller in Go can.
func TestSecretPromptMustBeUTF8(t *testing.T) {
	for prompt, want := range map[string]errcode.Code{
		"Password:\xff": errcode.InvalidArgument,
		"\xc3":          errcode.InvalidArgument,
		"Passwort für:": errcode.ElicitationUnsupported,
	} {
		_, err := (&Service{}).Input(context.Background(), principal.Local, InputRequest{ProcessID: "p", SecretPrompt: prompt})
		if !errcode.Is(err, want) {
			t.Errorf("secret_prompt %q: %v, want %s", prompt, err, want)
		}
	}
}

// TestInputUntilWaitsForTheText: an answer that comes in parts, further
// apart than the quiet period, comes back whole when until names its last
// part; the plain wait returns the first part only. A text that does not
// come is until_met false at wait_ms, or once the job has ended.
func TestInputUntilWaitsForTheText(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	res, err := svc.Start(context.Background(), principal.Local, StartRequest{Stdin: true,
		Command: `while read l; do echo "got $l"; sleep 0.4; printf 'next> '; done; sleep 0.2; echo bye`})
	if err != nil {
		t.Fatal(err)
	}
	id := res.ProcessID
	in := func(req InputRequest) *InputResult {
		t.Helper()
		req.ProcessID = id
		r, err := svc.Input(context.Background(), principal.Local, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	plain := in(InputRequest{Data: "a\n", WaitMS: 5000})
	if plain.Output.Stdout.Data != "got a\n" || plain.UntilMet != nil {
		t.Fatalf("without until: %q, until_met %v; want the first part only", plain.Output.Stdout.Data, plain.UntilMet)
	}
	in(InputRequest{Data: "", Until: "next> ", WaitMS: 5000})
	for i := range 3 {
		r := in(InputRequest{Data: "b\n", Until: "next> ", WaitMS: 5000})
		if r.UntilMet == nil || !*r.UntilMet || r.Output.Stdout.Data != "got b\nnext> " || r.Output.Stdout.Offset != r.StdoutOffset {
			t.Fatalf("round %d with until: %q from %d (input at %d), until_met %v; want the whole answer", i, r.Output.Stdout.Data, r.Output.Stdout.Offset, r.StdoutOffset, r.UntilMet)
		}
	}
	late := in(InputRequest{Data: "c\n", Until: "never", WaitMS: 300})
	if late.UntilMet == nil || *late.UntilMet || late.Output.Terminal {
		t.Fatalf("a text that does not come: until_met %v, want false at wait_ms", late.UntilMet)
	}
	end := in(InputRequest{EOF: true, Until: "never", WaitMS: 20000})
	if end.UntilMet == nil || *end.UntilMet || !end.Output.Terminal || !strings.HasSuffix(end.Output.Stdout.Data, "bye\n") {
		t.Fatalf("the job ended instead: until_met %v, terminal %v, %q", end.UntilMet, end.Output.Terminal, end.Output.Stdout.Data)
	}
}

func TestInputUntilBounds(t *testing.T) {
	for _, tc := range []struct {
		req  InputRequest
		want string
	}{
		{InputRequest{ProcessID: "p", Data: "x", Until: ">>> "}, "until needs wait_ms"},
		{InputRequest{ProcessID: "p", Data: "x", Until: strings.Repeat("a", 1025), WaitMS: 10}, "until must be 1-1024 bytes"},
	} {
		_, err := (&Service{}).Input(context.Background(), principal.Local, tc.req)
		if !errcode.Is(err, errcode.InvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want invalid_argument %q", tc.req, err, tc.want)
		}
	}
}
