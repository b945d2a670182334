package demo

// Where the demo writes, with a live progress line on a terminal.

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// Output is where the demo writes, and its progress line.
type Output struct {
	w   io.Writer
	tty bool
}

// NewOutput returns an Output on w, with a live progress line when w is a
// terminal.
func NewOutput(w io.Writer) *Output { return &Output{w: w, tty: isTerminal(w)} }

// Printf writes to the output.
func (o *Output) Printf(format string, args ...any) { fmt.Fprintf(o.w, format, args...) }

// Table returns a writer that aligns tab-separated columns.
func (o *Output) Table() *tabwriter.Writer { return tabwriter.NewWriter(o.w, 0, 0, 2, ' ', 0) }

// Progress shows what the demo is doing until done is called: on a
// terminal, one line rewritten in place with the time elapsed, erased at the
// end; elsewhere, the line once.
func (o *Output) Progress(what string) (done func()) {
	if !o.tty {
		o.Printf("   ... %s\n", what)
		return func() {}
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		frames := `|/-\`
		for i := 0; ; i++ {
			fmt.Fprintf(o.w, "\r\033[K   %c %s (%.1fs)", frames[i%len(frames)], what, time.Since(start).Seconds())
			select {
			case <-stop:
				fmt.Fprint(o.w, "\r\033[K")
				return
			case <-ticker.C:
			}
		}
	}()
	var once bool
	return func() {
		if !once {
			once = true
			close(stop)
			<-stopped
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
