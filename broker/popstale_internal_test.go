package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/metaqgo/metaq/broker/pop"
)

// A finish with more stale handles than maxStaleListed names only the first
// maxStaleListed of them (the reply stays bounded) and says it left some out.
func TestAppendStaleBoundsTheList(t *testing.T) {
	hs := make([]pop.Handle, maxStaleListed+3)
	for i := range hs {
		hs[i] = pop.Handle{Topic: []byte("t"), Partition: 1, Offset: int64(i), Attempt: 2, Stale: i != 0}
	}
	body := string(appendStale(nil, 1, len(hs)-1, hs))
	want := fmt.Sprintf("1 of %d applied; %d not current (acknowledged, released, timed out or redelivered):", len(hs), len(hs)-1)
	if !strings.HasPrefix(body, want) || !strings.HasSuffix(body, " …") {
		t.Fatalf("body %q", body)
	}
	for i := range hs {
		named := strings.Contains(body, " "+pop.FormatHandle("t", 1, int64(i), 2)+" ")
		if named != (i >= 1 && i <= maxStaleListed) {
			t.Errorf("handle %d named=%v: %q", i, named, body)
		}
	}
}
