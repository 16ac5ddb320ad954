package auth

// match reports whether name matches pattern, where '*' matches any run of
// bytes (the empty one too) and every other byte matches itself. It does
// not allocate; the backtracking is linear in len(name) per star.
func match(pattern string, name []byte) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// patterns is a list of glob patterns; empty matches nothing.
type patterns []string

func (ps patterns) match(name []byte) bool {
	for _, p := range ps {
		if match(p, name) {
			return true
		}
	}
	return false
}
