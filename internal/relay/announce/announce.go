// Package announce is what other programs read of a running relay: the
// lines `relay serve` starts its output with, each followed by a URL, in
// this order (scripts, benchmarks and tests take the addresses from
// them). A leaf, so that test helpers can read it without the relay.
package announce

const (
	// Listening is followed by the base URL of the MCP,
	// enrollment and agent endpoints.
	Listening = "relay: listening on "
	// Panel is followed by the web panel's URL, when it serves
	// one.
	Panel = "relay: panel on "
	// Metrics is followed by the metrics' URL, when they are
	// served.
	Metrics = "relay: metrics on "
)
