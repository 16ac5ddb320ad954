package conf

// PopTopic holds the state of broker-managed delivery (docs/push.md):
// partition 0 done records, partition 1 checkpoints.
const PopTopic = "%POP%"

// Pop holds the broker-managed delivery keys of [system] (docs/push.md).
type Pop struct {
	MaxDeliveries int // maxDeliveries; 0 = 5 (Kafka share groups' delivery limit)
	MaxInflight   int // popMaxInflight; 0 = 2,000,000 per group and partition
	MaxGroups     int // popMaxGroups; 0 = 10,000 groups with delivery state
	SpillAfterMs  int // popSpillAfterMs; 0 = 5000: a sealed time slice older than this goes to the side file
	MemoryMb      int // popMemoryMb; 0 = 32: delivery windows in memory beyond this go to the side file; -1 = no side file
}
