package mcpupstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const listLagFile = "list_lag.json"

// SetListLag makes list_notes lag behind create_note by lag, as an
// upstream whose reads lag its writes (a search index, a replica): a note
// is listed only lag after it was created. Zero lists every note at once.
// It may be called while the server runs, from any process.
func SetListLag(stateDir string, lag time.Duration) error {
	data, err := json.Marshal(lag)
	if err != nil {
		return err
	}
	return withLock(stateDir, syscall.LOCK_EX, func() error {
		return writeFileAtomic(stateDir, listLagFile, data)
	})
}

// readListLag returns the listing's lag, 0 when none was set.
func readListLag(stateDir string) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, listLagFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("error reading the listing's lag: %w", err)
	}
	var lag time.Duration
	if err := json.Unmarshal(data, &lag); err != nil {
		return 0, fmt.Errorf("error decoding the listing's lag: %w", err)
	}
	return lag, nil
}
