package relay

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relay/oauth"
)

// errOrigin refuses a request a web page of another origin made: the
// Streamable HTTP transport's rule against DNS rebinding and cross-site
// calls.
var errOrigin = errcode.New(errcode.PermissionDenied,
	"requests from this web origin are not allowed; the relay's operator may allow it (relay serve --allowed-origins)")

// ErrAllowedOrigin refuses an allowed origin that is not one.
var ErrAllowedOrigin = errors.New("an allowed origin is http:// or https:// and a host, with an optional port and nothing after it")

// origins are the web origins whose pages may call the MCP endpoints.
type origins struct {
	set atomic.Pointer[map[string]bool]
}

// allowed reports whether a request with these Origin headers may be
// served: one without is not a browser's cross-origin request; one with
// must name an allowed origin, once.
func (o *origins) allowed(vs []string) bool {
	switch len(vs) {
	case 0:
		return true
	case 1:
		set := o.set.Load()
		return set != nil && (*set)[originKey(vs[0])]
	}
	return false
}

// SetAllowedOrigins lets pages of the public URL's origin, and of each of
// extra, call the MCP endpoints; every other Origin is refused with 403.
func (s *Server) SetAllowedOrigins(public string, extra []string) error {
	set, err := parseOrigins(append([]string{public}, extra...))
	if err != nil {
		return err
	}
	s.origins.set.Store(&set)
	return nil
}

// parseOrigins reads origins as CheckPublicURL does; "" is none.
func parseOrigins(urls []string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, u := range urls {
		if u == "" {
			continue
		}
		o, err := oauth.CheckPublicURL(u)
		if err != nil {
			return nil, ErrAllowedOrigin
		}
		set[originKey(o)] = true
	}
	return set, nil
}

// originKey is an origin as compared: in lower case, without the
// scheme's default port, which a browser's Origin header leaves out.
func originKey(o string) string {
	o = strings.ToLower(o)
	if h, ok := strings.CutSuffix(o, ":443"); ok && strings.HasPrefix(o, "https://") {
		return h
	}
	if h, ok := strings.CutSuffix(o, ":80"); ok && strings.HasPrefix(o, "http://") {
		return h
	}
	return o
}

// rpcRefusal is an HTTP refusal at an MCP endpoint as a JSON-RPC error
// response: the request's id is not read before the refusal, so it is
// null (JSON-RPC 2.0, 5), and the data is the relay's coded error.
type rpcRefusal struct {
	JSONRPC string       `json:"jsonrpc"`
	ID      *int         `json:"id"`
	Error   rpcErrorBody `json:"error"`
}

type rpcErrorBody struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    *errcode.Error `json:"data"`
}

// rpcServerError is JSON-RPC's implementation-defined server error.
const rpcServerError = -32000

// writeMCPError answers an MCP request refused before MCP serves it.
func writeMCPError(w http.ResponseWriter, status int, err error) {
	e := errcode.From(err)
	body, _ := json.Marshal(rpcRefusal{JSONRPC: "2.0", Error: rpcErrorBody{Code: rpcServerError, Message: e.Message, Data: e}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
