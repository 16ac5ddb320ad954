package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/metaqgo/metaq/zkmeta"
)

// SQLOffsets keeps consumer offsets in a database table through
// database/sql, as MetaQ's MysqlOffsetStorage did. One row per
// <group, topic, brokerId, partition> holds the message id and the next
// offset (the position, as in ZooKeeper's "<msgId>-<offset>"):
//
//	CREATE TABLE IF NOT EXISTS <table> (
//	  group_name   VARCHAR(255) NOT NULL,
//	  topic        VARCHAR(255) NOT NULL,
//	  broker_id    INTEGER      NOT NULL,
//	  partition_id INTEGER      NOT NULL,
//	  msg_id       BIGINT       NOT NULL,
//	  next_offset  BIGINT       NOT NULL,
//	  updated_ms   BIGINT       NOT NULL,
//	  PRIMARY KEY (group_name, topic, broker_id, partition_id))
//
// Positions only move forward: a Commit below the stored position is
// ignored, so the consumer's periodic commits never undo a CommitWithTx.
// Moving a group back is done in the table itself (UPDATE … SET
// next_offset = …) while its consumers are stopped.
//
// The statements are plain SQL with `?` placeholders (`$n` for PostgreSQL
// drivers), tested with SQLite; docs/client.md shows the exactly-once
// pattern with CommitWithTx. The *sql.DB stays the caller's: Close does not
// close it.
type SQLOffsets struct {
	db    *sql.DB
	table string
	group atomic.Pointer[string] // nil until bound to a consumer group (NewConsumer or ForGroup)
	q     sqlOffsetQueries
}

type sqlOffsetQueries struct {
	load, update, insert, advance, current string
}

// ErrAlreadyCommitted is returned by CommitWithTx when the stored position
// is already past the message: another consumer (after a rebalance) or an
// earlier attempt processed it. Roll the transaction back and return nil
// from the handler.
var ErrAlreadyCommitted = errors.New("metaq client: message already committed")

