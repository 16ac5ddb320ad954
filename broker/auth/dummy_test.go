package auth

import (
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// TestUnknownUserCostsAsMuchAsWrongSecret: docs/security.md promises "An
// unknown user costs the same as a wrong secret (no user enumeration by
// timing)". The secret of an unknown user, or of a user without a secret,
// is compared with a dummy hash: its bcrypt cost must be the users'
// (a dummy at bcrypt.MinCost answered ~64x faster than a wrong secret at
// cost 10). Asserted on the cost parameter, not on durations, so that a
// loaded machine cannot make it flaky.
func TestUnknownUserCostsAsMuchAsWrongSecret(t *testing.T) {
	hash := func(cost int) string {
		h, err := HashSecret("right", cost)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	def := hash(0) // what `metaq auth hash` writes: bcrypt.DefaultCost
	for _, tc := range []struct {
		name, file string
		want       int
	}{
		{"default cost", "[alice]\nsecret = " + def + "\npublish = *\n", bcrypt.DefaultCost},
		{"lower cost", "[alice]\nsecret = " + hash(5) + "\n", 5},
		{"mixed costs: the highest", "[alice]\nsecret = " + hash(5) + "\n[bob]\nsecret = " + hash(6) + "\n", 6},
		{"no secrets", "[guest]\nsubscribe = *\n", bcrypt.DefaultCost},
	} {
		us, err := ParseUsers([]byte(tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := bcrypt.Cost(us.dummy()); err != nil || got != tc.want {
			t.Errorf("%s: unknown users are compared at cost %d (%v), want %d", tc.name, got, err, tc.want)
		}
	}
	if got, _ := bcrypt.Cost(New(Options{}).Users().dummy()); got != bcrypt.DefaultCost {
		t.Errorf("no users loaded: dummy cost %d, want %d", got, bcrypt.DefaultCost)
	}

	// Authenticate compares with it: unknown user, user without a secret
	// and wrong secret all fail the same way.
	us, err := ParseUsers([]byte("[alice]\nsecret = " + def + "\npublish = *\n[guest]\nsubscribe = *\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{Anonymous: "none", FailRate: 1e6, FailBurst: 1e6, MaxDelay: time.Second})
	a.SetUsers(us)
	for _, user := range []string{"alice", "mallory", "guest"} {
		if r := a.Authenticate("10.0.0.1", user, []byte("wrong"), nil); r != reasonBadLogin {
			t.Errorf("%s with a wrong secret: %q, want %q", user, r, reasonBadLogin)
		}
	}
	if n := a.Stats().Checks; n != 3 {
		t.Errorf("%d secrets compared, want 3 (one bcrypt run each)", n)
	}
}
