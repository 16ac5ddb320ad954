package store

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/metaqgo/metaq/protocol"
)

// Key index (`query key`): hash files in the style of RocketMQ's IndexFile,
// built by the dispatcher from the `keys` property (protocol.Keys).
//
//	keyindex/<yyyyMMddHHmmssSSS>   creation time (UTC), bumped by 1 ms if taken
//
// Layout, big-endian; files are sparse (ftruncate), written with pwrite:
//
//	header, 64 bytes:
//	  0  4 magic       "MQKI"
//	  4  4 slots       number of hash slots
//	  8  4 maxEntries  capacity
//	 12  4 entries     entries [0, entries) are valid (updated at checkpoints
//	                   and when the file is sealed)
//	 16  8 beginTime   storeTime of the first entry's record (unix ms)
//	 24  8 endTime     storeTime of the last entry's record
//	 32  8 beginPhys   physical offset of the first entry's record
//	 40  8 endPhys     physical offset of the last entry's record
//	 48  4 sealed      1 once full: the slot table on disk is final
//	 52  8 reserved
//	 60  4 crc         CRC-32C of bytes [0, 60)
//	slots at 64, slots × 4 bytes: number (1-based) of the newest entry whose
//	  keyHash % slots is this slot, 0 = none
//	entries at 64 + 4×slots, maxEntries × 20 bytes:
//	  keyHash(4) physicalOffset(8) timeDelta(4, seconds since beginTime)
//	  prev(4, number of the previous entry in the slot's chain, 0 = end)
//
// keyHash is FNV-1a 32 over topic + "#" + key. The active (last, unsealed)
// file keeps its slot table in memory; it is written when the file is
// sealed, and rebuilt from the entries by recovery. Every hit is verified
// against the record (CRC, topic, keys), so hash collisions and entries left
// pointing at cut or rewritten log bytes are never served; duplicate entries
// (re-dispatch after a crash) are removed by physical offset.
const (
	keyHeaderSize = 64
	keyEntrySize  = 20
	keyMagic      = 0x4D514B49           // "MQKI"
	keyNameLayout = "20060102150405.000" // file names drop the dot
	maxKeyChain   = 1 << 20              // bound on entries walked per file and query
)

type keyHeader struct {
	slots, maxEntries, entries uint32
	beginTime, endTime         int64
	beginPhys, endPhys         int64
	sealed                     bool
}

func (h *keyHeader) encode(b []byte) {
	be := binary.BigEndian
	clear(b[:keyHeaderSize])
	be.PutUint32(b[0:], keyMagic)
	be.PutUint32(b[4:], h.slots)
	be.PutUint32(b[8:], h.maxEntries)
	be.PutUint32(b[12:], h.entries)
	be.PutUint64(b[16:], uint64(h.beginTime))
	be.PutUint64(b[24:], uint64(h.endTime))
	be.PutUint64(b[32:], uint64(h.beginPhys))
	be.PutUint64(b[40:], uint64(h.endPhys))
	if h.sealed {
		be.PutUint32(b[48:], 1)
	}
	be.PutUint32(b[60:], protocol.CRC32C(b[:60]))
}

func decodeKeyHeader(b []byte) (keyHeader, bool) {
	be := binary.BigEndian
	if len(b) < keyHeaderSize || be.Uint32(b[0:]) != keyMagic || be.Uint32(b[60:]) != protocol.CRC32C(b[:60]) {
		return keyHeader{}, false
	}
	h := keyHeader{
		slots: be.Uint32(b[4:]), maxEntries: be.Uint32(b[8:]), entries: be.Uint32(b[12:]),
		beginTime: int64(be.Uint64(b[16:])), endTime: int64(be.Uint64(b[24:])),
		beginPhys: int64(be.Uint64(b[32:])), endPhys: int64(be.Uint64(b[40:])),
		sealed: be.Uint32(b[48:]) == 1,
	}
	if h.slots == 0 || h.maxEntries == 0 || h.entries > h.maxEntries {
		return keyHeader{}, false
	}
	return h, true
}

func (h *keyHeader) entriesOff() int64 { return keyHeaderSize + 4*int64(h.slots) }
func (h *keyHeader) fileSize() int64 {
	return h.entriesOff() + keyEntrySize*int64(h.maxEntries)
}

func keyFileName(t time.Time) string {
	v := t.UTC().Format(keyNameLayout)
	return v[:14] + v[15:]
}

func parseKeyFileName(name string) (time.Time, bool) {
	if len(name) != 17 {
		return time.Time{}, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return time.Time{}, false
		}
	}
	t, err := time.Parse(keyNameLayout, name[:14]+"."+name[14:])
	return t, err == nil
}

