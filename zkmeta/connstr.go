package zkmeta

import (
	"fmt"
	"net"
	"strings"
)

// ParseConnectString splits a ZooKeeper connect string in the Java client's form,
// "host1:2181,host2:2181/optional/chroot", into server addresses (a missing port means 2181) and
// the chroot ("" when there is none, else "/a/b" without a trailing slash).
//
// go-zookeeper has no chroot support, so Client prefixes every path with the chroot itself.
func ParseConnectString(s string) (servers []string, chroot string, err error) {
	s = strings.TrimSpace(s)
	hosts := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		hosts, chroot = s[:i], s[i:]
		if chroot, err = normalizeChroot(chroot); err != nil {
			return nil, "", fmt.Errorf("zkmeta: connect string %q: %w", s, err)
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			if strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "[") { // bare IPv6
				h = "[" + h + "]"
			}
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2181")
		}
		servers = append(servers, h)
	}
	if len(servers) == 0 {
		return nil, "", fmt.Errorf("zkmeta: connect string %q names no server", s)
	}
	return servers, chroot, nil
}

func normalizeChroot(c string) (string, error) {
	c = strings.TrimSpace(c)
	if c == "" || c == "/" {
		return "", nil
	}
	if !strings.HasPrefix(c, "/") {
		c = "/" + c
	}
	c = strings.TrimRight(c, "/")
	for _, seg := range strings.Split(c[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("bad chroot %q", c)
		}
	}
	return c, nil
}
