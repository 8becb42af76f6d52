package enrollment

import (
	"errors"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/strictjson"
)

// EnrollPath is where a server takes enrollment requests.
const EnrollPath = "/v1/enroll"

// LeavePath is where an enrolled device, with its own token as the
// bearer, tells the server it leaves for good: its agent is uninstalled
// and its identity deleted. The server then refuses its credentials.
const LeavePath = "/v1/leave"

// MaxRequestBytes bounds an enrollment request body.
const MaxRequestBytes = 4 << 10

// MaxResponseBytes bounds the server's answer to an enrollment; an
// identity is a few hundred bytes.
const MaxResponseBytes = 64 << 10

// Request is what `commandcore enroll` posts to EnrollPath.
type Request struct {
	Code string `json:"code"`
	// Name is the device's proposed name (its host name); a name given
	// with the code wins.
	Name string `json:"name"`
}

// Response carries the device's identity, shown once.
type Response struct {
	DeviceID string `json:"device_id"`
	Name     string `json:"name"`
	Token    string `json:"token"`
	Secret   []byte `json:"secret"`
	GrantKey string `json:"grant_key"`
}

// DecodeRequest reads an enrollment request strictly: one JSON object
// with only code and name.
func DecodeRequest(body []byte) (*Request, error) {
	var req Request
	if err := strictjson.Decode(body, &req, MaxRequestBytes); err != nil {
		return nil, errcode.New(errcode.InvalidArgument, "enrollment request must be one JSON object with code and name")
	}
	return &req, nil
}

// DecodeResponse reads a server's answer to an enrollment strictly and
// checks that it is a usable identity.
func DecodeResponse(body []byte) (*Response, error) {
	var resp Response
	if err := strictjson.Decode(body, &resp, MaxResponseBytes); err != nil {
		return nil, errors.New("the server's answer is not an enrollment response")
	}
	if resp.DeviceID == "" || resp.Name == "" || resp.Token == "" || len(resp.Secret) < 16 {
		return nil, errors.New("the server's answer is an incomplete identity")
	}
	if _, err := authz.DecodeGrantKey(resp.GrantKey); err != nil {
		return nil, errors.New("the server sent an invalid grant key")
	}
	return &resp, nil
}
