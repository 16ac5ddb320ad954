package broker

import (
	"syscall"

	"github.com/metaqgo/metaq/protocol"
)

// appendDiskStats adds dataPath's file system usage to `stats` (metaq
// additions: disk_free and disk_total in bytes, free as seen by unprivileged
// users), so dashboards and `metaq health` see every broker's disk through
// the text protocol.
func appendDiskStats(b []byte, dataPath string) []byte {
	if dataPath == "" {
		return b
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dataPath, &fs); err != nil {
		return b
	}
	b = protocol.AppendStatInt(b, "disk_free", int64(fs.Bavail)*int64(fs.Bsize))
	b = protocol.AppendStatInt(b, "disk_total", int64(fs.Blocks)*int64(fs.Bsize))
	return b
}
