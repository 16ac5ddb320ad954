//go:build !amd64

package store

// prefetchLine is a no-op where there is no prefetch instruction wired up.
func prefetchLine(*byte) {}