func putKeyEntry(b []byte, hash uint32, phys int64, delta int32, prev uint32) {
	be := binary.BigEndian
	be.PutUint32(b[0:], hash)
	be.PutUint64(b[4:], uint64(phys))
	be.PutUint32(b[12:], uint32(delta))
	be.PutUint32(b[16:], prev)
}

func getKeyEntry(b []byte) (hash uint32, phys int64, prev uint32) {
	be := binary.BigEndian
	return be.Uint32(b[0:]), int64(be.Uint64(b[4:])), be.Uint32(b[16:])
}

// keyHash is FNV-1a 32 over topic + "#" + key.
func keyHash(topic, key []byte) uint32 {
	h := uint32(fnvOffset32)
	for _, c := range topic {
		h = (h ^ uint32(c)) * fnvPrime32
	}
	h = (h ^ '#') * fnvPrime32
	for _, c := range key {
		h = (h ^ uint32(c)) * fnvPrime32
	}
	return h
}

const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// appendKeyHashes appends the key hashes of a record's `keys` property
// (protocol.Keys semantics). Plain ASCII values are split in place without
// allocating; escaped or non-ASCII ones go through protocol.Keys.
func appendKeyHashes(dst []uint32, topic, props []byte) []uint32 {
	raw, ok := protocol.PropertyRaw(props, protocol.PropKeys)
	if !ok || len(raw) == 0 {
		return dst
	}
	for _, c := range raw {
		if c == '%' || c == '+' || c >= 0x80 {
			for _, k := range protocol.Keys(props) {
				dst = append(dst, keyHash(topic, []byte(k)))
			}
			return dst
		}
	}
	for i := 0; i < len(raw); {
		for i < len(raw) && asciiSpace(raw[i]) {
			i++
		}
		j := i
		for j < len(raw) && !asciiSpace(raw[j]) {
			j++
		}
		if j > i {
			dst = append(dst, keyHash(topic, raw[i:j]))
		}
		i = j
	}
	return dst
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// keyIndex is the set of key-index files. k.mu guards everything and is held
// across its own pwrite/fsync (a leaf lock: only the dispatcher, checkpoints,
// retention and QueryKey take it).
type keyIndex struct {
	s  *Store
	mu sync.Mutex

	files   []*keyFile // oldest first; the last may be active
	pend    []byte     // entries of the active file not yet written
	dirty   bool       // header of the active file changed since the last sync
	scratch [keyEntrySize]byte
}

type keyFile struct {
	path    string
	f       *os.File
	hdr     keyHeader
	slots   []uint32 // active file only
	count   uint32   // entries in use (active: including pending)
	written uint32   // entries pwritten (active)
}

func (f *keyFile) active() bool { return f.slots != nil }

// openKeyIndex loads the key-index files; the active file's entries at or
// past cut are dropped (they are re-added by re-dispatch) and its slot table
// is rebuilt from its entries.
func openKeyIndex(s *Store, cut int64) (*keyIndex, error) {
	k := &keyIndex{s: s}
	ents, err := os.ReadDir(s.keyDir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var names []string
	for _, e := range ents {
		if _, ok := parseKeyFileName(e.Name()); ok && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for i, name := range names {
		path := filepath.Join(s.keyDir, name)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			k.close()
			return nil, ioError("open key index", err)
		}
		var hb [keyHeaderSize]byte
		_, err = f.ReadAt(hb[:], 0)
		hdr, ok := decodeKeyHeader(hb[:])
		if err != nil || !ok {
			f.Close()
			s.log.Warn("key index: invalid header; file removed (queries lose its keys)", "file", path)
			os.Remove(path)
			continue
		}
		kf := &keyFile{path: path, f: f, hdr: hdr, count: hdr.entries, written: hdr.entries}
		if i == len(names)-1 && !hdr.sealed {
			if err := k.reload(kf, cut); err != nil {
				f.Close()
				k.close()
				return nil, err
			}
		}
		k.files = append(k.files, kf)
	}
	return k, nil
}

// reload rebuilds the active file's slots from its entries below cut.
func (k *keyIndex) reload(kf *keyFile, cut int64) error {
	kf.slots = make([]uint32, kf.hdr.slots)
	buf := make([]byte, 4096*keyEntrySize)
	var n uint32
	for n < kf.count {
		m := min(kf.count-n, 4096)
		if _, err := kf.f.ReadAt(buf[:m*keyEntrySize], kf.hdr.entriesOff()+int64(n)*keyEntrySize); err != nil {
			return ioError("read key index", err)
		}
		for i := uint32(0); i < m; i++ {
			h, phys, _ := getKeyEntry(buf[i*keyEntrySize:])
			if phys >= cut {
				kf.count = n + i
				break
			}
			kf.slots[h%kf.hdr.slots] = n + i + 1
			kf.hdr.endPhys = phys
		}
		if kf.count < n+m {
			break
		}
		n += m
	}
	kf.written = kf.count
	if kf.count != kf.hdr.entries {
		kf.hdr.entries = kf.count
		k.dirty = true
	}
	return nil
}

// add indexes a record's keys (dispatcher).
func (k *keyIndex) add(topic, props []byte, phys, storeTime int64) {
	var arr [16]uint32
	hashes := appendKeyHashes(arr[:0], topic, props)
	if len(hashes) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, h := range hashes {
		if err := k.addLocked(h, phys, storeTime); err != nil {
			k.s.log.Error("key index: cannot add entry", "err", err)
			return
		}
	}
}

func (k *keyIndex) addLocked(h uint32, phys, storeTime int64) error {
	a := k.activeLocked()
	if a == nil || a.count == a.hdr.maxEntries {
		var err error
		if a, err = k.rollLocked(); err != nil {
			return err
		}
	}
	if a.count == 0 {
		a.hdr.beginTime, a.hdr.beginPhys = storeTime, phys
	}
	delta := (storeTime - a.hdr.beginTime) / 1000
	delta = min(max(delta, 0), 1<<31-1)
	slot := h % a.hdr.slots
	putKeyEntry(k.scratch[:], h, phys, int32(delta), a.slots[slot])
	k.pend = append(k.pend, k.scratch[:]...)
	a.count++
	a.slots[slot] = a.count
	a.hdr.endTime, a.hdr.endPhys = storeTime, phys
	k.dirty = true
	return nil
}

func (k *keyIndex) activeLocked() *keyFile {
	if n := len(k.files); n > 0 && k.files[n-1].active() {
		return k.files[n-1]
	}
	return nil
}

// rollLocked seals the active file (if any) and creates a new one.
func (k *keyIndex) rollLocked() (*keyFile, error) {
	if a := k.activeLocked(); a != nil {
		if err := k.writePendingLocked(a); err != nil {
			return nil, err
		}
		sb := make([]byte, 4*len(a.slots))
		for i, v := range a.slots {
			binary.BigEndian.PutUint32(sb[4*i:], v)
		}
		if err := k.s.hooks.pwrite(a.f, sb, keyHeaderSize); err != nil {
			return nil, ioError("write key index slots", err)
		}
		a.hdr.entries, a.hdr.sealed = a.count, true
		if err := k.writeHeaderLocked(a); err != nil {
			return nil, err
		}
		if err := a.f.Sync(); err != nil {
			return nil, ioError("fsync key index", err)
		}
		a.slots = nil
	}
	name := keyFileName(time.Now())
	for _, f := range k.files {
		if last := filepath.Base(f.path); last >= name {
			t, _ := parseKeyFileName(last)
			name = keyFileName(t.Add(time.Millisecond))
		}
	}
	path := filepath.Join(k.s.keyDir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, ioError("create key index", err)
	}
	kf := &keyFile{path: path, f: f, hdr: keyHeader{
		slots: uint32(k.s.cfg.KeyIndexSlots), maxEntries: uint32(k.s.cfg.KeyIndexEntries),
	}}
	kf.slots = make([]uint32, kf.hdr.slots)
	if err := f.Truncate(kf.hdr.fileSize()); err != nil {
		f.Close()
		os.Remove(path)
		return nil, ioError("truncate key index", err)
	}
	if err := k.writeHeaderLocked(kf); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, ioError("fsync key index", err)
	}
	if err := syncDir(k.s.keyDir); err != nil {
		f.Close()
		os.Remove(path)
		return nil, ioError("fsync dir", err)
	}
	k.files = append(k.files, kf)
	return kf, nil
}

func (k *keyIndex) writeHeaderLocked(kf *keyFile) error {
	var b [keyHeaderSize]byte
	kf.hdr.encode(b[:])
	return ioError("write key index header", k.s.hooks.pwrite(kf.f, b[:], 0))
}

func (k *keyIndex) writePendingLocked(a *keyFile) error {
	if len(k.pend) == 0 {
		return nil
	}
	off := a.hdr.entriesOff() + int64(a.written)*keyEntrySize
	if err := k.s.hooks.pwrite(a.f, k.pend, off); err != nil {
		return ioError("write key index", err)
	}
	a.written += uint32(len(k.pend) / keyEntrySize)
	k.pend = k.pend[:0]
	return nil
}

// flush writes the pending entries (end of a dispatch batch).
func (k *keyIndex) flush() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a := k.activeLocked(); a != nil {
		return k.writePendingLocked(a)
	}
	return nil
}

