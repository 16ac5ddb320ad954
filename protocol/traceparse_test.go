package protocol

import "testing"

func TestParseTrace(t *testing.T) {
	for _, tc := range []struct {
		in     string
		bad    bool
		on     int32
		opaque int32
	}{
		{in: "trace on 5\r\n", on: 1, opaque: 5},
		{in: "TRACE OFF 6\r\n", on: 0, opaque: 6},
		{in: "trace on 0\n", on: 1, opaque: 0},
		{in: "trace maybe 7\r\n", bad: true, opaque: 7},
		{in: "trace on\r\n", bad: true},
		{in: "trace on 1 2\r\n", bad: true, opaque: 2},
		{in: "trace on x\r\n", bad: true},
	} {
		var p Parser
		n := 0
		err := p.Parse([]byte(tc.in), func(c *Command) error {
			n++
			if c.Op != OpTrace || (c.Err != nil) != tc.bad || (tc.opaque != 0 && c.Opaque != tc.opaque) {
				t.Errorf("%q: op %v err %v opaque %d", tc.in, c.Op, c.Err, c.Opaque)
			}
			if !tc.bad && c.Count != tc.on {
				t.Errorf("%q: on = %d", tc.in, c.Count)
			}
			return nil
		})
		if err != nil || n != 1 {
			t.Errorf("%q: %d commands, %v", tc.in, n, err)
		}
	}
	if got := string(AppendTrace(nil, true, 0)) + string(AppendTrace(nil, false, -3)); got != "trace on 0\r\ntrace off -3\r\n" {
		t.Fatalf("AppendTrace: %q", got)
	}
}
