// Package authz holds what decides whether a tool call may run, one file per
// concept: grant.go, the per-call grants the relay mints and the agent
// verifies; replay.go and sequence.go, the memory that makes each grant good
// for one call (a window per relay process for numbered grants); ceiling.go,
// the owner's permission ceiling on what runs here; scope.go, the tool and
// device lists tokens and the ceiling are written in; gate.go, the check
// every tool call passes, over the link and locally.
package authz
