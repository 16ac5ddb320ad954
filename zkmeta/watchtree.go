package zkmeta

import "context"

// WatchChildrenData sends p's children with their data (child name → data) now and after every
// change of the children or of any child's data (nil while p does not exist), re-arming the
// watches each time; see the Watch* methods for the channel's rules. For small directories of
// configuration nodes (the online topic configuration, docs/zookeeper.md).
func (c *Client) WatchChildrenData(ctx context.Context, p string) <-chan map[string][]byte {
	full := c.FullPath(p)
	return watch(ctx, c, p, func(r reader) (map[string][]byte, error) {
		kids, err := r.children(full)
		if err != nil || kids == nil {
			return nil, err
		}
		m := make(map[string][]byte, len(kids))
		for _, k := range kids {
			d, ok, err := r.get(join(full, k))
			if err != nil {
				return nil, err
			}
			if ok {
				m[k] = append([]byte{}, d...)
			}
		}
		return m, nil
	})
}

// ConfigTopics is <root>/config/topics, the online topic configuration (a metaq extension).
func (p Paths) ConfigTopics() string { return p.root + "/config/topics" }

// ConfigTopic is <root>/config/topics/<topic>.
func (p Paths) ConfigTopic(topic string) string { return p.ConfigTopics() + "/" + topic }
