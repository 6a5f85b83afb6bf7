// Package e2e holds minikit's end-to-end tests (lab tier, test/README.md): they build the real minikit
// binary once, run `minikit server` as a separate process on loopback with a
// throwaway data dir, and drive it the way a student would, with the real kubectl,
// the minikit client commands and plain HTTP. Every process a test starts is killed
// in t.Cleanup, even when the test fails.
package e2e
