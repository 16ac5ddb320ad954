package benchkit

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ClockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat
// (100 on every Linux architecture Go supports).
const ClockTicks = 100

// ProcCPUTime returns the user+system CPU time used so far by process pid
// (all its threads), read from /proc/<pid>/stat. Resolution is 10 ms.
func ProcCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// parseProcStat extracts utime+stime (fields 14 and 15) from a stat line.
// The command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("benchkit: malformed /proc stat: no ')'")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("benchkit: malformed /proc stat: %d fields", len(f))
	}
	utime, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("benchkit: malformed /proc stat utime/stime %q %q", f[11], f[12])
	}
	return time.Duration(utime+stime) * (time.Second / ClockTicks), nil
}

// CPUMeter measures the CPU time a process uses between Start and Elapsed.
type CPUMeter struct {
	pid   int
	start time.Duration
}

// StartCPUMeter reads the current CPU time of pid.
func StartCPUMeter(pid int) (*CPUMeter, error) {
	t, err := ProcCPUTime(pid)
	if err != nil {
		return nil, err
	}
	return &CPUMeter{pid: pid, start: t}, nil
}

// Elapsed returns the CPU time pid used since StartCPUMeter.
func (m *CPUMeter) Elapsed() (time.Duration, error) {
	t, err := ProcCPUTime(m.pid)
	if err != nil {
		return 0, err
	}
	return t - m.start, nil
}

// CPUPerMsgUS returns cpu / msgs in microseconds (0 when msgs <= 0).
func CPUPerMsgUS(cpu time.Duration, msgs int64) float64 {
	if msgs <= 0 {
		return 0
	}
	return round(float64(cpu)/1e3/float64(msgs), 3)
}
