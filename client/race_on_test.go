//go:build race

package client

// raceOn: the race detector allocates in synchronisation, so allocation counts are not checked.
const raceOn = true
