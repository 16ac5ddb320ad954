package conf

import (
	"net"
	"strings"
)

// DefaultHostName returns the address a broker advertises when hostName is
// empty: like MetaQ (which took "the local IP"), the first IPv4 address of
// an interface that is up and not a loopback, skipping link-local addresses
// (169.254/16) and virtual bridges (docker*, br-*, veth*, virbr*, cni*,
// flannel*, cali*); "127.0.0.1" when there is none (an offline laptop).
func DefaultHostName() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifi := range ifaces {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 || virtualInterface(ifi.Name) {
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			var ip net.IP
			switch v := a.(type) {
			case *net.IPNet:
				ip = v.IP
			case *net.IPAddr:
				ip = v.IP
			}
			ip4 := ip.To4()
			if ip4 == nil || ip4.IsLoopback() || ip4.IsLinkLocalUnicast() || ip4.IsUnspecified() {
				continue
			}
			return ip4.String()
		}
	}
	return "127.0.0.1"
}

func virtualInterface(name string) bool {
	for _, p := range []string{"docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "vmnet", "vboxnet"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
