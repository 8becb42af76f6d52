package oauth

import (
	"html/template"
	"net/http"
	"sync"
)

// The RFCs' error codes (RFC 6749 5.2 and 4.1.2.1, RFC 7591 3.2.2, RFC
// 8707).
const (
	ErrInvalidRequest          = "invalid_request"
	ErrInvalidClient           = "invalid_client"
	ErrInvalidGrant            = "invalid_grant"
	ErrUnauthorizedClient      = "unauthorized_client"
	ErrUnsupportedGrantType    = "unsupported_grant_type"
	ErrUnsupportedResponseType = "unsupported_response_type"
	ErrAccessDenied            = "access_denied"
	ErrInvalidTarget           = "invalid_target"
	ErrServerError             = "server_error"
	ErrTemporarilyUnavailable  = "temporarily_unavailable"
	ErrInvalidRedirectURI      = "invalid_redirect_uri"
	ErrInvalidClientMetadata   = "invalid_client_metadata"
)

// errorBody is an OAuth error response. Its description never repeats
// what the client sent.
type errorBody struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// writeOAuthError answers with an OAuth error: 401 for invalid_client,
// 503 when the state is unavailable, else 400.
func writeOAuthError(w http.ResponseWriter, code, description string) {
	status := http.StatusBadRequest
	switch code {
	case ErrInvalidClient:
		status = http.StatusUnauthorized
	case ErrTemporarilyUnavailable:
		status = http.StatusServiceUnavailable
	case ErrServerError:
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, errorBody{Error: code, Description: description})
}

// errorPage is parsed on first use: every role of the binary runs this
// package's initialisation.
var errorPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("error").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Cannot connect this client</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 3em auto; padding: 0 1em">
<h1>Cannot connect this client</h1>
<p>{{.}}</p>
<p>The relay sent you nowhere else: ask the client's maker, or add the client again.</p>
</body></html>
`))
})

// writeErrorPage answers an authorization request that must not be
// redirected (its client or redirect URI is not known good) with a page
// for the person in front of the browser.
func writeErrorPage(w http.ResponseWriter, status int, message string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(status)
	errorPage().Execute(w, message)
}
