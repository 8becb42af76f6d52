package relay

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/panel"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/strictjson"
	"github.com/commandcore/commandcore/internal/toolresult"
)

// Secret input (docs/panel.md): process.input with secret_prompt asks a
// person, not the model. The relay records a one-time prompt, answers the
// client with a URL-mode elicitation to the prompt's panel page (a
// multi-round-trip input request: the relay's endpoint is stateless), and
// when the client calls again with the person's consent, waits for the
// person to type the input. The panel hands the input to the job through
// the device (SubmitSecret) with a grant for the asking principal; the
// waiting call returns the device's process.input result, which holds
// byte counts and offsets, never the input.

const (
	secretInputTool = "process.input"
	// secretRequestKey names the elicitation in the input request map.
	secretRequestKey = "secret_input"
	// secretPollEvery is how often a waiting call reads its prompt: the
	// input may arrive at any replica's panel.
	secretPollEvery = 250 * time.Millisecond
)

// secretArgs are process.input's arguments when they ask for secret input.
type secretArgs struct {
	ProcessID    string `json:"process_id"`
	SecretPrompt string `json:"secret_prompt"`
}

// asksSecret reports whether a call is process.input with secret_prompt.
// Arguments the fast reader cannot take apart (escaped keys) are decoded
// as the device would decode them.
func asksSecret(tool string, args json.RawMessage) bool {
	if tool != secretInputTool || len(args) == 0 {
		return false
	}
	if ms, err := jsonspan.Object(args); err == nil {
		return jsonspan.Find(ms, "secret_prompt") != nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return false
	}
	_, ok := m["secret_prompt"]
	return ok
}

// secretInput serves process.input with secret_prompt: the first call
// gets the elicitation, the call the client makes again with the person's
// answer waits for the input.
func (s *Server) secretInput(ctx context.Context, c *client, tok *store.Token, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	dev, args, err := s.callDevice(c, tok, req.Params.Arguments)
	noteDevice(ctx, dev.ID)
	if err != nil {
		return toolresult.Failure(err), nil
	}
	var a secretArgs
	if err := strictjson.Decode(args, &a, limits.MaxFrameBytes, strictjson.ExactKeys); err != nil {
		return toolresult.Failure(errcode.New(errcode.InvalidArgument,
			"secret_prompt replaces data, encoding, eof and wait_ms: give process_id and secret_prompt only")), nil
	}
	if req.Params.RequestState != "" {
		return s.awaitSecret(ctx, c, tok, dev.ID, a, req)
	}
	base, err := s.panelBase()
	if err != nil {
		return toolresult.Failure(err), nil
	}
	elicit := whyNoURLElicitation(req) == ""
	var at *inputOffsets
	if !elicit {
		// Where the job's output stands now, so the model can tell when
		// it has read the input; and a job that takes no input is said
		// so before a person is sent anywhere.
		if at, err = s.inputOffsets(ctx, c, tok, dev, a.ProcessID); err != nil {
			if isCancel(err) {
				return nil, err
			}
			return toolresult.Failure(err), nil
		}
	}
	id, err := s.store.CreateSecretPrompt(store.SecretPrompt{TokenID: tok.ID, Principal: tok.Principal,
		Device: dev.ID, ProcessID: a.ProcessID, Prompt: a.SecretPrompt}, s.Now())
	if err != nil {
		return toolresult.Failure(err), nil
	}
	url := base + panel.SecretPath + id
	if !elicit {
		return secretLink(a.ProcessID, url, s.Now().Add(limits.SecretPromptTTL), at), nil
	}
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{secretRequestKey: &mcp.ElicitParams{
			Mode:          "url",
			Message:       a.SecretPrompt + " (type it in the CommandCore panel: it goes to the job, never to the model)",
			URL:           url,
			ElicitationID: id,
		}},
		RequestState: id,
	}, nil
}

// SecretLink is process.input's result for a client that cannot send its
// person to a page (claude.ai declares no elicitation): the call
// succeeds, and says where the person types the input and how the model
// learns that they did. The input still never passes through the client.
type SecretLink struct {
	ProcessID   string      `json:"process_id"`
	SecretInput SecretInput `json:"secret_input"`
}

// SecretInput is a secret prompt waiting for its person.
type SecretInput struct {
	// State is SecretWaiting: nobody has typed the input yet.
	State string `json:"state"`
	// URL is the panel's one-time page for the input.
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
	// StdoutOffset and StderrOffset are where the job's output stood when
	// the prompt was made: its output grows past them once it has read the
	// input.
	StdoutOffset int64 `json:"stdout_offset"`
	StderrOffset int64 `json:"stderr_offset"`
}

// SecretWaiting is a secret prompt's state until a person answers it.
const SecretWaiting = "waiting_for_person"

// inputOffsets are where a job's output streams stand.
type inputOffsets struct {
	Stdout int64 `json:"stdout_offset"`
	Stderr int64 `json:"stderr_offset"`
}

