package zkmeta

// SetBeforeOffsetsMulti makes c's CommitOffsets call f between reading the
// nodes' versions and the multi-op (nil: none). Set it before use.
func SetBeforeOffsetsMulti(c *Client, f func()) { c.beforeOffsetsMulti = f }
