// Package errcode defines the stable error codes (README) and an error type
// that carries one. Messages are content-free: they never quote a command,
// path, environment value or output byte, because they leave the machine.
package errcode

import (
	"errors"
	"fmt"
)

// Code is a stable snake_case error word.
type Code string

// The codes a device answers with.
const (
	NotFound           Code = "not_found"
	InvalidArgument    Code = "invalid_argument"
	JobTableFull       Code = "job_table_full"
	RetentionFull      Code = "retention_full"
	PolicyInvalid      Code = "policy_invalid"
	SystemdUnavailable Code = "systemd_unavailable"
	PermissionDenied   Code = "permission_denied"
	GrantInvalid       Code = "grant_invalid"
	IdentityMismatch   Code = "identity_mismatch"
	Internal           Code = "internal"
	// NotInteractive: input or a resize for a job started without stdin
	// (or, for a resize, without a terminal).
	NotInteractive Code = "not_interactive"
	// NotRunning: input for a job that has ended.
	NotRunning Code = "not_running"
	// InputClosed: input after the job's stdin was closed.
	InputClosed Code = "input_closed"
	// AlreadyExists: files.write create found the file there.
	AlreadyExists Code = "already_exists"
	// Conflict: the file's content is not the expected_sha256 the call named.
	Conflict Code = "conflict"
	// EditMismatch: a files.edit old_text was not found as often as expected.
	EditMismatch Code = "edit_mismatch"
	// DeviceOffline: the relay has no live link to the chosen device.
	DeviceOffline Code = "device_offline"
	// ResultTooLarge: the device's result does not fit one link frame.
	ResultTooLarge Code = "result_too_large"
	// DeviceBusy: the relay refused a device link because the device's
	// existing link still answers.
	DeviceBusy Code = "device_busy"
	// DeviceTimeout: the device did not answer a forwarded call in time.
	DeviceTimeout Code = "device_timeout"
	// RateLimited: too many requests from one source; try again later.
	RateLimited Code = "rate_limited"
	// Unavailable: the relay is busy; try again shortly.
	Unavailable Code = "unavailable"
	// AdminRefused: an admin grant (the relay's web panel) on a device
	// whose owner refuses admins ("admin": false in permissions.json).
	AdminRefused Code = "admin_refused"
	// ElicitationUnsupported: process.input's secret_prompt reached a
	// server that cannot ask a person; only the relay's panel can.
	ElicitationUnsupported Code = "elicitation_unsupported"
)

// Error is an error with a code and a message that is safe to show remotely.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Details, when set, are machine-readable facts about the failure
	// (counts, line numbers), as content-free as the message.
	Details any `json:"details,omitempty"`
	// cause is kept for local diagnosis only; it is never serialised.
	cause error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the local cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// New returns an Error with the given code and message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an Error with the given code and safe message whose local
// cause is err.
func Wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), cause: err}
}

// WithDetails returns a copy of e that carries details.
func (e *Error) WithDetails(details any) *Error {
	c := *e
	c.Details = details
	return &c
}

// From converts any error into an *Error. Errors without a code become
// internal errors whose message does not repeat the underlying text, which
// may contain paths.
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: Internal, Message: "internal error", cause: err}
}

// Is reports whether err carries code.
func Is(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
