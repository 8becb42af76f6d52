package relay

import (
	"context"
	"crypto/subtle"
	"errors"
	"sync"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/transport"
)

// Credential rotation (README): every accepted link hands the agent a
// fresh device token, and the one it linked with stops working.
//
//  1. The relay accepts a link opened with T, the device's current token,
//     draws T' and remembers, in memory, that the device's T is becoming T'.
//  2. It sends T' over the link (transport.MethodRotate); only the holder of T
//     could have opened the link.
//  3. The agent stores T' as its token, keeping T as its previous one,
//     atomically (enrollment.SaveToken: temporary file, fsync, rename, fsync
//     of the directory), and only then acknowledges T' with a MAC.
//  4. On the acknowledgment the relay makes T' current and retires T in one
//     transaction (store.RotateDeviceToken), conditional on T being
//     current still. From then on, T coming back marks the device
//     compromised: a copy of its credentials exists.
//
// The crash windows, and why none of them locks the agent out or makes it
// present a retired token itself:
//
//   - The agent did not store T' (it crashed, the link broke, storing
//     failed): it still has T, which is still current; its next link
//     rotates afresh and the pending T' is forgotten.
//   - The agent stored T' but the relay did not commit (the ack was lost,
//     the link broke, the agent died after storing): the agent presents
//     T'; the relay finds it among its pending rotations and commits then.
//   - The relay restarted in that window: T' is unknown (401). Only then,
//     on a 401 which says T' was never made current, does the agent present
//     its previous token T once, and T is current still.
//   - After the commit T' is current and never refused as unknown, so the
//     agent has no reason to present T again.
//
// So a retired token comes back only from a copy of the agent's
// credentials (or an identity file restored from an old backup).
//
// A link whose agent does not confirm its next token within rotateWait is
// closed. A holder of a copy that kept a link without ever taking a new
// token would otherwise keep the copied token current, and so keep the
// agent it was copied from out (device_busy) without ever being found.

// rotateWait bounds how long the relay waits for the agent to confirm it
// stored its next token, unless Server.RotateWait says otherwise.
const rotateWait = limits.SendTimeout

// pendingRotation is a rotation the relay sent and has not committed.
type pendingRotation struct {
	device, from, to string
}

// rotations are the relay's pending rotations, at most one per device.
type rotations struct {
	mu       sync.Mutex
	byDevice map[string]pendingRotation
}

// begin draws the device's next token and records it as pending in place
// of any earlier pending rotation of the device.
func (r *rotations) begin(device, from string) string {
	to := store.NewDeviceToken()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byDevice == nil {
		r.byDevice = map[string]pendingRotation{}
	}
	r.byDevice[device] = pendingRotation{device: device, from: from, to: to}
	return to
}

// settle forgets the device's pending rotation if it is the one to to.
func (r *rotations) settle(device, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.byDevice[device]; ok && p.to == to {
		delete(r.byDevice, device)
	}
}

// forget drops the device's pending rotation.
func (r *rotations) forget(device string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byDevice, device)
}

// find returns the pending rotation whose next token is token.
func (r *rotations) find(token string) (pendingRotation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.byDevice {
		if subtle.ConstantTimeCompare([]byte(p.to), []byte(token)) == 1 {
			return p, true
		}
	}
	return pendingRotation{}, false
}

// rotate hands the link's agent its next token and commits the rotation
// once the agent confirmed it stored it; a link that does not confirm in
// time is closed. An unconfirmed rotation stays pending: the agent may
// have stored the token and lost only its confirmation.
func (s *Server) rotate(conn *transport.Conn, device, current string) {
	next := s.rotations.begin(device, current)
	wait := s.RotateWait
	if wait <= 0 {
		wait = rotateWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := conn.Rotate(ctx, next); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			s.deviceEvent(device, "the agent did not confirm its next credential: its link is closed")
			conn.Close()
		}
		return
	}
	if s.store.RotateDeviceToken(device, current, next, s.Now()) == nil {
		s.rotations.settle(device, next)
	}
}

// authLink authenticates a device link's token: a current token, or the
// next token of a rotation the relay sent and has not committed, which it
// commits now. A token the store refuses for the device's standing ends
// the device's links; a rotated-away one is recorded.
func (s *Server) authLink(token string) (*store.Device, []byte, error) {
	dev, secret, err := s.store.AuthDevice(token, s.Now())
	var refused *store.DeviceRefusal
	if err != nil && !errors.As(err, &refused) && errcode.Is(err, errcode.PermissionDenied) {
		if p, ok := s.rotations.find(token); ok {
			if s.store.RotateDeviceToken(p.device, p.from, p.to, s.Now()) == nil {
				s.rotations.settle(p.device, p.to)
				dev, secret, err = s.store.AuthDevice(token, s.Now())
			}
		}
	}
	if errors.As(err, &refused) {
		if refused.Detected {
			s.deviceEvent(refused.DeviceID, "a rotated-away credential was presented: marked compromised")
		}
		s.endDevice(refused.DeviceID, refused.Standing)
	}
	return dev, secret, err
}
