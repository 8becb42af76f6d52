package jobs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/principal"
)

// secretJob starts command as an interactive job (on a terminal with pty)
// of a real unit and sends it secret as secret input.
func secretJob(t *testing.T, svc *Service, command string, pty bool, secret string) (string, *InputResult) {
	t.Helper()
	req := StartRequest{Command: command, Stdin: !pty}
	if pty {
		req.PTY = &TerminalSize{Cols: 80, Rows: 24}
	}
	res, err := svc.Start(context.Background(), principal.Local, req)
	if err != nil {
		t.Fatal(err)
	}
	// A terminal's program reads once it is up; input written earlier
	// would meet the terminal's echo before the program could turn it off.
	time.Sleep(300 * time.Millisecond)
	in, err := svc.Input(context.Background(), principal.Local, InputRequest{ProcessID: res.ProcessID, Data: secret, Secret: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.ProcessID, in
}

// finalOutput waits for job id to end and returns all of its stdout.
func finalOutput(t *testing.T, svc *Service, id string) string {
	t.Helper()
	if _, err := svc.awaitTerminal(context.Background(), id, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	out, err := svc.Output(context.Background(), principal.Local, OutputRequest{ProcessID: id})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Terminal || !out.Stdout.EOF {
		t.Fatalf("the job did not end: %+v", out)
	}
	return out.Stdout.Data
}

// noSecretOnDisk fails when secret is in a file of job id's directory.
func noSecretOnDisk(t *testing.T, svc *Service, id, secret string) {
	t.Helper()
	dir := svc.store.Dir(id)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && bytes.Contains(data, []byte(secret)) {
			t.Errorf("the secret is in %s", e.Name())
		}
	}
}

// TestSecretInputIsMaskedInTheOutput: cat prints back the secret it was
// given: its output, capture and every later occurrence read ***.
func TestSecretInputIsMaskedInTheOutput(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	secret := "hunter2-" + t.Name()
	id, in := secretJob(t, svc, `cat; echo "again: $(printf %s hunter2-; printf %s TestSecretInputIsMaskedInTheOutput)"`, false, secret)
	if in.AcceptedBytes != len(secret)+1 {
		t.Fatalf("accepted %d bytes, want the secret and its newline (%d)", in.AcceptedBytes, len(secret)+1)
	}
	if _, err := svc.Input(context.Background(), principal.Local, InputRequest{ProcessID: id, Data: "plain\n", EOF: true}); err != nil {
		t.Fatal(err)
	}
	if out := finalOutput(t, svc, id); out != "***\nplain\nagain: ***\n" {
		t.Fatalf("the output reads %q", out)
	}
	noSecretOnDisk(t, svc, id, secret)
}

// TestSecretSplitAcrossWritesIsMasked: a job that prints the secret in two
// writes, a pause between them, still shows ***; the offsets a wait finds
// text at are of the masked stream.
func TestSecretSplitAcrossWritesIsMasked(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	secret := "split-secret-value"
	id, _ := secretJob(t, svc, `read -r x; printf 'got %s' "$(printf %s "$x" | head -c 5)"; sleep 0.5; printf '%s done\n' "$(printf %s "$x" | tail -c +6)"`, false, secret)
	res := waitUntil(t, svc, id, Until{Output: &OutputUntil{Text: "done"}}, 10000)
	wantOutput(t, "after the masked secret", res, StreamStdout, int64(len("got *** ")))
	if out := finalOutput(t, svc, id); out != "got *** done\n" {
		t.Fatalf("the output reads %q", out)
	}
	noSecretOnDisk(t, svc, id, secret)
}

// TestSecretOnATerminal: a program that reads a line on a terminal without
// turning echo off: the terminal does not echo the secret, and what the
// program prints of it reads *** in the output and the screen.
func TestSecretOnATerminal(t *testing.T) {
	svc := realService(t)
	stopAll(t, svc)
	secret := "pty-secret-value"
	id, _ := secretJob(t, svc, `read -r x; echo "got:$x"; sleep 0.3`, true, secret)
	if out := finalOutput(t, svc, id); out != "got:***\r\n" {
		t.Fatalf("the terminal shows %q, want the program's line alone (no echo), masked", out)
	}
	scr, err := svc.Screen(principal.Local, id)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimRight(strings.Join(scr.Lines, "\n"), "\n") != "got:***" {
		t.Fatalf("the screen shows %q", scr.Lines)
	}
	noSecretOnDisk(t, svc, id, secret)
	if _, err := os.Stat(filepath.Join(svc.store.Dir(id), jobmeta.ScreenFile)); err != nil {
		t.Fatalf("no screen file to look in: %v", err)
	}
}

// TestSecretInputIsOneLine: secret data with a line break inside or a
// control character is refused before it reaches the job.
func TestSecretInputIsOneLine(t *testing.T) {
	for _, data := range []string{"two\nlines", "a\rb", "tab\t", "\x1b[A", "x\n\n", strings.Repeat("x", 4096)} {
		_, err := (&Service{}).Input(context.Background(), principal.Local, InputRequest{ProcessID: "p", Data: data, Secret: true})
		if !errcode.Is(err, errcode.InvalidArgument) || !strings.Contains(err.Error(), "one line") {
			t.Errorf("secret %q: %v, want invalid_argument", data, err)
		}
	}
}
