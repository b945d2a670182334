package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress draws a run's progress bar (on stderr, for outboxd bench):
// rewritten in place on a terminal, one line per lane elsewhere. Its
// Update is a Config.ProgressFunc.
type Progress struct {
	w     io.Writer
	tty   bool
	lanes int

	mu   sync.Mutex
	lane string
	seen int
	last time.Time
}

// NewProgress returns a progress bar on w for a run of lanes lanes (each
// lane's runs count apart).
func NewProgress(w io.Writer, lanes int) *Progress {
	f, ok := w.(*os.File)
	tty := false
	if ok {
		info, err := f.Stat()
		tty = err == nil && info.Mode()&os.ModeCharDevice != 0
	}
	return &Progress{w: w, tty: tty, lanes: lanes}
}

// Update reports that lane has done of total units.
func (p *Progress) Update(lane string, done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lane != p.lane {
		p.lane = lane
		p.seen++
		if !p.tty {
			fmt.Fprintf(p.w, "bench: lane %d of %d: %s, %d units\n", p.seen, p.lanes, lane, total)
		}
	}
	if !p.tty || (done < total && time.Since(p.last) < 100*time.Millisecond) {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := width * done / max(1, total)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] lane %d of %d: %s %d/%d",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), p.seen, p.lanes, lane, done, total)
}

// Finish clears the bar from a terminal, before the report is printed.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
