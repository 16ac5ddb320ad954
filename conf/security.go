package conf

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Security is the [security] section (a metaq extension; docs/security.md).
// Every key is off by default: without the section the broker is MetaQ's
// open broker, and a MetaQ 1.x client sees no difference.
type Security struct {
	TLSPort        int    // tlsPort: TLS listener for the protocol; 0 = none
	TLSCert        string // tlsCert: PEM certificate chain (absolute path)
	TLSKey         string // tlsKey: PEM private key (absolute path)
	TLSClientCA    string // tlsClientCA: PEM CA bundle; set = mutual TLS, clients without a valid certificate are refused
	AllowPlaintext bool   // allowPlaintext, default true: serverPort also serves plain TCP; false = TLS only (tlsPort is then advertised)
	HTTPTLS        bool   // httpTls, default false: dashboardHttpPort serves HTTPS with tlsCert/tlsKey (and tlsClientCA)

	UsersFile string // usersFile: users, hashed secrets and ACLs (watched; reloaded on change)
	UsersZK   bool   // usersZK: read the users from ZooKeeper <zkRoot>/config/users instead (watched)
	// Anonymous is what a connection that did not authenticate may do:
	// "all" (default: everything, as MetaQ), "none" (only auth, version,
	// quit), or the name of a users-file entry whose rights it gets.
	Anonymous string

	AuthFailRate      float64       // authFailRate, default 1: failed attempts per second and address refilled
	AuthFailBurst     int           // authFailBurst, default 5: failed attempts an address may make before it is slowed down
	AuthMaxDelay      time.Duration // authMaxDelayMs, default 2000: longest a slowed attempt waits; beyond, it is refused unchecked
	SignatureWindow   time.Duration // signatureWindowSec, default 300: HTTP signature timestamp skew bound (and replay cache lifetime)
	SessionTTL        time.Duration // sessionTtlSec, default 43200: dashboard login session lifetime
	ReplicationUser   string        // replicationUser: the user a slave authenticates as to its master
	ReplicationSecret string        // replicationSecret: its secret (plain text: protect server.ini)
}

// Anonymous values.
const (
	AnonymousAll  = "all"
	AnonymousNone = "none"
)

// AuthEnabled reports whether users and ACLs are in force (an Authorizer is built).
func (s Security) AuthEnabled() bool {
	return s.UsersFile != "" || s.UsersZK || (s.Anonymous != "" && s.Anonymous != AnonymousAll)
}

// TLSEnabled reports whether the broker serves TLS somewhere.
func (s Security) TLSEnabled() bool { return s.TLSPort > 0 || s.HTTPTLS }

func defaultSecurity() Security {
	return Security{
		AllowPlaintext:  true,
		Anonymous:       AnonymousAll,
		AuthFailRate:    1,
		AuthFailBurst:   5,
		AuthMaxDelay:    2 * time.Second,
		SignatureWindow: 300 * time.Second,
		SessionTTL:      12 * time.Hour,
	}
}

