package jobs

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobinput"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/secretmask"
	"github.com/commandcore/commandcore/internal/textenc"
)

// InputRequest is process.input's input.
type InputRequest struct {
	ProcessID string `json:"process_id" jsonschema:"the job's process_id"`
	Data      string `json:"data,omitempty" jsonschema:"bytes for the job's stdin or terminal, at most 65536 a call after decoding"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	EOF       bool   `json:"eof,omitempty" jsonschema:"close stdin after data (on a terminal: send end-of-file); later input is input_closed"`
	WaitMS    int    `json:"wait_ms,omitempty" jsonschema:"0-30000: then wait up to this long for output produced after this input and return it as output"`
	Until     string `json:"until,omitempty" jsonschema:"with wait_ms: return as soon as this literal text (1-1024 bytes, e.g. a prompt such as '>>> ' or '$ ') appears in the output after this input, instead of once the output pauses"`
	// Secret is set by the relay for the input a person typed for a
	// secret prompt. A client setting it hides only its own input.
	Secret bool `json:"secret,omitempty" jsonschema:"data is a line kept out of output and screen (as ***); the relay sets it"`
	// SecretPrompt asks a person for the input instead of data; only the
	// relay's panel can, so a device answers elicitation_unsupported.
	SecretPrompt string `json:"secret_prompt,omitempty" jsonschema:"instead of data and eof: a prompt (printable, at most 512 bytes) the person sees at the relay's panel, where they type one line; the secret never passes through the client"`
}

// InputResult is process.input's result.
type InputResult struct {
	ProcessID string `json:"process_id" jsonschema:"the job's ID"`
	// AcceptedBytes is how much of data the job took; less than all when it
	// did not read its input within the input write timeout (5 s).
	AcceptedBytes int `json:"accepted_bytes" jsonschema:"how many bytes of data the job took (less than all if it did not read within 5 s)"`
	// The offsets are where the streams stood before this input.
	StdoutOffset int64 `json:"stdout_offset" jsonschema:"where stdout stood before this input"`
	StderrOffset int64 `json:"stderr_offset" jsonschema:"where stderr stood before this input"`
	// InputClosed is set once stdin is closed (eof applied).
	InputClosed bool    `json:"input_closed" jsonschema:"true once the job's stdin is closed (eof applied)"`
	Output      *Output `json:"output,omitempty" jsonschema:"with wait_ms: the output produced after this input, from those offsets"`
	UntilMet    *bool   `json:"until_met,omitempty" jsonschema:"with until: true when the text appeared within wait_ms"`
}

// ResizeRequest is process.resize's input.
type ResizeRequest struct {
	ProcessID string `json:"process_id" jsonschema:"the job's process_id"`
	Cols      int    `json:"cols" jsonschema:"1-1000: width in columns"`
	Rows      int    `json:"rows" jsonschema:"1-1000: height in rows"`
}

// ResizeResult is process.resize's result.
type ResizeResult struct {
	ProcessID string `json:"process_id" jsonschema:"the job's ID"`
	Cols      int    `json:"cols" jsonschema:"the terminal's width now"`
	Rows      int    `json:"rows" jsonschema:"the terminal's height now"`
}

// decodeInput returns the bytes a request carries.
func decodeInput(req *InputRequest) ([]byte, error) {
	var data []byte
	switch req.Encoding {
	case "", textenc.UTF8:
		data = []byte(req.Data)
	case textenc.Base64:
		var err error
		if data, err = base64.StdEncoding.DecodeString(req.Data); err != nil {
			return nil, errcode.New(errcode.InvalidArgument, "data is not valid base64")
		}
	default:
		return nil, errcode.New(errcode.InvalidArgument, "encoding must be utf-8 or base64")
	}
	if len(data) > limits.MaxInputBytes {
		return nil, errcode.New(errcode.InvalidArgument, "data must be at most %d bytes a call (%d given)", limits.MaxInputBytes, len(data))
	}
	return data, nil
}

// secretLine returns secret input as the job gets it: one line, its
// newline added when it has none.
func secretLine(data []byte) ([]byte, error) {
	if !bytes.HasSuffix(data, []byte{'\n'}) {
		data = append(data, '\n')
	}
	if _, err := secretmask.Line(data); err != nil {
		return nil, errcode.New(errcode.InvalidArgument,
			"secret data must be one line of at most %d bytes without control characters (a newline only at its end)", limits.SecretMaxBytes)
	}
	return data, nil
}

// secretInput answers a request for secret input. The relay's panel takes
// secret_prompt off the call before it reaches a device, so a device that
// sees one has no person to ask; it still checks the request, so a client
// learns of a bad one wherever it asks.
func secretInput(req *InputRequest) error {
	if req.Data != "" || req.EOF {
		return errcode.New(errcode.InvalidArgument, "secret_prompt replaces data and eof: give one or the other")
	}
	if !namechars.Printable(req.SecretPrompt, limits.SecretPromptMaxBytes) {
		return errcode.New(errcode.InvalidArgument, "secret_prompt must be printable UTF-8 of at most %d bytes", limits.SecretPromptMaxBytes)
	}
	return errcode.New(errcode.ElicitationUnsupported, "secret input needs the relay's panel: the person types it there; this server cannot ask")
}

// interactive looks up a job that takes input and is still running.
func (s *Service) interactive(who principal.Principal, id string, terminalOnly bool) (*jobmeta.Record, error) {
	rec, err := s.get(who, id)
	if err != nil {
		return nil, err
	}
	if rec.PTY == nil && (terminalOnly || !rec.Stdin) {
		if terminalOnly {
			return nil, errcode.New(errcode.NotInteractive, "the job was started without a terminal (pty)")
		}
		return nil, errcode.New(errcode.NotInteractive, "the job was started without stdin or a terminal (pty)")
	}
	if rec.Terminal {
		return nil, errcode.New(errcode.NotRunning, "the job has ended (%s)", rec.State)
	}
	return rec, nil
}

// channelError maps an input channel's answer to the tool's error.
func channelError(err error) error {
	switch {
	case errors.Is(err, jobinput.ErrGone):
		return errcode.New(errcode.NotRunning, "the job has ended")
	case errors.Is(err, jobinput.ErrClosed):
		return errcode.New(errcode.InputClosed, "the job's input is closed")
	case errors.Is(err, jobinput.ErrNotTerminal):
		return errcode.New(errcode.NotInteractive, "the job was started without a terminal (pty)")
	case errors.Is(err, jobinput.ErrSecretsFull):
		return errcode.New(errcode.InvalidArgument, "the job masks at most %d secrets in its output and has as many; this secret was not sent", limits.SecretsPerJob)
	}
	return errcode.Wrap(errcode.Internal, err, "the job's input channel failed")
}

// Input writes to a running job's stdin or terminal. With WaitMS it then
// waits for the output the input produced.
func (s *Service) Input(ctx context.Context, who principal.Principal, req InputRequest) (*InputResult, error) {
	wait, err := waitDuration(req.WaitMS)
	if err != nil {
		return nil, err
	}
	if req.Until != "" {
		if err := checkUntilText(req.Until, "until"); err != nil {
			return nil, err
		}
		if wait == 0 {
			return nil, errcode.New(errcode.InvalidArgument, "until needs wait_ms: how long to wait for the text")
		}
	}
	if req.SecretPrompt != "" {
		return nil, secretInput(&req)
	}
	data, err := decodeInput(&req)
	if err != nil {
		return nil, err
	}
	if req.Secret {
		if data, err = secretLine(data); err != nil {
			return nil, err
		}
		defer clear(data)
	}
	if _, err := s.interactive(who, req.ProcessID, false); err != nil {
		return nil, err
	}
	rep, err := jobinput.Send(s.store.Dir(req.ProcessID), jobinput.Request{Data: data, EOF: req.EOF, Secret: req.Secret})
	if err != nil {
		return nil, channelError(err)
	}
	res := &InputResult{
		ProcessID: req.ProcessID, AcceptedBytes: rep.Accepted,
		StdoutOffset: rep.StdoutOffset, StderrOffset: rep.StderrOffset,
		InputClosed: req.EOF && rep.Accepted == len(data),
	}
	switch {
	case req.Until != "":
		var met bool
		res.Output, met, err = s.answerUntil(ctx, who, req.ProcessID, rep, req.Until, time.Now().Add(wait))
		res.UntilMet = &met
	case wait > 0:
		res.Output, err = s.answer(ctx, who, req.ProcessID, rep, time.Now().Add(wait))
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// answerUntil waits until text appears in the output the job produced
// past the offsets it had before the input, or the job has ended, or
// deadline passes; it returns the page from those offsets and whether the
// text appeared.
func (s *Service) answerUntil(ctx context.Context, who principal.Principal, id string, rep jobinput.Reply, text string, deadline time.Time) (*Output, bool, error) {
	req := OutputRequest{ProcessID: id, StdoutOffset: rep.StdoutOffset, StderrOffset: rep.StderrOffset}
	f := newFinder(text, StreamAny, StreamOffsets{Stdout: rep.StdoutOffset, Stderr: rep.StderrOffset})
	for {
		// Looked for before the page is read, so a page that answers a
		// found text holds it.
		_, found, err := s.lookFor(id, f)
		if err != nil {
			return nil, false, err
		}
		out, err := s.page(who, req, limits.OutputPageDefault)
		if err != nil {
			return nil, false, err
		}
		if !found && out.Terminal {
			// Seen ended, its output is final: one last look.
			if _, found, err = s.lookFor(id, f); err != nil {
				return nil, false, err
			}
		}
		if found || out.Terminal || !time.Now().Before(deadline) {
			return out, found, nil
		}
		select {
		case <-ctx.Done():
			return out, false, nil
		case <-time.After(pollInterval):
		}
	}
}

// answer waits until the job has produced output past the offsets it had
// before the input and then been quiet for limits.InputQuietPeriod (an
// answer often comes in parts: a terminal's echo, then the result), or
// has ended, or deadline passes; it returns the page from those offsets.
func (s *Service) answer(ctx context.Context, who principal.Principal, id string, rep jobinput.Reply, deadline time.Time) (*Output, error) {
	req := OutputRequest{ProcessID: id, StdoutOffset: rep.StdoutOffset, StderrOffset: rep.StderrOffset}
	var last *Output
	var quietSince time.Time
	for {
		out, err := s.page(who, req, limits.OutputPageDefault)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		if last == nil || out.Stdout.NextOffset != last.Stdout.NextOffset || out.Stderr.NextOffset != last.Stderr.NextOffset {
			quietSince = now
		}
		last = out
		produced := out.Stdout.NextOffset > rep.StdoutOffset || out.Stderr.NextOffset > rep.StderrOffset || out.Stdout.Gap != nil || out.Stderr.Gap != nil
		if out.Terminal || !now.Before(deadline) || (produced && now.Sub(quietSince) >= limits.InputQuietPeriod) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, nil
		case <-time.After(pollInterval):
		}
	}
}

// Resize sets a pty job's terminal size.
func (s *Service) Resize(who principal.Principal, req ResizeRequest) (*ResizeResult, error) {
	size, err := (&TerminalSize{Cols: req.Cols, Rows: req.Rows}).size()
	if err != nil {
		return nil, err
	}
	if _, err := s.interactive(who, req.ProcessID, true); err != nil {
		return nil, err
	}
	if _, err := jobinput.Send(s.store.Dir(req.ProcessID), jobinput.Request{Resize: size}); err != nil {
		return nil, channelError(err)
	}
	return &ResizeResult{ProcessID: req.ProcessID, Cols: size.Cols, Rows: size.Rows}, nil
}

// ScreenRequest is process.screen's input.
type ScreenRequest struct {
	ProcessID string `json:"process_id" jsonschema:"the process_id of a job started with pty"`
}

// ScreenResult is process.screen's result.
type ScreenResult struct {
	ProcessID string   `json:"process_id" jsonschema:"the job's ID"`
	Lines     []string `json:"lines" jsonschema:"the visible rows, top first, trailing blanks trimmed"`
	Cols      int      `json:"cols" jsonschema:"the terminal's width"`
	Rows      int      `json:"rows" jsonschema:"the terminal's height"`
	Cursor    struct {
		Row int `json:"row" jsonschema:"0-based row"`
		Col int `json:"col" jsonschema:"0-based column"`
	} `json:"cursor" jsonschema:"where the cursor is"`
	AlternateScreen bool   `json:"alternate_screen" jsonschema:"true while a full-screen program (top, vim, less) shows its own screen"`
	Title           string `json:"title,omitempty" jsonschema:"the title the program gave its terminal"`
	StdoutOffset    int64  `json:"stdout_offset" jsonschema:"how much of stdout the screen shows the effect of"`
	Truncated       bool   `json:"truncated,omitempty" jsonschema:"true when rows past 64 KiB of text were left empty"`
	Terminal        bool   `json:"terminal" jsonschema:"true once the job has ended: this is its last screen"`
}

// Screen returns a pty job's screen: its supervisor's rendering now, or
// the last one once the job has ended.
func (s *Service) Screen(who principal.Principal, id string) (*ScreenResult, error) {
	rec, err := s.get(who, id)
	if err != nil {
		return nil, err
	}
	if rec.PTY == nil {
		return nil, errcode.New(errcode.NotInteractive, "the job was started without a terminal (pty)")
	}
	dir := s.store.Dir(id)
	if !rec.Terminal {
		// An end meanwhile leaves the last screen on disk.
		if _, err := jobinput.Send(dir, jobinput.Request{Screen: true}); err != nil && !errors.Is(err, jobinput.ErrGone) {
			return nil, channelError(err)
		}
	}
	scr, err := jobmeta.Read[jobmeta.Screen](filepath.Join(dir, jobmeta.ScreenFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, errcode.New(errcode.NotRunning, "the job ended without leaving its screen (its supervisor did not finish)")
	case err != nil:
		return nil, errcode.Wrap(errcode.Internal, err, "the job's screen file is unreadable; the machine's owner can inspect it with `commandcore jobs`")
	}
	res := &ScreenResult{ProcessID: id, Lines: scr.Lines, Cols: scr.Cols, Rows: scr.Rows, AlternateScreen: scr.AlternateScreen,
		Title: scr.Title, StdoutOffset: scr.Offset, Truncated: scr.Truncated, Terminal: rec.Terminal}
	res.Cursor.Row, res.Cursor.Col = scr.Cursor.Row, scr.Cursor.Col
	if !rec.Terminal {
		if now, err := s.store.Get(id); err == nil {
			res.Terminal = now.Terminal
		}
	}
	return res, nil
}
