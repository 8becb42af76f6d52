// Package testkit is the scaffolding the end-to-end tests, the VM guest,
// the install tests and the benchmarks share: building the real binary,
// opening an MCP session to it (over stdio, or through a relay), calling a
// tool and decoding its structured result or error code, reading the
// CLI's JSON lines, waiting for a condition (Eventually), and the extended attributes and ACLs the file tools'
// tests set and read back. Its functions return errors, so the VM guest (a plain
// program) uses them as they are; tests use the testing.TB wrappers.
// Only tests, benchmarks and the VM guest import it.
package testkit