var securityKeys = []keyDef{
	{"tlsPort", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.Security.TLSPort, v) }},
	{"tlsCert", used, "", func(p *parser, c *Config, v string) error { return p.setPath(&c.Security.TLSCert, v) }},
	{"tlsKey", used, "", func(p *parser, c *Config, v string) error { return p.setPath(&c.Security.TLSKey, v) }},
	{"tlsClientCA", used, "", func(p *parser, c *Config, v string) error { return p.setPath(&c.Security.TLSClientCA, v) }},
	{"allowPlaintext", used, "", func(p *parser, c *Config, v string) error { return set(&c.Security.AllowPlaintext, v, parseBool) }},
	{"httpTls", used, "", func(p *parser, c *Config, v string) error { return set(&c.Security.HTTPTLS, v, parseBool) }},
	{"usersFile", used, "", func(p *parser, c *Config, v string) error { return p.setPath(&c.Security.UsersFile, v) }},
	{"usersZK", used, "", func(p *parser, c *Config, v string) error { return set(&c.Security.UsersZK, v, parseBool) }},
	{"anonymous", used, "", func(p *parser, c *Config, v string) error { c.Security.Anonymous = v; return nil }},
	{"authFailRate", used, "", func(p *parser, c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("want a positive number of attempts per second")
		}
		c.Security.AuthFailRate = f
		return nil
	}},
	{"authFailBurst", used, "", func(p *parser, c *Config, v string) error { return setInt(&c.Security.AuthFailBurst, v) }},
	{"authMaxDelayMs", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.Security.AuthMaxDelay, v, time.Millisecond)
	}},
	{"signatureWindowSec", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.Security.SignatureWindow, v, time.Second)
	}},
	{"sessionTtlSec", used, "", func(p *parser, c *Config, v string) error {
		return setDuration(&c.Security.SessionTTL, v, time.Second)
	}},
	{"replicationUser", used, "", func(p *parser, c *Config, v string) error { c.Security.ReplicationUser = v; return nil }},
	{"replicationSecret", used, "", func(p *parser, c *Config, v string) error { c.Security.ReplicationSecret = v; return nil }},
}

const secSection = "security"

func init() { validators = append(validators, validateSecurity) }

func validateSecurity(c *Config, p *problems) {
	s := &c.Security
	if s.TLSPort < 0 || s.TLSPort > 65535 {
		p.bad(secSection, "tlsPort", "%d is out of range 0..65535 (0 = no TLS listener)", s.TLSPort)
	} else if s.TLSPort != 0 && (s.TLSPort == c.System.ServerPort || s.TLSPort == c.System.DashboardHTTPPort) {
		p.bad(secSection, "tlsPort", "%d is also serverPort or dashboardHttpPort", s.TLSPort)
	}
	if s.TLSEnabled() && (s.TLSCert == "" || s.TLSKey == "") {
		p.bad(secSection, "tlsCert", "tlsPort or httpTls needs both tlsCert and tlsKey")
	}
	if !s.AllowPlaintext && s.TLSPort == 0 {
		p.bad(secSection, "allowPlaintext", "false needs a tlsPort (the broker would have no listener)")
	}
	if s.UsersFile != "" && s.UsersZK {
		p.bad(secSection, "usersZK", "set usersFile or usersZK, not both")
	}
	if s.UsersZK && !c.ZK.Enable {
		p.bad(secSection, "usersZK", "needs ZooKeeper (zk.zkEnable=true)")
	}
	if a := s.Anonymous; a != AnonymousAll && a != AnonymousNone && (a == "" || strings.ContainsAny(a, " \t,")) {
		p.bad(secSection, "anonymous", "%q: want all, none or a user name", a)
	} else if a != AnonymousAll && a != AnonymousNone && s.UsersFile == "" && !s.UsersZK {
		p.bad(secSection, "anonymous", "%q names a user, but there is no usersFile or usersZK", a)
	}
	if s.AuthFailBurst < 1 {
		p.bad(secSection, "authFailBurst", "%d is below 1", s.AuthFailBurst)
	}
	if s.AuthMaxDelay < 0 || s.AuthMaxDelay > 30*time.Second {
		p.bad(secSection, "authMaxDelayMs", "%v is out of range 0..30000 ms (a slowed attempt holds its connection's reader)", s.AuthMaxDelay)
	}
	if s.SignatureWindow < time.Second {
		p.bad(secSection, "signatureWindowSec", "%v is below 1 s", s.SignatureWindow)
	}
	if s.SessionTTL < time.Minute {
		p.bad(secSection, "sessionTtlSec", "%v is below 60 s", s.SessionTTL)
	}
	if (s.ReplicationUser == "") != (s.ReplicationSecret == "") {
		p.bad(secSection, "replicationUser", "set replicationUser and replicationSecret together")
	}
	if a := c.ZK.Auth; a != "" {
		if i := strings.IndexByte(a, ':'); i <= 0 || i == len(a)-1 {
			p.bad("zookeeper", "zk.zkAuth", "want user:password")
		}
	}
}
