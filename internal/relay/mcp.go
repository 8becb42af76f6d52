package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jsonspan"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/toolresult"
	"github.com/commandcore/commandcore/internal/toolspec"
	"github.com/commandcore/commandcore/internal/transport"
	"github.com/commandcore/commandcore/internal/version"
)

// DevicesListTool is the multi-device endpoint's own tool.
const DevicesListTool = "devices.list"

// DeviceList is devices.list's result.
type DeviceList struct {
	Devices []store.Device `json:"devices"`
}

// clientKey carries an authenticated request's scope into getServer.
type clientKey struct{}

// client is what one MCP session of a client may reach.
type client struct {
	token  *store.Token
	device *store.Device // nil on the multi-device endpoint
	// request is the HTTP request's context. The SDK runs tool handlers on
	// its own context, so a client that cancels by dropping its request
	// would otherwise not reach the device.
	request context.Context
}

var (
	errToken     = errcode.New(errcode.PermissionDenied, "client token is invalid, expired or revoked")
	errToolScope = errcode.New(errcode.PermissionDenied, "this client token may not call this tool")
	errNoDevice  = errcode.New(errcode.NotFound, "no device of this name is reachable with this client token")
	// errState answers a request the state could not judge (its database
	// is unreachable): never a refusal, which would be a wrong answer.
	errState = errcode.New(errcode.Unavailable, "the relay's state database is unavailable; try again shortly")
)

// errOutsideGrant refuses a tool of the relay's table that a client's
// token or connection does not allow. The name is the table's, never the
// client's text.
func errOutsideGrant(tool string) error {
	return errcode.New(errcode.PermissionDenied,
		"%s is a tool of this relay, but this client's grant does not include it: the person who connected the client may connect it again and allow it, or an admin may issue a token that does", tool)
}

// stateFailed reports whether err is the state failing rather than a
// judgement (a refused token, an unknown device).
func stateFailed(err error) bool {
	return err != nil && !errcode.Is(err, errcode.PermissionDenied) && !errcode.Is(err, errcode.NotFound)
}

func (s *Server) mcpHandler() http.Handler {
	single, multi := s.endpointServers()
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		// Stateless: every HTTP request is authenticated on its own, so a
		// revocation or a new device link is seen at once, and both older
		// clients and the current protocol are served. The servers are shared: what a request may
		// reach travels in its context (clientKey).
		c, _ := r.Context().Value(clientKey{}).(*client)
		switch {
		case c == nil:
			return nil
		case c.device == nil:
			return multi
		}
		return single
	}, &mcp.StreamableHTTPOptions{Stateless: true, MaxRequestBodyBytes: limits.MaxRelayRequestBytes})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at, start := s.Now(), time.Now()
		if !s.origins.allowed(r.Header.Values("Origin")) {
			s.refusedWithoutToken(at, start, r)
			writeMCPError(w, http.StatusForbidden, errOrigin)
			return
		}
		presented := bearer(r.Header)
		tok, err := s.tokens.auth(presented, at)
		if stateFailed(err) {
			writeMCPError(w, http.StatusServiceUnavailable, errState)
			return
		}
		device := r.PathValue("device")
		if err != nil {
			s.refusedWithoutToken(at, start, r)
			// RFC 6750 3.1: a request with no token gets no error code; a
			// token that is revoked, expired or unknown is invalid_token.
			code := ""
			if presented != "" {
				code = "invalid_token"
			}
			w.Header().Set("WWW-Authenticate", s.challenge(r, device, code))
			writeMCPError(w, http.StatusUnauthorized, errToken)
			return
		}
		if !s.forResource(tok, device) {
			s.refused(at, start, tok, nil, errResource)
			w.Header().Set("WWW-Authenticate", s.challenge(r, device, "invalid_token"))
			writeMCPError(w, http.StatusUnauthorized, errResource)
			return
		}
		w = s.admitClient(w, r)
		c := &client{token: tok, request: r.Context()}
		if device != "" {
			dev, err := s.store.FindDevice(device)
			if stateFailed(err) {
				s.refused(at, start, tok, nil, errState)
				writeMCPError(w, http.StatusServiceUnavailable, errState)
				return
			}
			if err != nil || !deviceAllowed(tok, dev) {
				s.refused(at, start, tok, dev, errNoDevice)
				writeMCPError(w, http.StatusNotFound, errNoDevice)
				return
			}
			c.device = dev
		}
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(io.LimitReader(r.Body, limits.MaxRelayRequestBytes+1))
			switch {
			case err == nil && len(body) > limits.MaxRelayRequestBytes:
				s.refuseOversized(w, r, c, body, at, start)
				return
			case err != nil:
				http.Error(w, "failed to read body", http.StatusBadRequest)
				return
			}
			if dc, ok := readDirect(r, body, c); ok {
				s.serveDirect(w, r, c, dc)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, c)))
	})
}

