package store

import "os"

// TEMPORARY experiment knobs (removed before hand-off).
var (
	expRoundPop = os.Getenv("EXP_ROUNDPOP") == "1"
)