// inputOffsets writes nothing to the job's input (a process.input of no
// bytes, which the token may call) and returns where its output stands:
// a job that is not running or takes no input fails here.
func (s *Server) inputOffsets(ctx context.Context, c *client, tok *store.Token, dev store.Device, processID string) (*inputOffsets, error) {
	args, err := json.Marshal(struct {
		ProcessID string `json:"process_id"`
		Data      string `json:"data"`
	}{processID, ""})
	if err != nil {
		return nil, err
	}
	raw, err := s.callOn(ctx, c, &dev, tok.Principal, secretInputTool, args, nil)
	if err != nil {
		return nil, err
	}
	out, err := resultOf(raw)
	if err != nil {
		return nil, err
	}
	var at inputOffsets
	if json.Unmarshal(out, &at) != nil {
		return nil, errcode.New(errcode.Internal, "the device's result could not be read")
	}
	return &at, nil
}

// secretLink is the successful result that hands the model the page for
// its person.
func secretLink(processID, url string, expires time.Time, at *inputOffsets) *mcp.CallToolResult {
	out := SecretLink{ProcessID: processID, SecretInput: SecretInput{State: SecretWaiting, URL: url, ExpiresAt: expires.UTC(),
		StdoutOffset: at.Stdout, StderrOffset: at.Stderr}}
	text := fmt.Sprintf("Nothing was typed yet: this input comes from the person, not from you. Ask them to open %s "+
		"(signed in to the CommandCore panel) before %s and type it there; it goes to the job and never passes through you. "+
		"To learn when they have, call process.output with process_id %q, stdout_offset %d, stderr_offset %d and wait_ms 30000 "+
		"(it returns as soon as the job writes past those offsets, as it does once it has read the input), "+
		"or process.wait with until.output and from_offset {\"stdout\":%d,\"stderr\":%d} for the text the program prints next.",
		url, out.SecretInput.ExpiresAt.Format(time.RFC3339), processID, at.Stdout, at.Stderr, at.Stdout, at.Stderr)
	return toolresult.Summarized(out, text)
}

// whyNoURLElicitation says why the relay cannot send this client's person
// to a page, or "" when it can: the client must declare URL elicitation
// and take a multi-round-trip input request (protocol statelessProtocol
// or later), since the relay's endpoint is stateless and cannot send an
// earlier client a request of its own.
//
// An earlier client's capabilities came with its initialize request, which
// the stateless endpoint does not keep: whether it offered URL
// elicitation is unknown here, so the message says what is.
func whyNoURLElicitation(req *mcp.CallToolRequest) string {
	version := ""
	if req.Extra != nil {
		version = req.Extra.Header.Get("Mcp-Protocol-Version")
	}
	if version < statelessProtocol {
		return fmt.Sprintf("the relay sends a person to a page only through the multi-round-trip requests of protocol %s and later, and this client speaks %s (its endpoint keeps no session to send a request on)",
			statelessProtocol, dash(version))
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil || caps.Elicitation.URL == nil {
		return "this client cannot send a person to a page (it offers no URL elicitation)"
	}
	return ""
}

// panelBase is the base URL of a panel to send the person to: this
// replica's, else any live replica's.
func (s *Server) panelBase() (string, error) {
	if s.replica.Panel != "" {
		return s.replica.Panel, nil
	}
	reps, err := s.store.Replicas(s.Now())
	if err != nil {
		return "", errState
	}
	for _, r := range reps {
		if r.Panel != "" {
			return r.Panel, nil
		}
	}
	return "", errcode.New(errcode.ElicitationUnsupported, "no relay replica serves the web panel (relay serve --panel-listen), so no person can be asked")
}

// awaitSecret serves the call a client makes again with the person's
// answer to the elicitation: it waits until the input reached the job (or
// the prompt ended) and returns what the device answered.
func (s *Server) awaitSecret(ctx context.Context, c *client, tok *store.Token, device string, a secretArgs, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := req.Params.RequestState
	p, err := s.store.SecretPrompt(id, s.Now())
	switch {
	case stateFailed(err):
		return toolresult.Failure(errState), nil
	case err != nil:
		return toolresult.Failure(errcode.New(errcode.NotFound, "the secret prompt is used or expired; call process.input with secret_prompt again")), nil
	case p.TokenID != tok.ID || p.Device != device || p.ProcessID != a.ProcessID:
		return toolresult.Failure(errcode.New(errcode.InvalidArgument, "requestState is not this call's secret prompt; call again without it")), nil
	}
	answer, _ := req.Params.InputResponses[secretRequestKey].(*mcp.ElicitResult)
	if answer == nil || answer.Action != "accept" {
		if err := s.store.DeclineSecretPrompt(id, s.Now()); stateFailed(err) {
			return toolresult.Failure(errState), nil
		}
		return toolresult.Failure(errcode.New(errcode.PermissionDenied, "the person declined to type the input")), nil
	}
	// The prompt's clock is the relay's (s.Now), the wait's is real time.
	ctx, cancel := context.WithTimeout(ctx, p.ExpiresAt.Sub(s.Now()))
	defer cancel()
	defer context.AfterFunc(c.request, cancel)()
	tick := time.NewTicker(secretPollEvery)
	defer tick.Stop()
	for {
		switch p, err := s.store.SecretPrompt(id, s.Now()); {
		case stateFailed(err):
			return toolresult.Failure(errState), nil
		case err != nil:
			return toolresult.Failure(errcode.New(errcode.NotFound, "nobody typed the input within %s; the secret prompt expired", limits.SecretPromptTTL)), nil
		case p.State == store.PromptDeclined:
			return toolresult.Failure(errcode.New(errcode.PermissionDenied, "the person declined to type the input")), nil
		case p.State == store.PromptDone || p.State == store.PromptFailed:
			var res mcp.CallToolResult
			if json.Unmarshal(p.Result, &res) != nil {
				return toolresult.Failure(errcode.New(errcode.Internal, "the device's result could not be read")), nil
			}
			return &res, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			if c.request.Err() != nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, context.Canceled
			}
		}
	}
}

