package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-dev/outbox/internal/pgcluster"
)

// TestRestoreFromPgBackRest is TestRestoreFromBackup with the backups an
// operator takes: Debian's pgBackRest, a stanza on a local repository, WAL
// archived by archive-push while the intents run, a full backup taken while
// the first ones run, and each restore a point-in-time one (pgbackrest
// restore --type=time), followed by outboxd recover on the second. The same
// counts hold.
func TestRestoreFromPgBackRest(t *testing.T) {
	t.Parallel()
	bin := requireOperatorTool(t, "pgbackrest", "pgbackrest")
	runRestoreFromBackup(t, &pgBackRestMethod{bin: bin})
}

// pgBackRestMethod backs up and restores with pgBackRest.
type pgBackRestMethod struct {
	bin string
	dir string
}

// stanza is the pgBackRest stanza of the test's cluster.
const stanza = "outbox"

func (m *pgBackRestMethod) name() string { return "pgBackRest" }

func (m *pgBackRestMethod) config() string { return filepath.Join(m.dir, "pgbackrest.conf") }

// command runs pgbackrest with the test's configuration, as the postgres
// user when the test runs as root (as archive_command does).
func (m *pgBackRestMethod) command(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(m.bin, append([]string{"--config=" + m.config(), "--stanza=" + stanza}, args...)...)
	asPostgres(t, cmd, m.dir)
	return cmd
}

func (m *pgBackRestMethod) archiveSettings(t *testing.T) []string {
	m.dir = operatorDir(t, "pgbackrest-")
	// archive-push fails until prepare writes the configuration (it needs
	// the data directory's path); PostgreSQL retries a failed segment, and
	// none is complete before then.
	return []string{"archive_mode=on",
		fmt.Sprintf("archive_command=%s --config=%s --stanza=%s archive-push %%p", m.bin, m.config(), stanza)}
}

func (m *pgBackRestMethod) prepare(t *testing.T, primary *pgcluster.Cluster) {
	writeOwned(t, m.config(), fmt.Sprintf(`[global]
repo1-path=%[1]s/repo
repo1-retention-full=1
log-path=%[1]s
lock-path=%[1]s
log-level-console=warn
log-level-file=info
start-fast=y
compress-type=none

[%[2]s]
pg1-path=%[3]s
pg1-socket-path=%[4]s
pg1-port=%[5]d
pg1-user=postgres
`, m.dir, stanza, primary.DataDir(), primary.SocketDir(), pgcluster.SocketPort), 0o600)
	out, err := m.command(t, "stanza-create").CombinedOutput()
	require.NoError(t, err, "pgbackrest stanza-create: %s", out)
}

func (m *pgBackRestMethod) backup(t *testing.T, _ *pgcluster.Cluster) error {
	out, err := m.command(t, "backup", "--type=full").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbackrest backup: %w\n%s", err, out)
	}
	// pgBackRest keeps a backup's stop time, and reads a time target, in
	// whole seconds, and restores to a time only from a backup that
	// stopped before it ("unable to find backup set with stop time less
	// than"): the restore point must fall in a later second.
	time.Sleep(1100 * time.Millisecond)
	return nil
}

func (m *pgBackRestMethod) restore(t *testing.T, _ int, primary *pgcluster.Cluster, point time.Time) *pgcluster.Cluster {
	b, err := primary.NewRestoreTarget()
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	// The restore writes recovery.signal and the recovery settings
	// (restore_command running archive-get, the target) into the copy.
	out, err := m.command(t, "restore", "--type=time", "--target="+point.UTC().Format("2006-01-02 15:04:05.999999")+"+00",
		"--target-action=promote", "--pg1-path="+b.DataDir()).CombinedOutput()
	require.NoError(t, err, "pgbackrest restore: %s", out)
	require.NoError(t, b.StartRecovery(context.Background()))
	return b
}
