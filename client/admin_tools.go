package client

import (
	"context"
	"time"

	"github.com/metaqgo/metaq/protocol"
	"github.com/metaqgo/metaq/zkmeta"
)

// FetchAddr is the address to read a broker's partitions from: its master,
// else its lowest-numbered slave ("" when neither is registered). Consumers
// fetch from it; tools use it with the Admin methods that take an address.
func FetchAddr(b zkmeta.BrokerInfo) string { return brokerAddr(b) }

// StatsBody returns the body of a broker's `stats [item]` reply as it came,
// for items whose answer is not STATS lines (`stats config` returns the
// broker's server.ini). Stats parses the same reply.
func (a *Admin) StatsBody(ctx context.Context, addr, item string) ([]byte, error) {
	c, err := a.conn(addr)
	if err != nil {
		return nil, err
	}
	return statsBodyOn(ctx, c, item, a.cfg.RequestTimeout)
}

func statsBodyOn(ctx context.Context, c *brokerConn, item string, timeout time.Duration) ([]byte, error) {
	cl, err := c.do(ctx, kindOther, timeout, func(dst []byte, op int32) []byte {
		return protocol.AppendStats(dst, item, op)
	})
	if err != nil {
		return nil, err
	}
	defer putCall(cl)
	if cl.code != protocol.StatusSuccess {
		return nil, brokerErr(c.addr, cl.code, cl.body)
	}
	return append([]byte(nil), cl.body...), nil
}
