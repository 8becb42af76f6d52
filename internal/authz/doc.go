// Package authz holds what decides whether a tool call may run, one file
// per concept: scope.go, the tool and device lists tokens and the ceiling
// are written in.
package authz
