package enrollment

import (
	"errors"
	"fmt"
)

// ErrReplaced says the stored credential is another device's now: the agent
// was enrolled again while it ran.
var ErrReplaced = errors.New("identity: replaced by a new enrollment; restart the agent")

// SaveToken stores the device token a server rotated in, with previous,
// the token the link that handed it over was opened with, atomically
// (Save). The agent presents token from then on, and previous only when
// the server does not know token: that happens only if the server never
// made token current (it restarted before confirming the rotation), so
// previous is still the current one there.
//
// It rewrites the credential as stored, not as the running agent holds it
// (a --server override stays out of the file), and refuses with
// ErrReplaced once the stored credential is not deviceID's.
func SaveToken(configDir, deviceID, token, previous string) error {
	id, err := Load(configDir)
	if err != nil {
		return fmt.Errorf("save token: %w", err)
	}
	if id.DeviceID != deviceID {
		return ErrReplaced
	}
	id.Token, id.PreviousToken = token, previous
	return Save(configDir, id)
}