// sync makes the active file's entries durable, then its header (checkpoint).
func (k *keyIndex) sync() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.activeLocked()
	if a == nil || !k.dirty {
		return nil
	}
	if err := k.writePendingLocked(a); err != nil {
		return err
	}
	if err := a.f.Sync(); err != nil {
		return ioError("fsync key index", err)
	}
	a.hdr.entries = a.written
	if err := k.writeHeaderLocked(a); err != nil {
		return err
	}
	if err := a.f.Sync(); err != nil {
		return ioError("fsync key index", err)
	}
	k.dirty = false
	return nil
}

// deleteBelow deletes sealed files whose entries all point below logMin.
func (k *keyIndex) deleteBelow(logMin int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for n < len(k.files) && !k.files[n].active() && k.files[n].hdr.endPhys < logMin {
		n++
	}
	for _, f := range k.files[:n] {
		f.f.Close()
		os.Remove(f.path)
	}
	if n > 0 {
		k.files = slices.Delete(k.files, 0, n)
		_ = syncDir(k.s.keyDir)
	}
}

func (k *keyIndex) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, f := range k.files {
		f.f.Close()
	}
	k.files = nil
}

// lookup walks the chains of hash h, newest file and entry first, calling fn
// with each entry's physical offset until fn returns false.
func (k *keyIndex) lookup(h uint32, logMin int64, fn func(phys int64) bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b [keyEntrySize]byte
	for i := len(k.files) - 1; i >= 0; i-- {
		kf := k.files[i]
		if kf.count == 0 || kf.hdr.endPhys < logMin {
			continue
		}
		slot := h % kf.hdr.slots
		var n uint32
		if kf.active() {
			n = kf.slots[slot]
		} else {
			if _, err := kf.f.ReadAt(b[:4], keyHeaderSize+4*int64(slot)); err != nil {
				return ioError("read key index", err)
			}
			n = binary.BigEndian.Uint32(b[:4])
		}
		for steps := 0; n != 0 && n <= kf.count && steps < maxKeyChain; steps++ {
			var e []byte
			if kf.active() && n > kf.written {
				j := (n - kf.written - 1) * keyEntrySize
				e = k.pend[j : j+keyEntrySize]
			} else {
				if _, err := kf.f.ReadAt(b[:], kf.hdr.entriesOff()+int64(n-1)*keyEntrySize); err != nil {
					return ioError("read key index", err)
				}
				e = b[:]
			}
			eh, phys, prev := getKeyEntry(e)
			if phys < logMin {
				break // the rest of the chain is older
			}
			if eh == h && !fn(phys) {
				return nil
			}
			if prev >= n {
				break // damaged chain
			}
			n = prev
		}
	}
	return nil
}

