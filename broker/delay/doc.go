// Package delay is the broker's delay service: delayed and scheduled
// messages, consumer give-back into a group's retry topic with a growing
// delay, and dead-letter queues (docs/delay.md).
//
// Every piece of state is a record in the commit log. A delayed put is
// stored at once as a record of the system topic %SCHEDULE% — partition 0
// for an absolute deliverAt, partition n for delay level n — and when it
// falls due the service appends a copy to its real topic and partition. The
// service's own progress (per-level offsets, the timer's delivered
// watermark) is a %SCHEDULE% record as well (the progress partition), so a
// restart, a crash or a replica resumes from the log. The only side files
// are the timer index (time buckets under <dataPath>/delay/timer), an
// acceleration rebuilt from the %SCHEDULE% records when missing.
//
// Goroutines: one per delay level (each level's partition is FIFO: the
// head is always the next due), and one timer goroutine that owns the
// timer index (indexing, bucket roll, loading, delivering) and writes the
// progress records. Lock rules: Service.mu guards only the published
// statistics snapshot and the seen-topic set; no lock is held across store
// calls.
package delay
