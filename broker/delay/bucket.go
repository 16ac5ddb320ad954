package delay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Timer index on disk (<dataPath>/delay/timer/). It is an acceleration:
// every entry points at a %SCHEDULE% partition-0 record, and the whole
// index can be rebuilt from those records (docs/delay.md).
//
//	s<unix second>   fine bucket: the entries due in [second, second+1s)
//	h<unix second>   coarse bucket: the entries due in the hour starting there
//	index.ck         checkpoint: how far the index is durable
//
// A bucket file is a sequence of 16-byte entries, appended in arrival
// order (not sorted), big-endian:
//
//	off len field
//	  0   8 due      unix ms when the message falls due (max(deliverAt, storeTime))
//	  8   8 msgId    the %SCHEDULE% partition-0 record's id (brokerId<<48 | physical
//	                 offset: read without an index lookup); the top bit set marks a
//	                 roll-forward entry: at `due` the record is re-appended as a new
//	                 %SCHEDULE% record (before retention could remove it), not delivered
//
// Entries carry no checksum of their own: a file whose length is not a
// multiple of 16 has a torn tail, which is cut at startup; an entry whose
// due time lies outside its bucket is skipped; and before delivering, the
// timer reads the record it points at (CRC-checked by the store) and
// checks that its due time matches the entry. Far-future entries sit in
// hour buckets; about ten minutes before an hour starts its file is
// streamed into second buckets (the roll), and only the buckets of the
// next Lookahead are ever loaded into memory.
//
// index.ck is one line `v=1&qi=<offset>&pi=<msgId>&rolled=<unix ms>`
// followed by the 4-byte big-endian CRC-32C of that line, written temp →
// fsync → rename → fsync dir. Every partition-0 record below queue offset qi
// (equivalently: with an id below pi) has its entry durable in a bucket
// file. rolled: the hour boundary below which entries live in second
// buckets.
const (
	entrySize   = 16
	hourMs      = int64(3600 * 1000)
	ckName      = "index.ck"
	ckTempName  = "index.ck.tmp"
	finePrefix  = "s"
	coarsePrefx = "h"
)

// entry is a timer index entry: at due, deliver the record id (or, when
// roll is set, re-append it to %SCHEDULE% — a roll-forward).
type entry struct {
	due, id int64
	roll    bool
}

const rollBit = uint64(1) << 63

func putEntry(b []byte, e entry) {
	binary.BigEndian.PutUint64(b, uint64(e.due))
	id := uint64(e.id)
	if e.roll {
		id |= rollBit
	}
	binary.BigEndian.PutUint64(b[8:], id)
}

func getEntry(b []byte) entry {
	id := binary.BigEndian.Uint64(b[8:])
	return entry{due: int64(binary.BigEndian.Uint64(b)), id: int64(id &^ rollBit), roll: id&rollBit != 0}
}

func fineName(sec int64) string    { return finePrefix + strconv.FormatInt(sec, 10) }
func coarseName(hour int64) string { return coarsePrefx + strconv.FormatInt(hour/1000, 10) }

// parseBucketName returns the kind ('s' or 'h') and the bucket key (second
// for 's', hour start in ms for 'h').
func parseBucketName(name string) (byte, int64, bool) {
	if len(name) < 2 || (name[0] != 's' && name[0] != 'h') {
		return 0, 0, false
	}
	v, err := strconv.ParseInt(name[1:], 10, 64)
	if err != nil || v < 0 {
		return 0, 0, false
	}
	if name[0] == 'h' {
		if (v*1000)%hourMs != 0 {
			return 0, 0, false
		}
		return 'h', v * 1000, true
	}
	return 's', v, true
}

type checkpoint struct{ qi, pi, rolled int64 }

func writeCheckpoint(dir string, ck checkpoint) error {
	line := fmt.Sprintf("v=1&qi=%d&pi=%d&rolled=%d", ck.qi, ck.pi, ck.rolled)
	b := binary.BigEndian.AppendUint32([]byte(line), crc32.Checksum([]byte(line), crc32.MakeTable(crc32.Castagnoli)))
	tmp := filepath.Join(dir, ckTempName)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, ckName)); err != nil {
		return err
	}
	return syncDir(dir)
}

var errBadCheckpoint = errors.New("timer index checkpoint is corrupt")

func readCheckpoint(dir string) (checkpoint, error) {
	b, err := os.ReadFile(filepath.Join(dir, ckName))
	if err != nil {
		return checkpoint{}, err
	}
	if len(b) < 5 {
		return checkpoint{}, errBadCheckpoint
	}
	line, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(line, crc32.MakeTable(crc32.Castagnoli)) != sum || !strings.HasPrefix(string(line), "v=1&") {
		return checkpoint{}, errBadCheckpoint
	}
	qi, ok1 := propInt(line, "qi")
	pi, ok3 := propInt(line, "pi")
	rolled, ok2 := propInt(line, "rolled")
	if !ok1 || !ok2 || !ok3 || qi < 0 || pi < 0 || rolled%hourMs != 0 {
		return checkpoint{}, errBadCheckpoint
	}
	return checkpoint{qi: qi, pi: pi, rolled: rolled}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// bucketSet is the set of bucket files not yet loaded (fine) or rolled
// (coarse), with their entry counts. keys is sorted.
type bucketSet struct {
	count map[int64]int64
	keys  []int64
	total int64
}

func newBucketSet() *bucketSet { return &bucketSet{count: map[int64]int64{}} }

func (b *bucketSet) add(k, n int64) {
	if _, ok := b.count[k]; !ok {
		i := sort.Search(len(b.keys), func(i int) bool { return b.keys[i] >= k })
		b.keys = append(b.keys, 0)
		copy(b.keys[i+1:], b.keys[i:])
		b.keys[i] = k
	}
	b.count[k] += n
	b.total += n
}

func (b *bucketSet) has(k int64) bool { _, ok := b.count[k]; return ok }

func (b *bucketSet) min() (int64, bool) {
	if len(b.keys) == 0 {
		return 0, false
	}
	return b.keys[0], true
}

func (b *bucketSet) remove(k int64) {
	n, ok := b.count[k]
	if !ok {
		return
	}
	delete(b.count, k)
	b.total -= n
	i := sort.Search(len(b.keys), func(i int) bool { return b.keys[i] >= k })
	b.keys = append(b.keys[:i], b.keys[i+1:]...)
}

// entryHeap is a min-heap of entries by due time (then offset): the
// in-memory window of the timer. Typed (no container/heap boxing).
type entryHeap []entry

func (h entryHeap) less(i, j int) bool {
	return h[i].due < h[j].due || (h[i].due == h[j].due && h[i].id < h[j].id)
}

func (h *entryHeap) push(e entry) {
	*h = append(*h, e)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a.less(i, p) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *entryHeap) pop() entry {
	a := *h
	e := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && a.less(l, m) {
			m = l
		}
		if r < n && a.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	if cap(a) > 4096 && len(a) < cap(a)/4 { // give memory back after a burst
		*h = append(make(entryHeap, 0, cap(a)/2), a...)
	}
	return e
}
