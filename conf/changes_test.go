package conf

import (
	"reflect"
	"slices"
	"testing"
)

// Every field of the sections outside [topic=…] maps to its key, so a
// reload names what it refuses (and a new field without a key is caught).
func TestStaticChangesNameKeys(t *testing.T) {
	c := Default(1)
	for _, s := range staticSections(c, c) {
		var walk func(prefix string, typ reflect.Type)
		walk = func(prefix string, typ reflect.Type) {
			for i := 0; i < typ.NumField(); i++ {
				f := typ.Field(i)
				if isGroup(f.Type) {
					walk(prefix+f.Name, f.Type)
					continue
				}
				if fieldKey(s.name, s.defs, prefix, f.Name) == "" {
					t.Errorf("[%s] field %s%s has no key", s.name, prefix, f.Name)
				}
			}
		}
		walk("", s.a.Type())
	}
	a, err := Parse([]byte("[system]\nbrokerId=1\n[zookeeper]\nzk.zkConnect=a:1\n[topic=t]\n"), "a.ini")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte("[system]\nbrokerId=1\nacceptPublish=false\nmaxTxTimeoutInSeconds=5\npopMaxInflight=7\nmessageDelayLevel=1s\nputDataTimeoutMs=5\n"+
		"[zookeeper]\nzk.zkConnect=b:1\nzk.zkSessionTimeoutMs=1000\n[slave]\nslaveMaxDelayInMills=3\n[topic=t]\nnumPartitions=3\n[topic=u]\n"), "b.ini")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"[slave] slaveMaxDelayInMills", "[system] acceptPublish", "[system] maxTxTimeoutInSeconds", "[system] messageDelayLevel",
		"[system] popMaxInflight", "[system] putDataTimeoutMs", "[zookeeper] zk.zkConnect", "[zookeeper] zk.zkSessionTimeoutMs"}
	if got := a.StaticChanges(b); !slices.Equal(got, want) {
		t.Fatalf("StaticChanges:\n got %q\nwant %q", got, want)
	}
	if got := a.StaticChanges(a); len(got) != 0 {
		t.Fatalf("no change: %q", got)
	}
}
