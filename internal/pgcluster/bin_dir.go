package pgcluster

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// debianBinGlob matches the binary directories of every PostgreSQL version
// installed from Debian/Ubuntu packages, which don't put initdb or pg_ctl on
// PATH.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns the directory holding the initdb and pg_ctl binaries.
//
// It looks for initdb on PATH first, expecting pg_ctl next to it (or next to
// the file it links to). Failing that, it falls back to the highest version
// under /usr/lib/postgresql/*/bin, where Debian and Ubuntu install the
// binaries without putting them on PATH.
func FindBinDir() (string, error) {
	if initdbPath, err := exec.LookPath("initdb"); err == nil {
		candidates := []string{filepath.Dir(initdbPath)}
		if resolved, err := filepath.EvalSymlinks(initdbPath); err == nil {
			candidates = append(candidates, filepath.Dir(resolved))
		}
		for _, dir := range candidates {
			if hasBinaries(dir) {
				return dir, nil
			}
		}
	}

	dirs, err := filepath.Glob(debianBinGlob)
	if err != nil {
		return "", fmt.Errorf("error listing PostgreSQL installations: %w", err)
	}
	// Highest version first, compared numerically so "10" beats "9.6".
	slices.SortFunc(dirs, func(a, b string) int {
		return -compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, dir := range dirs {
		if hasBinaries(dir) {
			return dir, nil
		}
	}

	return "", errors.New("no PostgreSQL binaries found: initdb and pg_ctl are neither on PATH nor in " + debianBinGlob)
}

// compareVersions compares dotted version numbers like "9.6" and "15"
// numerically, part by part. Parts that aren't numbers compare as zero.
func compareVersions(a, b string) int {
	aParts, bParts := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(aParts), len(bParts)) {
		var aNum, bNum int
		if i < len(aParts) {
			aNum, _ = strconv.Atoi(aParts[i])
		}
		if i < len(bParts) {
			bNum, _ = strconv.Atoi(bParts[i])
		}
		if c := cmp.Compare(aNum, bNum); c != 0 {
			return c
		}
	}
	return 0
}

// hasBinaries returns true if dir contains executable initdb and pg_ctl files.
func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}
