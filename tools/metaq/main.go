// Command metaq is the metaq broker and its command-line tools. Everything is in package
// github.com/metaqgo/metaq/tools/cli; see `metaq --help`.
package main

import (
	"os"

	"github.com/metaqgo/metaq/tools/cli"
)

func main() {
	os.Exit(cli.Main())
}
