package ha

import "errors"

// StartElection runs the election of cfg's broker group until stop is
// called. Placeholder until the election lands (failover replaces this file).
func StartElection(cfg ElectionConfig) (stop func(), err error) {
	return nil, errors.New("ha: autoFailover is not implemented yet")
}
