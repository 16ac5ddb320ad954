package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/metaqgo/metaq/zkmeta"
)

// OffsetStore keeps a consumer group's positions. The consumer calls Commit
// for every partition whose position moved, then Flush, every
// CommitInterval, when a partition is released and on Close; Load when it
// starts consuming a partition. Both clustering (ZooKeeper, the default) and
// broadcast (a local file) consumers use it, so they share the fetch path.
type OffsetStore interface {
	// Load returns the committed position; ok is false when there is none.
	Load(ctx context.Context, topic string, p Partition) (o Offset, ok bool, err error)
	// Commit records a position (it may be buffered until Flush).
	Commit(ctx context.Context, topic string, p Partition, o Offset) error
	// Flush makes the committed positions durable.
	Flush(ctx context.Context) error
	// Close flushes and releases the store.
	Close() error
}

// FileOffsetStore keeps a group's offsets in one local JSON file,
// <dir>/<group>.json, as MetaQ's LocalOffsetStorage does for broadcast
// consumers. Flush writes a temporary file, fsyncs it and renames it over the
// old one (then fsyncs the directory), so a crash leaves either the old or
// the new file.
type FileOffsetStore struct {
	path  string
	group string

	mu      sync.Mutex
	offsets map[string]map[Partition]Offset
	dirty   bool
}

type offsetFile struct {
	Group   string            `json:"group"`
	Offsets []offsetFileEntry `json:"offsets"`
}

type offsetFileEntry struct {
	Topic     string `json:"topic"`
	Partition string `json:"partition"` // <brokerId>-<partition>
	Offset    int64  `json:"offset"`
	MsgID     int64  `json:"msgId"`
}

// NewFileOffsetStore opens (or starts) dir/<group>.json.
func NewFileOffsetStore(dir, group string) (*FileOffsetStore, error) {
	if err := zkmeta.ValidateName("group", group); err != nil {
		return nil, err
	}
	s := &FileOffsetStore{path: filepath.Join(dir, group+".json"), group: group, offsets: map[string]map[Partition]Offset{}}
	data, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, err
	}
	var f offsetFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("metaq client: offset file %s: %w", s.path, err)
	}
	for _, e := range f.Offsets {
		p, err := zkmeta.ParsePartition(e.Partition)
		if err != nil {
			return nil, fmt.Errorf("metaq client: offset file %s: %w", s.path, err)
		}
		if s.offsets[e.Topic] == nil {
			s.offsets[e.Topic] = map[Partition]Offset{}
		}
		s.offsets[e.Topic][p] = Offset{MsgID: e.MsgID, Offset: e.Offset}
	}
	return s, nil
}

// Path is the file's path.
func (s *FileOffsetStore) Path() string { return s.path }

func (s *FileOffsetStore) Load(_ context.Context, topic string, p Partition) (Offset, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.offsets[topic][p]
	return o, ok, nil
}

func (s *FileOffsetStore) Commit(_ context.Context, topic string, p Partition, o Offset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offsets[topic] == nil {
		s.offsets[topic] = map[Partition]Offset{}
	}
	if old, ok := s.offsets[topic][p]; !ok || old != o {
		s.offsets[topic][p] = o
		s.dirty = true
	}
	return nil
}

func (s *FileOffsetStore) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty {
		return nil
	}
	f := offsetFile{Group: s.group, Offsets: []offsetFileEntry{}}
	for t, ps := range s.offsets {
		for p, o := range ps {
			f.Offsets = append(f.Offsets, offsetFileEntry{Topic: t, Partition: p.String(), Offset: o.Offset, MsgID: o.MsgID})
		}
	}
	sort.Slice(f.Offsets, func(i, j int) bool {
		a, b := f.Offsets[i], f.Offsets[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		pa, _ := zkmeta.ParsePartition(a.Partition)
		pb, _ := zkmeta.ParsePartition(b.Partition)
		return pa.Less(pb)
	})
	data, err := json.MarshalIndent(&f, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.path, append(data, '\n')); err != nil {
		return fmt.Errorf("metaq client: writing offsets: %w", err)
	}
	s.dirty = false
	return nil
}

func (s *FileOffsetStore) Close() error { return s.Flush(context.Background()) }

// writeFileAtomic writes path through a temporary file: write, fsync,
// rename, fsync the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp-" + strconv.Itoa(os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// NewMemoryOffsetStore keeps offsets in memory only: a consumer that starts
// again begins at its StartPosition. With Broadcast it makes an "anonymous"
// consumer (tools: `metaq consume` without a group of record).
func NewMemoryOffsetStore() OffsetStore {
	return &memOffsetStore{m: map[partKey]Offset{}}
}

type memOffsetStore struct {
	mu sync.Mutex
	m  map[partKey]Offset
}

func (s *memOffsetStore) Load(_ context.Context, topic string, p Partition) (Offset, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.m[partKey{topic, p}]
	return o, ok, nil
}

func (s *memOffsetStore) Commit(_ context.Context, topic string, p Partition, o Offset) error {
	s.mu.Lock()
	s.m[partKey{topic, p}] = o
	s.mu.Unlock()
	return nil
}

func (s *memOffsetStore) Flush(context.Context) error { return nil }
func (s *memOffsetStore) Close() error                { return nil }
