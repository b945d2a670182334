package upstream

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// PinFile lists every upstream of file and pins it, as `outboxd effects
// pin` does: the lock to write, and the problems that refuse it (a
// mirrored name taken, a declaration the listing contradicts). taken maps
// the names no mirrored tool may take (the built-ins', outbox's tools) to
// what took them; the file's HTTP effects and each pinned tool are added.
// An upstream that cannot be listed is an error naming it.
func PinFile(ctx context.Context, file *File, taken map[string]string, version string) (*Lock, []string, error) {
	taken = withEffects(taken, file)
	lock := &Lock{Version: LockVersion, Upstreams: map[string]*LockedUpstream{}}
	var problems []string
	for _, u := range file.Upstreams {
		conn := NewConn(u, &ConnConfig{Version: version})
		server, listed, err := conn.ListTools(ctx)
		conn.Close()
		if err != nil {
			// The handshake's error ("connection closed: EOF") rarely says
			// why a child failed; what it printed does.
			if lines := conn.StderrTail(); len(lines) > 0 {
				err = fmt.Errorf("%w; its last stderr lines:\n    %s", err, strings.Join(lines, "\n    "))
			}
			return nil, nil, fmt.Errorf("upstream %s (%s): %w", u.Name(), u.Transport(), err)
		}
		entry, p := u.Pin(server, listed, &PinOpts{Taken: taken})
		problems = append(problems, p...)
		lock.Upstreams[u.Name()] = entry
		for _, lt := range entry.Tools {
			if lt.Mirrored != "" && lt.Class != ClassWithdrawn {
				taken[lt.Mirrored] = "upstream " + u.Name() + " tool " + lt.Name
			}
		}
	}
	return lock, problems, nil
}

// Repin classifies a lock's listings again under the file's declarations,
// as PinFile would, without reaching the upstreams: the problems a
// declaration has with the pinned schemas (`outboxd effects check`).
// taken is as for PinFile.
func Repin(file *File, lock *Lock, taken map[string]string) (*Lock, []string) {
	taken = withEffects(taken, file)
	out := &Lock{Version: LockVersion, Upstreams: map[string]*LockedUpstream{}}
	var problems []string
	for _, u := range file.Upstreams {
		lu := lock.Upstreams[u.Name()]
		if lu == nil {
			problems = append(problems, fmt.Sprintf("upstream %s: not in the lock: run outboxd effects pin", u.Name()))
			continue
		}
		var listed []*mcp.Tool
		for _, lt := range lu.Tools {
			listed = append(listed, &mcp.Tool{Name: lt.Name, Description: lt.Description, InputSchema: lt.InputSchema, Annotations: lt.Annotations})
		}
		entry, p := u.Pin(lu.Server, listed, &PinOpts{Taken: taken})
		for _, lt := range entry.Tools {
			if lt.Mirrored != "" && lt.Class != ClassWithdrawn {
				taken[lt.Mirrored] = "upstream " + u.Name()
			}
		}
		out.Upstreams[u.Name()] = entry
		problems = append(problems, p...)
	}
	return out, problems
}

// withEffects returns a copy of taken with the names and tools of file's
// HTTP effects.
func withEffects(taken map[string]string, file *File) map[string]string {
	out := make(map[string]string, len(taken)+2*len(file.Effects))
	for k, v := range taken {
		out[k] = v
	}
	for _, e := range file.Effects {
		out[e.Name()], out[e.Tool()] = "effect "+e.Name(), "effect "+e.Name()
	}
	return out
}
