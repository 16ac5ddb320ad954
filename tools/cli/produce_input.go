package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// messageSource yields message bodies.
type messageSource func() ([]byte, error) // io.EOF at the end

func (a *App) produceSource(o *produceOpts) (messageSource, func(), error) {
	if len(o.messages) > 0 {
		if o.file != "" {
			return nil, nil, usageErr("use either --message or --file")
		}
		i := 0
		return func() ([]byte, error) {
			if i >= len(o.messages) {
				return nil, io.EOF
			}
			i++
			return []byte(o.messages[i-1]), nil
		}, func() {}, nil
	}
	var r io.Reader = a.Stdin
	closeFn := func() {}
	if (o.file == "" || o.file == "-") && isTerminal(a.Stdin) {
		fmt.Fprintln(a.Stderr, "metaq: reading messages from the terminal, one per line; end with Ctrl-D")
	}
	if o.file != "" && o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return nil, nil, usageErr("--file: %v", err)
		}
		r, closeFn = f, func() { f.Close() }
	}
	if r == nil {
		return nil, nil, usageErr("nothing to send: give --message, --file or stdin")
	}
	if o.whole {
		done := false
		return func() ([]byte, error) {
			if done {
				return nil, io.EOF
			}
			done = true
			return io.ReadAll(r)
		}, closeFn, nil
	}
	br := bufio.NewReaderSize(r, 64<<10)
	return func() ([]byte, error) {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return nil, err
		}
		line = []byte(strings.TrimRight(string(line), "\r\n"))
		return line, nil
	}, closeFn, nil
}
