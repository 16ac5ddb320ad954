package cli

import (
	"github.com/metaqgo/metaq/client"
	"github.com/metaqgo/metaq/protocol/filter"
)

// checkWhere refuses a --where expression that does not compile, with its
// position, before anything is contacted.
func checkWhere(o *consumeOpts) error {
	if o.where == "" {
		return nil
	}
	if _, err := filter.Compile(o.where); err != nil {
		return usageErr("--where: %v", err)
	}
	if o.group != "" && o.tag != "" && o.tag != "*" {
		return usageErr("with --group, use --tag or --where, not both (TAGS IN ('a','b') selects tags in an expression)")
	}
	return nil
}

// subscription is what a group member subscribes with: the --where
// expression or the --tag expression.
func (o *consumeOpts) subscription() string {
	if o.where != "" {
		return client.SQL(o.where)
	}
	return o.tag
}
