package bench

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"
)

// rssSampler records the process's peak resident memory while it runs.
type rssSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	peak int64
}

// sampleRSS starts sampling VmRSS every 50 ms. stop ends it and returns the
// peak (0 without /proc).
func sampleRSS() *rssSampler {
	s := &rssSampler{done: make(chan struct{})}
	s.peak = currentRSS()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ticker := time.NewTicker(50 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-ticker.C:
				s.peak = max(s.peak, currentRSS())
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() int64 {
	s.once.Do(func() {
		close(s.done)
		s.wg.Wait()
		s.peak = max(s.peak, currentRSS())
	})
	return s.peak
}

// currentRSS reads this process's resident memory from /proc/self/status.
func currentRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