// SubmitSecret hands a person's input for secret prompt id to its job:
// once, while the prompt is pending and the token that asked still may
// call process.input on the device. It returns how many bytes the job
// took, or why none reached it; the asking call gets the device's answer
// either way. The input is sent to the device and kept nowhere.
func (s *Server) SubmitSecret(ctx context.Context, id string, input []byte) (int, error) {
	p, err := s.store.TakeSecretPrompt(id, s.Now())
	if err != nil {
		return 0, err
	}
	raw, failure := s.sendSecret(ctx, p, input)
	if failure != nil {
		raw, _ = json.Marshal(toolresult.Failure(failure))
	}
	if err := s.store.FinishSecretPrompt(id, failure != nil, raw, s.Now()); err != nil {
		return 0, err
	}
	if failure != nil {
		return 0, failure
	}
	var res struct {
		AcceptedBytes int `json:"accepted_bytes"`
	}
	out, _ := resultOf(raw)
	json.Unmarshal(out, &res)
	return res.AcceptedBytes, nil
}

// sendSecret calls process.input with the input on the prompt's device
// for the prompt's principal, and returns the device's result when the
// job took the input, or the failure.
func (s *Server) sendSecret(ctx context.Context, p *store.SecretPrompt, input []byte) ([]byte, error) {
	if err := s.stillAllowed(p); err != nil {
		return nil, err
	}
	if len(input) > limits.MaxInputBytes {
		return nil, errcode.New(errcode.InvalidArgument, "the input is over %d bytes", limits.MaxInputBytes)
	}
	// secret: the device masks it in the job's output and keeps it off
	// the terminal's echo, so the model that asked never reads it back.
	args, err := json.Marshal(struct {
		ProcessID string `json:"process_id"`
		Data      string `json:"data"`
		Encoding  string `json:"encoding"`
		Secret    bool   `json:"secret"`
	}{p.ProcessID, base64.StdEncoding.EncodeToString(input), "base64", true})
	if err != nil {
		return nil, err
	}
	defer clear(args)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	dev, err := s.store.FindDevice(p.Device)
	if err != nil {
		return nil, s.deviceFailure(err)
	}
	g, err := s.grant(dev, secretInputTool, p.Principal, args)
	if err != nil {
		return nil, err
	}
	raw, err := s.router().Call(ctx, p.Device, Call{Tool: secretInputTool, Arguments: args, Grant: g}, nil)
	if err != nil {
		return nil, s.callFailure(ctx, err)
	}
	if _, err := resultOf(raw); err != nil {
		return nil, err
	}
	if len(raw) > store.MaxPromptResultBytes {
		return nil, errcode.New(errcode.Internal, "the device's answer is larger than a process.input result")
	}
	return raw, nil
}

// stillAllowed checks that the token which asked for the input may still
// call process.input on the device: a token revoked or expired while the
// person typed does not get the input through.
func (s *Server) stillAllowed(p *store.SecretPrompt) error {
	denied := errcode.New(errcode.PermissionDenied, "the client token that asked for this input is revoked, expired or no longer reaches the job")
	toks, err := s.store.Tokens()
	if err != nil {
		return errState
	}
	dev, err := s.store.FindDevice(p.Device)
	if stateFailed(err) {
		return errState
	}
	if err != nil {
		return denied
	}
	now := s.Now()
	for i := range toks {
		t := &toks[i]
		if t.ID == p.TokenID {
			if t.RevokedAt != nil || !now.Before(t.ExpiresAt) || t.Principal != p.Principal ||
				!authz.MatchScope(t.Tools, secretInputTool) || !deviceAllowed(t, dev) {
				return denied
			}
			return nil
		}
	}
	return denied
}
