package client

import (
	"context"
	"errors"

	"github.com/metaqgo/metaq/protocol"
)

// ErrAlreadyResent is returned by ResendDeadLetter for a dead letter that
// was resent before (the broker keeps a marker per resent letter).
var ErrAlreadyResent = errors.New("dead letter already resent")

// ResendDeadLetter asks the broker at addr to put the dead letter msgID of
// %DLQ%<group> back on the topic it was first consumed from (`retry <group>
// <msgId> -2`, docs/delay.md). A letter is resent once: a second call
// returns an error wrapping ErrAlreadyResent.
func (a *Admin) ResendDeadLetter(ctx context.Context, addr, group string, msgID int64) (SendResult, error) {
	c, err := a.conn(addr)
	if err != nil {
		return SendResult{}, err
	}
	cl, err := c.do(ctx, kindOther, a.cfg.RequestTimeout, func(dst []byte, op int32) []byte {
		return protocol.AppendRetry(dst, group, msgID, protocol.ResendDeadLetter, op, "")
	})
	if err != nil {
		return SendResult{}, err
	}
	defer putCall(cl)
	switch cl.code {
	case protocol.StatusSuccess:
	case protocol.StatusConflict:
		return SendResult{}, errors.Join(ErrAlreadyResent, brokerErr(addr, cl.code, cl.body))
	default:
		return SendResult{}, brokerErr(addr, cl.code, cl.body)
	}
	id, part, off, err := protocol.ParsePutResult(cl.body)
	if err != nil {
		return SendResult{}, err
	}
	bid, _ := protocol.SplitMsgID(id)
	return SendResult{MsgID: id, Partition: Partition{BrokerID: bid, Partition: int(part)}, Offset: off}, nil
}
