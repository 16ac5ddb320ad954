// Command benchtable reads benchkit.Result JSON lines (from the files named,
// or stdin) and prints the comparison table: one row per workload, one
// column per system, peers as ratios to the base system (metaq).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/metaqgo/metaq/benchkit"
)

func main() {
	base := flag.String("base", "metaq", "system the others are compared with (ratio = base / peer)")
	flag.Parse()
	var rs []benchkit.Result
	read := func(name string, r io.Reader) {
		got, err := benchkit.ReadResults(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", name, err)
			os.Exit(1)
		}
		rs = append(rs, got...)
	}
	if flag.NArg() == 0 {
		read("stdin", os.Stdin)
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		read(name, f)
		f.Close()
	}
	if err := benchkit.WriteTable(os.Stdout, rs, *base); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}
