package auth

import "github.com/metaqgo/metaq/conf"

// patterns is a list of glob patterns (conf.MatchPattern: the same
// wildcards as [topic=…] sections); empty matches nothing.
type patterns []string

func (ps patterns) match(name []byte) bool {
	for _, p := range ps {
		if conf.MatchPattern(p, name) {
			return true
		}
	}
	return false
}
