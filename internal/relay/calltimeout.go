package relay

import (
	"context"
	"errors"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// errCallTimeout is a forwarded call's cancellation cause when the device
// did not answer within the call timeout.
var errCallTimeout = errors.New("the device did not answer in time")

func (s *Server) callTimeout() time.Duration {
	if s.CallTimeout > 0 {
		return s.CallTimeout
	}
	return limits.ForwardTimeout
}

// callContext bounds one forwarded call, so a device that never answers
// cannot hold a client's request; the call is cancelled on the device too.
func (s *Server) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.callTimeout(), errCallTimeout)
}

// errDeviceTimeout answers a call whose context ended with errCallTimeout.
func (s *Server) errDeviceTimeout() error {
	return errcode.New(errcode.DeviceTimeout, "the device did not answer within %s; the call was cancelled", s.callTimeout())
}
