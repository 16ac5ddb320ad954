package conf

import (
	"strings"
	"testing"
)

func TestSecuritySection(t *testing.T) {
	c, err := Parse([]byte("[system]\nbrokerId=1\n[topic=t]\n"), "/tmp/x/server.ini")
	if err != nil {
		t.Fatal(err)
	}
	if c.Security.AuthEnabled() || c.Security.TLSEnabled() || !c.Security.AllowPlaintext || c.Security.Anonymous != "all" {
		t.Fatalf("security on by default: %+v", c.Security)
	}
	c, err = Parse([]byte("[system]\nbrokerId=1\n[zookeeper]\nzk.zkAuth=metaq:pw\n[security]\ntlsPort=8443\ntlsCert=c.pem\ntlsKey=k.pem\n"+
		"allowPlaintext=false\nusersFile=users.ini\nanonymous=guest\n[topic=t]\n"), "/tmp/x/server.ini")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Security
	if s.TLSPort != 8443 || s.TLSCert != "/tmp/x/c.pem" || s.UsersFile != "/tmp/x/users.ini" || s.AllowPlaintext || !s.AuthEnabled() || c.ZK.Auth != "metaq:pw" {
		t.Fatalf("%+v", s)
	}
	for bad, want := range map[string]string{
		"[security]\ntlsPort=8443\n":              "tlsCert",
		"[security]\nallowPlaintext=false\n":      "allowPlaintext",
		"[security]\nanonymous=a b\n":             "anonymous",
		"[security]\nanonymous=guest\n":           "anonymous",
		"[security]\nusersFile=u\nusersZK=true\n": "usersZK",
		"[security]\ntlsPrt=1\n":                  "tlsPort",
		"[securty]\n":                             "security",
		"[zookeeper]\nzk.zkAuth=nopassword\n":     "zk.zkAuth",
		"[security]\nreplicationUser=x\n":         "replicationUser",
		"[security]\nauthFailRate=0\n":            "authFailRate",
	} {
		_, err := Parse([]byte("[system]\nbrokerId=1\n"+bad+"[topic=t]\n"), "x.ini")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