// deviceAllowed reports whether the token's device scope names the device,
// by ID or by name. A name shaped like an ID (left from before such names
// were refused) never matches: that entry means the device with that ID.
func deviceAllowed(tok *store.Token, dev *store.Device) bool {
	return authz.MatchScope(tok.Devices, dev.ID) || !store.IsDeviceID(dev.Name) && authz.MatchScope(tok.Devices, dev.Name)
}

// endpointServers builds the MCP servers of the two endpoints, once: every
// device tool of the table, and on the multi-device endpoint devices.list.
// Each request's session sees only the tools its token's scope names
// (inScope); building a server per request would rebuild and re-check
// every schema each time.
func (s *Server) endpointServers() (single, multi *mcp.Server) {
	tools, multiTools := endpointTools()
	tools, multiTools = s.withCallWait(tools), s.withCallWait(multiTools)
	build := func(tools []*mcp.Tool, devicesList bool) *mcp.Server {
		srv := mcp.NewServer(&mcp.Implementation{Name: "commandcore-relay", Version: version.Version}, &mcp.ServerOptions{Instructions: toolspec.Instructions, Capabilities: toolspec.Capabilities()})
		// observeCalls is outermost, so it audits the scope's refusals too.
		srv.AddReceivingMiddleware(s.observeCalls, inScope)
		for _, t := range tools {
			srv.AddTool(t, s.forwarder(t.Name))
		}
		if devicesList {
			srv.AddTool(devicesListDef(), s.devicesList)
		}
		return srv
	}
	return build(tools, false), build(multiTools, true)
}

// clientOf is the client a request's context carries (mcpHandler puts it
// there; the SDK keeps the HTTP request's values in a session's contexts).
func clientOf(ctx context.Context) *client {
	c, _ := ctx.Value(clientKey{}).(*client)
	return c
}

// visible reports whether a client's session shows the tool.
func (c *client) visible(tool string) bool {
	return tool == DevicesListTool && c.device == nil || authz.MatchScope(c.token.Tools, tool)
}

// inScope gives each session only the tools its token may call: tools/list
// lists those. A call of a tool the endpoint has but the token may not use
// is that tool's failure, saying so (a model that read "unknown tool" would
// look for the fault in the name); a call of any other tool is answered as
// the SDK answers a tool a server does not have.
func inScope(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		c := clientOf(ctx)
		if c == nil {
			return nil, errToken
		}
		switch r := req.(type) {
		case *mcp.CallToolRequest:
			switch {
			case r.Params == nil || c.visible(r.Params.Name):
			case slices.Contains(toolNames(), r.Params.Name):
				return toolresult.Failure(errOutsideGrant(r.Params.Name)), nil
			default:
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", r.Params.Name)}
			}
		case *mcp.ListToolsRequest:
			res, err := next(ctx, method, req)
			list, ok := res.(*mcp.ListToolsResult)
			if err != nil || !ok {
				return res, err
			}
			out := *list
			out.Tools = []*mcp.Tool{}
			for _, t := range list.Tools {
				if c.visible(t.Name) {
					out.Tools = append(out.Tools, t)
				}
			}
			return &out, nil
		}
		return next(ctx, method, req)
	}
}

// devicesListDef is the relay's own tool, defined as the device tools are:
// a title, annotations and an outputSchema.
var devicesListDef = sync.OnceValue(func() *mcp.Tool {
	output, err := toolresult.OutputSchema[DeviceList]()
	if err != nil {
		panic(fmt.Sprintf("devices.list output schema: %v", err))
	}
	t := &mcp.Tool{
		Name:         DevicesListTool,
		Description:  "Devices this client token may reach, with connection state and last-seen time.",
		InputSchema:  map[string]any{"type": "object", "additionalProperties": false},
		OutputSchema: output,
	}
	toolresult.Annotate(t, "List devices", true, false)
	return t
})

