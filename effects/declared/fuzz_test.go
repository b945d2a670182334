package declared

import (
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// FuzzURL builds URLs from any argument: the scheme, host and port are
// always the base's, and the path keeps its segment count.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"x", "../../admin", "a/b", "%2e%2e", "evil.example", "@evil.example", "?q=1#f", ".", "", "a b", "\x00", "ok?x=1&y=2"} {
		f.Add(s)
	}
	tmpl, err := parseURLTemplate("https://api.example.com/v1/{args.a}/items?q={args.a}&k={provider_key}", false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value string) {
		rc := &effectfile.RenderCtx{Args: map[string]any{"a": value}, ProviderKey: "pk"}
		s, err := tmpl.render(rc)
		if err != nil {
			if value == "" || value == "." || value == ".." {
				return
			}
			t.Fatalf("render(%q): %v", value, err)
		}
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("render(%q) gave an unparsable URL %q: %v", value, s, err)
		}
		if u.Scheme != "https" || u.Host != "api.example.com" || u.User != nil || u.Fragment != "" {
			t.Fatalf("render(%q) left the base: %q", value, s)
		}
		if got := strings.Count(u.EscapedPath(), "/"); got != 3 {
			t.Fatalf("render(%q): path %q has %d slashes, want 3", value, u.EscapedPath(), got)
		}
		if got := u.Query().Get("q"); got != value {
			t.Fatalf("render(%q): query value %q", value, got)
		}
		seg := strings.Split(u.EscapedPath(), "/")[2]
		if dec, _ := url.PathUnescape(seg); dec != value {
			t.Fatalf("render(%q): segment %q decodes to %q", value, seg, dec)
		}
	})
}
