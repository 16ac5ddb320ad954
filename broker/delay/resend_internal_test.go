package delay

import (
	"errors"
	"strconv"
	"testing"

	"github.com/metaqgo/metaq/broker/store"
)

// Resend cached the resend markers of every group it was asked about,
// groups without dead letters included (a map per name, kept forever):
// memory grew with the group names clients sent. A group costs nothing
// until one of its dead letters is resent.
func TestResendUnknownGroupsCostNothing(t *testing.T) {
	_, s := openService(t, nil)
	part := func(string) (int32, bool) { return 0, true }
	for i := 0; i < 20000; i++ {
		_, _, _, err := s.Resend("nogroup"+strconv.Itoa(i), 12345, part, nil)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("resend: %v", err)
		}
	}
	s.resendMu.Lock()
	n := len(s.resent)
	s.resendMu.Unlock()
	if n != 0 {
		t.Fatalf("%d groups cached after 20000 resends of unknown letters to unknown groups", n)
	}
}

// The groups kept in memory are bounded; an evicted group's markers are
// read back from the log, so its letters are still resent once.
func TestResendCacheBounded(t *testing.T) {
	st, s := openService(t, nil)
	part := func(string) (int32, bool) { return 0, true }
	var letters []int64
	for i := 0; i < maxResentGroups+10; i++ {
		g := "g" + strconv.Itoa(i)
		res, err := st.Append(&store.Message{Topic: DLQTopic(g), Data: []byte("m"), Properties: []byte("retryTopic=t")})
		if err != nil {
			t.Fatal(err)
		}
		letters = append(letters, res.MsgID)
		if _, _, _, err := s.Resend(g, res.MsgID, part, nil); err != nil {
			t.Fatalf("resend %s: %v", g, err)
		}
	}
	if n := len(s.resent); n > maxResentGroups {
		t.Fatalf("%d groups cached, at most %d", n, maxResentGroups)
	}
	for i, id := range letters {
		if _, _, _, err := s.Resend("g"+strconv.Itoa(i), id, part, nil); !errors.Is(err, ErrAlreadyResent) {
			t.Fatalf("second resend of g%d's letter: %v", i, err)
		}
	}
	if n := st.MaxOffset("t", 0); n != int64(len(letters)) {
		t.Fatalf("%d copies for %d letters", n, len(letters))
	}
}
