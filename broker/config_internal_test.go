package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/metaqgo/metaq/broker/store"
	"github.com/metaqgo/metaq/conf"
)

// A topic whose deletePolicy keeps its messages (archive: docs/configuration.md,
// "nothing is deleted") under a [system] deletePolicy that deletes was given
// the system's retention: StoreConfig's TopicRetention returned 0, which the
// store reads as "use Retention", so the archived topic lost its messages
// after [system]'s age.
func TestTopicArchiveKeepsUnderSystemDelete(t *testing.T) {
	ini := fmt.Sprintf("[system]\nbrokerId=1\ndataPath=%s\ndeletePolicy=delete,1\nmaxSegmentSize=1m\nmaxMessageSize=64k\nindexFileSize=64k\n"+
		"[zookeeper]\nzk.zkEnable=false\n[topic=audit]\ndeletePolicy=archive,30\n[topic=logs]\n[topic=short]\ndeletePolicy=delete,30m\n", t.TempDir())
	c, err := conf.Parse([]byte(ini), "server.ini")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(StoreConfig(c, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := st.RetentionOf("audit"); got < 100*365*24*time.Hour {
		t.Errorf("audit (archive) retention %v, want kept", got)
	}
	if got := st.RetentionOf("logs"); got != time.Hour {
		t.Errorf("logs (inherits delete,1) retention %v, want 1h", got)
	}
	if got := st.RetentionOf("short"); got != 30*time.Minute {
		t.Errorf("short retention %v, want 30m", got)
	}
	if got := st.RetentionOf(conf.ScheduleTopic); got != time.Hour {
		t.Errorf("%s retention %v, want [system]'s 1h", conf.ScheduleTopic, got)
	}
}