// QueryKey returns up to max records of topic whose `keys` property holds
// key, newest first; ErrNotFound when there is none. Records are verified
// (CRC, topic, keys) and must be visible (durable in sync mode).
func (s *Store) QueryKey(topic, key string, max int) (*ReadResult, error) {
	if s.isClosed.Load() {
		return nil, ErrClosed
	}
	if max <= 0 || s.keys == nil || key == "" {
		return nil, ErrNotFound
	}
	h := keyHash([]byte(topic), []byte(key))
	s.catchUp(s.clog.appendedLimit()) // keys of every record appended so far are indexed
	vis := s.clog.visibleLimit()
	logMin := s.clog.minPos()
	r := getResult()
	var seen []int64
	err := s.keys.lookup(h, logMin, func(phys int64) bool {
		if phys >= vis || slices.Contains(seen, phys) {
			return true
		}
		seen = append(seen, phys)
		g := s.clog.acquireSegment(phys)
		if g == nil {
			return true
		}
		off := phys - g.base
		rec, n, err := protocol.DecodeRecord(g.data[off:min(g.size, vis-g.base)], 0)
		if err != nil || rec.PhysicalOffset != phys || string(rec.Topic) != topic || !slices.Contains(protocol.Keys(rec.Properties), key) {
			g.release()
			return true
		}
		r.segs = append(r.segs, g)
		r.Bufs = append(r.Bufs, g.data[off:off+int64(n)])
		r.Bytes += n
		r.Count++
		return r.Count < max
	})
	if err != nil || r.Count == 0 {
		r.Release()
		if err != nil {
			return nil, err
		}
		return nil, ErrNotFound
	}
	r.Status = ReadFound
	return r, nil
}