// withDevice adds the required device argument to a tool's input schema.
func withDevice(schema any) any {
	var m map[string]any
	raw, _ := json.Marshal(schema)
	if json.Unmarshal(raw, &m) != nil || m == nil {
		m = map[string]any{"type": "object"}
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props["device"] = map[string]any{"type": "string", "description": "the device's name or ID (see devices.list)"}
	m["properties"] = props
	req, _ := m["required"].([]any)
	m["required"] = append(req, "device")
	return m
}

// authorize checks the client's token again for every call (a remembered
// check holds only while no token has changed), and refuses a session used
// with another token than the one that opened it.
func (s *Server) authorize(c *client, req *mcp.CallToolRequest, tool string) (*store.Token, error) {
	if c == nil || req.Extra == nil {
		return nil, errToken
	}
	tok, err := s.tokens.auth(bearer(req.Extra.Header), s.Now())
	if stateFailed(err) {
		return nil, errState
	}
	if err != nil || tok.ID != c.token.ID {
		return nil, errToken
	}
	if tool != DevicesListTool && !authz.MatchScope(tok.Tools, tool) {
		return nil, errToolScope
	}
	return tok, nil
}

func (s *Server) devicesList(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	tok, err := s.authorize(clientOf(ctx), req, DevicesListTool)
	if err != nil {
		return toolresult.Failure(err), nil
	}
	if a := req.Params.Arguments; len(a) > 0 && string(a) != "{}" && string(a) != "null" {
		var m map[string]json.RawMessage
		if json.Unmarshal(a, &m) != nil || len(m) > 0 {
			return toolresult.Failure(errcode.New(errcode.InvalidArgument, "devices.list takes no arguments")), nil
		}
	}
	all, err := s.store.Devices()
	if err != nil {
		return toolresult.Failure(err), nil
	}
	out := DeviceList{Devices: []store.Device{}}
	for i := range all {
		if deviceAllowed(tok, &all[i]) {
			out.Devices = append(out.Devices, all[i])
		}
	}
	return toolresult.Summarized(out, devicesText(&out)), nil
}

// devicesText is devices.list's text content: a line a device, its name,
// whether its link is up (else when it was last seen), its standing and
// its agent's version; lines stop short of limits.MaxToolTextChars,
// saying how many more devices the structured result holds.
func devicesText(l *DeviceList) string {
	var b strings.Builder
	switch len(l.Devices) {
	case 0:
		b.WriteString("no device this token may reach\n")
	case 1:
		b.WriteString("1 device this token may reach:\n")
	default:
		fmt.Fprintf(&b, "%d devices this token may reach:\n", len(l.Devices))
	}
	for i, d := range l.Devices {
		line := d.Name + ": "
		switch {
		case d.Connected:
			line += "connected"
		case d.LastSeen != nil:
			line += "offline, last seen " + d.LastSeen.UTC().Format(time.RFC3339)
		default:
			line += "offline, never seen"
		}
		line += ", " + d.Standing
		if d.AgentVersion != "" {
			line += ", agent " + d.AgentVersion
			if d.UpdateOffer != "" {
				line += " (" + d.UpdateOffer + " offered)"
			}
		}
		if b.Len()+len(line) > limits.MaxToolTextChars-200 {
			fmt.Fprintf(&b, "... %d more devices in the structured result\n", len(l.Devices)-i)
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// forwarder serves one tool's calls that direct.go leaves to the SDK.
func (s *Server) forwarder(tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c := clientOf(ctx)
		tok, err := s.authorize(c, req, tool)
		if err != nil {
			return toolresult.Failure(err), nil
		}
		if asksSecret(tool, req.Params.Arguments) {
			return s.secretInput(ctx, c, tok, req)
		}
		if waitsOnPath(tool, req.Params.Arguments) && !authz.MatchScope(tok.Tools, filesListTool) {
			return toolresult.Failure(errUntilPath), nil
		}
		var target *progressTarget
		var progress func([]byte)
		if pt := req.Params.GetProgressToken(); pt != nil && req.Session != nil {
			target = &progressTarget{ctx: ctx, session: req.Session, token: pt}
			progress = target.forward
		}
		raw, device, err := s.forward(ctx, c, tok, tool, req.Params.Arguments, progress)
		noteDevice(ctx, device)
		switch {
		case isCancel(err):
			return nil, err
		case err != nil:
			return toolresult.Failure(err), nil
		}
		if target != nil && target.lost.Load() {
			raw = markIncomplete(raw)
		}
		var res mcp.CallToolResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return toolresult.Failure(errcode.New(errcode.Internal, "the device's result could not be read")), nil
		}
		return &res, nil
	}
}

// isCancel reports whether err says the client went away: such a call
// gets no answer.
func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// forward resolves a call's device, mints its grant and routes it. It
// returns the device's result as the device encoded it; or an error to
// answer the client with as a failed call; or, when the client went away,
// a context error (isCancel). device is the device's ID once known.
func (s *Server) forward(ctx context.Context, c *client, tok *store.Token, tool string, args json.RawMessage, progress func([]byte)) (result []byte, device string, err error) {
	dev, args, err := s.callDevice(c, tok, args)
	if err != nil {
		return nil, dev.ID, err
	}
	args, cut, err := s.boundWait(tool, args)
	if err != nil {
		return nil, dev.ID, err
	}
	if result, err = s.callOn(ctx, c, &dev, tok.Principal, tool, args, progress); err == nil && cut {
		result = s.markCutWait(tool, result)
	}
	return result, dev.ID, err
}

// callOn mints a call's grant for principal and routes it to dev, within
// the call's bounds; errors are as forward's.
func (s *Server) callOn(ctx context.Context, c *client, dev *store.Device, principal, tool string, args json.RawMessage, progress func([]byte)) ([]byte, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	defer context.AfterFunc(c.request, cancel)()
	g, err := s.grant(dev, tool, principal, args)
	if err != nil {
		return nil, err
	}
	result, err := s.router().Call(ctx, dev.ID, Call{Tool: tool, Arguments: args, Grant: g}, progress)
	if err != nil {
		return nil, s.callFailure(ctx, err)
	}
	return result, nil
}

// callDevice is the device a call is for (the endpoint's, or the one its
// device argument names) and the arguments for it; a device the token may
// not reach is errNoDevice. On failure the device is the zero Device, or
// the one found but out of reach.
func (s *Server) callDevice(c *client, tok *store.Token, args json.RawMessage) (store.Device, json.RawMessage, error) {
	dev := c.device
	if dev == nil {
		name, rest, err := splitDevice(args)
		if err != nil {
			return store.Device{}, nil, err
		}
		if dev, err = s.store.FindDevice(name); stateFailed(err) {
			return store.Device{}, nil, errState
		} else if err != nil {
			return store.Device{}, nil, errNoDevice
		}
		args = rest
	}
	if !deviceAllowed(tok, dev) {
		return *dev, nil, errNoDevice
	}
	return *dev, args, nil
}

// callFailure is what a routed call's error tells whoever made the call:
// an error to answer with, or context.Canceled when the caller went away.
func (s *Server) callFailure(ctx context.Context, err error) error {
	var (
		werr  *jsonrpc.Error
		coded *errcode.Error
	)
	switch {
	case errors.Is(err, ErrNoRoute):
		return errDeviceOffline
	case errors.Is(context.Cause(ctx), errCallTimeout):
		return s.errDeviceTimeout()
	case ctx.Err() != nil:
		return context.Canceled
	case errors.As(err, &werr) && werr.Code == transport.CodeResultTooLarge:
		return errcode.New(errcode.ResultTooLarge,
			"the device's result is larger than the link carries (%d MiB); ask for less, e.g. a smaller max_bytes or max_results", limits.MaxFrameBytes>>20)
	case errors.As(err, &werr):
		return errcode.New(errcode.Internal, "the device refused the call (JSON-RPC error %d)", werr.Code)
	case errors.As(err, &coded):
		// The replicas' own failures (unavailable) say what they are.
		return err
	}
	return errcode.New(errcode.DeviceOffline, "the link to the device ended during the call")
}

// splitDevice takes the device argument out of a multi-device call's
// arguments and returns the rest, as the client wrote them, for the
// device. Arguments a later decoder could read otherwise (a repeated or
// escaped key) are refused.
func splitDevice(args json.RawMessage) (string, json.RawMessage, error) {
	ms, err := jsonspan.Object(args)
	if err != nil {
		return "", nil, errcode.New(errcode.InvalidArgument, "arguments must be a JSON object with a device, each key once and unescaped")
	}
	name, ok := jsonspan.String(jsonspan.Find(ms, "device"))
	if !ok || name == "" {
		return "", nil, errcode.New(errcode.InvalidArgument, "argument \"device\" must name a device (see devices.list)")
	}
	rest := make([]byte, 0, len(args))
	rest = append(rest, '{')
	for _, m := range ms {
		if m.Key == "device" {
			continue
		}
		if len(rest) > 1 {
			rest = append(rest, ',')
		}
		rest = append(rest, '"')
		rest = append(rest, m.Key...)
		rest = append(rest, `":`...)
		rest = append(rest, m.Value...)
	}
	return name, append(rest, '}'), nil
}