// SQLOffsetStore returns an offset store on table (created if missing) in
// db. Give it to ConsumerOptions.OffsetStore: the consumer binds it to its
// group. table is a plain or schema-qualified identifier
// ([A-Za-z_][A-Za-z0-9_]*, optionally with one dot).
func SQLOffsetStore(db *sql.DB, table string) (*SQLOffsets, error) {
	if db == nil {
		return nil, errors.New("metaq client: SQLOffsetStore: nil *sql.DB")
	}
	if !validTableName(table) {
		return nil, fmt.Errorf("metaq client: SQLOffsetStore: bad table name %q", table)
	}
	s := &SQLOffsets{db: db, table: table, q: sqlOffsetStatements(table, dollarPlaceholders(db))}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
  group_name   VARCHAR(255) NOT NULL,
  topic        VARCHAR(255) NOT NULL,
  broker_id    INTEGER      NOT NULL,
  partition_id INTEGER      NOT NULL,
  msg_id       BIGINT       NOT NULL,
  next_offset  BIGINT       NOT NULL,
  updated_ms   BIGINT       NOT NULL,
  PRIMARY KEY (group_name, topic, broker_id, partition_id))`); err != nil {
		return nil, fmt.Errorf("metaq client: creating offset table %s: %w", table, err)
	}
	return s, nil
}

func validTableName(t string) bool {
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 64 {
			return false
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// dollarPlaceholders reports whether db's driver wants $1, $2 … (the
// PostgreSQL drivers lib/pq and pgx) instead of ?.
func dollarPlaceholders(db *sql.DB) bool {
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	return strings.Contains(pkg, "lib/pq") || strings.Contains(pkg, "jackc/pgx")
}

func sqlOffsetStatements(table string, dollar bool) sqlOffsetQueries {
	n := 0
	ph := func() string {
		n++
		if dollar {
			return "$" + strconv.Itoa(n)
		}
		return "?"
	}
	key := func() string {
		return "group_name = " + ph() + " AND topic = " + ph() + " AND broker_id = " + ph() + " AND partition_id = " + ph()
	}
	var q sqlOffsetQueries
	n = 0
	q.load = "SELECT msg_id, next_offset FROM " + table + " WHERE " + key()
	n = 0
	q.current = "SELECT next_offset FROM " + table + " WHERE " + key()
	// update: the position moves forward only (Commit).
	n = 0
	q.update = "UPDATE " + table + " SET msg_id = " + ph() + ", next_offset = " + ph() + ", updated_ms = " + ph() + " WHERE " + key() + " AND next_offset < " + ph()
	// advance: CommitWithTx's compare-and-set: only while the message is
	// not behind the stored position.
	n = 0
	q.advance = "UPDATE " + table + " SET msg_id = " + ph() + ", next_offset = " + ph() + ", updated_ms = " + ph() + " WHERE " + key() + " AND next_offset <= " + ph()
	n = 0
	q.insert = "INSERT INTO " + table + " (msg_id, next_offset, updated_ms, group_name, topic, broker_id, partition_id) VALUES (" +
		ph() + ", " + ph() + ", " + ph() + ", " + ph() + ", " + ph() + ", " + ph() + ", " + ph() + ")"
	return q
}

// ForGroup returns a store on the same table bound to group, for code that
// reads or commits a group's offsets without being its consumer.
func (s *SQLOffsets) ForGroup(group string) (*SQLOffsets, error) {
	c := &SQLOffsets{db: s.db, table: s.table, q: s.q}
	if err := c.bindGroup(group); err != nil {
		return nil, err
	}
	return c, nil
}

// Group is the group the store is bound to ("" when unbound).
func (s *SQLOffsets) Group() string {
	if g := s.group.Load(); g != nil {
		return *g
	}
	return ""
}

// bindGroup binds an unbound store to group; NewConsumer calls it, so the
// store given to ConsumerOptions.OffsetStore is the one to pass to
// CommitWithTx. A store serves one group.
func (s *SQLOffsets) bindGroup(group string) error {
	if err := zkmeta.ValidateName("group", group); err != nil {
		return err
	}
	if s.group.CompareAndSwap(nil, &group) || s.Group() == group {
		return nil
	}
	return fmt.Errorf("metaq client: SQL offset store is bound to group %s, not %s", s.Group(), group)
}

// groupName returns the bound group or an error.
func (s *SQLOffsets) groupName() (string, error) {
	g := s.Group()
	if g == "" {
		return "", errors.New("metaq client: SQL offset store not bound to a group (give it to a consumer, or ForGroup)")
	}
	return g, nil
}

// Load returns the stored position of a partition.
func (s *SQLOffsets) Load(ctx context.Context, topic string, p Partition) (Offset, bool, error) {
	group, err := s.groupName()
	if err != nil {
		return Offset{}, false, err
	}
	var o Offset
	err = s.db.QueryRowContext(ctx, s.q.load, group, topic, p.BrokerID, p.Partition).Scan(&o.MsgID, &o.Offset)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Offset{}, false, nil
	case err != nil:
		return Offset{}, false, fmt.Errorf("metaq client: loading offset of %s/%s: %w", topic, p, err)
	}
	return o, true, nil
}

// Commit stores a position at once (moving forward only).
func (s *SQLOffsets) Commit(ctx context.Context, topic string, p Partition, o Offset) error {
	group, err := s.groupName()
	if err != nil {
		return err
	}
	if err = s.upsert(ctx, s.db, group, topic, p, o); err != nil {
		// A concurrent first insert of the same row: the row exists now.
		err = s.upsert(ctx, s.db, group, topic, p, o)
	}
	if err != nil {
		return fmt.Errorf("metaq client: committing offset of %s/%s: %w", topic, p, err)
	}
	return nil
}

type sqlExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// upsert moves the row forward to o, inserting it when missing.
func (s *SQLOffsets) upsert(ctx context.Context, x sqlExecer, group, topic string, p Partition, o Offset) error {
	now := time.Now().UnixMilli()
	res, err := x.ExecContext(ctx, s.q.update, o.MsgID, o.Offset, now, group, topic, p.BrokerID, p.Partition, o.Offset)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	var cur int64
	switch err := x.QueryRowContext(ctx, s.q.current, group, topic, p.BrokerID, p.Partition).Scan(&cur); {
	case err == nil:
		return nil // stored position at or past o
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	_, err = x.ExecContext(ctx, s.q.insert, o.MsgID, o.Offset, now, group, topic, p.BrokerID, p.Partition)
	return err
}

// Flush does nothing: commits are written at once.
func (s *SQLOffsets) Flush(context.Context) error { return nil }

// Close does nothing (the *sql.DB is the caller's).
func (s *SQLOffsets) Close() error { return nil }

// CommitWithTx records, inside the caller's transaction tx, that m has been
// processed: the position of m's partition moves to m.Offset+1 when the
// transaction commits, together with the handler's own writes. A consumer
// restarting (or another one after a rebalance) resumes after m exactly
// when the business write committed: each message's effect is applied once.
//
// It is a compare-and-set: when the stored position is already past m
// (processed by another consumer meanwhile) it returns ErrAlreadyCommitted
// and the transaction must be rolled back. store must be bound to the
// consumer's group: the store given to ConsumerOptions.OffsetStore is, once
// NewConsumer returned (or use ForGroup). See docs/client.md for the pattern.
func CommitWithTx(ctx context.Context, tx *sql.Tx, store *SQLOffsets, m *Message) error {
	if tx == nil || store == nil || m == nil {
		return errors.New("metaq client: CommitWithTx: nil argument")
	}
	group, err := store.groupName()
	if err != nil {
		return err
	}
	s := store
	now := time.Now().UnixMilli()
	res, err := tx.ExecContext(ctx, s.q.advance, m.MsgID, m.Offset+1, now, group, m.Topic, m.Partition.BrokerID, m.Partition.Partition, m.Offset)
	if err != nil {
		return fmt.Errorf("metaq client: CommitWithTx %s/%s@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("metaq client: CommitWithTx %s/%s@%d: %w", m.Topic, m.Partition, m.Offset, err)
	} else if n > 0 {
		return nil
	}
	var cur int64
	switch err := tx.QueryRowContext(ctx, s.q.current, group, m.Topic, m.Partition.BrokerID, m.Partition.Partition).Scan(&cur); {
	case err == nil:
		return fmt.Errorf("%w: %s/%s@%d (stored position %d)", ErrAlreadyCommitted, m.Topic, m.Partition, m.Offset, cur)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("metaq client: CommitWithTx %s/%s@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	if _, err := tx.ExecContext(ctx, s.q.insert, m.MsgID, m.Offset+1, now, group, m.Topic, m.Partition.BrokerID, m.Partition.Partition); err != nil {
		return fmt.Errorf("metaq client: CommitWithTx %s/%s@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	return nil
}
