package zkmeta

import (
	"context"
	"errors"
	"path"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"
)

// Node is one node of a dumped tree.
type Node struct {
	Path      string // chroot-relative
	Ephemeral bool
	Data      []byte
}

// Dump reads the tree below p (p included), sorted by path. A node deleted while the tree is
// walked is left out.
func (c *Client) Dump(ctx context.Context, p string) ([]Node, error) {
	return read(ctx, c, func(r reader) ([]Node, error) {
		var out []Node
		var walk func(full string) error
		walk = func(full string) error {
			d, st, err := c.conn.Get(full)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err != nil {
				return err
			}
			rel := full
			if c.chroot != "" {
				rel = strings.TrimPrefix(full, c.chroot)
				if rel == "" {
					rel = "/"
				}
			}
			out = append(out, Node{Path: rel, Ephemeral: st.EphemeralOwner != 0, Data: d})
			kids, err := r.children(full)
			if err != nil {
				return err
			}
			for _, k := range kids {
				if err := walk(path.Join(full, k)); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(c.FullPath(p)); err != nil {
			return nil, err
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
		return out, nil
	})
}

// FormatDump renders nodes one per line as "<E|P> <path>[ <data>]" (E ephemeral, P persistent),
// the format scripts/zk-dump.sh prints with zkCli.sh.
func FormatDump(nodes []Node) string {
	var b strings.Builder
	for _, n := range nodes {
		if n.Ephemeral {
			b.WriteString("E ")
		} else {
			b.WriteString("P ")
		}
		b.WriteString(n.Path)
		if len(n.Data) > 0 {
			b.WriteByte(' ')
			b.WriteString(strings.ReplaceAll(string(n.Data), "\n", `\n`))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
