package declared

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

// urlTemplate is a declared request's URL: a fixed base (scheme, host and
// port, from the file or from one {env.*} variable), then path segments and
// query values that placeholders fill whole. Arguments can never reach the
// scheme, the host or the port: the base holds no argument, and a
// placeholder's text is escaped into its segment or value.
type urlTemplate struct {
	raw string
	// baseEnv is the variable holding the base, or "" for a literal base.
	baseEnv string
	// base is the literal base, or the variable's value once resolved.
	base string
	// segments are the path's segments after the base; each is literal
	// text or exactly one placeholder.
	segments []*effectfile.Template
	query    []queryParam
}

type queryParam struct {
	name  string
	value *effectfile.Template
}

var literalBaseRE = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#{}]+)`)

// parseURLTemplate parses a declared URL. lookup allows {intent.created_at}.
func parseURLTemplate(raw string, lookup bool) (*urlTemplate, error) {
	u := &urlTemplate{raw: raw}
	var rest string
	switch {
	case strings.HasPrefix(raw, "{env."):
		end := strings.IndexByte(raw, '}')
		if end < 0 {
			return nil, fmt.Errorf("an unclosed %q", "{")
		}
		ph, err := effectfile.ParsePlaceholder(raw[1:end], false)
		if err != nil {
			return nil, err
		}
		u.baseEnv = ph.Name
		rest = raw[end+1:]
	default:
		m := literalBaseRE.FindString(raw)
		if m == "" {
			return nil, fmt.Errorf("must start with a literal base (https://host) or one {env.NAME} holding it: arguments never choose the scheme, host or port")
		}
		u.base = m
		rest = raw[len(m):]
		if err := checkBase(u.base, false); err != nil {
			return nil, err
		}
	}
	if strings.Contains(rest, "#") {
		return nil, fmt.Errorf("must not have a fragment")
	}
	path, query, hasQuery := strings.Cut(rest, "?")
	if path != "" && !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("the path must start with / right after the base: text glued to the base could change its host")
	}
	if path != "" {
		for _, seg := range strings.Split(path[1:], "/") {
			t, err := effectfile.ParseTemplate(seg, lookup)
			if err != nil {
				return nil, err
			}
			if len(t.Placeholders()) > 0 && t.Single() == nil {
				return nil, fmt.Errorf("path segment %q: a placeholder fills a whole path segment, nothing else", seg)
			}
			u.segments = append(u.segments, t)
		}
	}
	if hasQuery && query != "" {
		for _, pair := range strings.Split(query, "&") {
			name, value, _ := strings.Cut(pair, "=")
			nt, err := effectfile.ParseTemplate(name, lookup)
			if err != nil {
				return nil, err
			}
			if len(nt.Placeholders()) > 0 || name == "" {
				return nil, fmt.Errorf("query parameter %q: a name is literal text", pair)
			}
			vt, err := effectfile.ParseTemplate(value, lookup)
			if err != nil {
				return nil, err
			}
			if len(vt.Placeholders()) > 0 && vt.Single() == nil {
				return nil, fmt.Errorf("query parameter %q: a placeholder fills a whole query value, nothing else", pair)
			}
			u.query = append(u.query, queryParam{name: nt.Parts[0].Literal, value: vt})
		}
	}
	return u, nil
}

// resolveBase reads the base from env (a variable base) and checks it.
// loopbackOnly refuses any host but a loopback one (the sandbox, the demo).
func (u *urlTemplate) resolveBase(env map[string]string, loopbackOnly bool) error {
	if u.baseEnv != "" {
		u.base = strings.TrimSuffix(env[u.baseEnv], "/")
		if err := checkBase(u.base, true); err != nil {
			return fmt.Errorf("{env.%s}: %w", u.baseEnv, err)
		}
	}
	if loopbackOnly {
		b, _ := url.Parse(u.base)
		if b == nil || !effectfile.IsLoopback(b.Hostname()) {
			return fmt.Errorf("the sandbox sends declared effects only to a loopback host, not %q", hostOf(u.base))
		}
	}
	return nil
}

// checkBase checks a base: an absolute URL, https unless its host is
// loopback, with no query or fragment (and, from a variable, no path beyond
// a prefix, which is allowed: https://host/api).
func checkBase(base string, fromEnv bool) error {
	b, err := url.Parse(base)
	if err != nil || b.Host == "" || (b.Scheme != "https" && b.Scheme != "http") {
		return fmt.Errorf("the base must be an absolute http(s) URL")
	}
	if b.RawQuery != "" || b.Fragment != "" || strings.ContainsAny(base, "?#") {
		return fmt.Errorf("the base must have no query or fragment")
	}
	if b.User != nil {
		return fmt.Errorf("the base must hold no user information (use a header)")
	}
	if b.Scheme == "http" && !effectfile.IsLoopback(b.Hostname()) {
		return fmt.Errorf("the base must be https unless its host is loopback (%s)", b.Hostname())
	}
	if !fromEnv && b.Path != "" {
		return fmt.Errorf("the base must end at its host")
	}
	return nil
}

func hostOf(base string) string {
	if b, err := url.Parse(base); err == nil {
		return b.Host
	}
	return "?"
}

// render builds the URL for one attempt. A placeholder's value that cannot
// fill a path segment (empty, "." or "..") and an absent argument in the
// path are *effectfile.InvalidArgsError; an absent argument in a query value drops
// the parameter.
func (u *urlTemplate) render(rc *effectfile.RenderCtx) (string, error) {
	var b strings.Builder
	b.WriteString(u.base)
	for _, seg := range u.segments {
		b.WriteByte('/')
		ph := seg.Single()
		if ph == nil {
			for _, p := range seg.Parts {
				b.WriteString(p.Literal)
			}
			continue
		}
		s, ok, err := seg.RenderString(rc)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", &effectfile.InvalidArgsError{Msg: fmt.Sprintf("%s is absent, and a path segment of %s needs it", ph.Text, u.raw)}
		}
		if s == "" || s == "." || s == ".." {
			return "", &effectfile.InvalidArgsError{Msg: fmt.Sprintf("%s cannot fill a path segment: %q", ph.Text, s)}
		}
		b.WriteString(url.PathEscape(s))
	}
	sep := byte('?')
	for _, q := range u.query {
		s, ok, err := q.value.RenderString(rc)
		if err != nil {
			return "", err
		}
		if !ok {
			continue
		}
		b.WriteByte(sep)
		sep = '&'
		b.WriteString(url.QueryEscape(q.name))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(s))
	}
	return b.String(), nil
}

// placeholders returns every placeholder of the URL, the base's included.
func (u *urlTemplate) placeholders() []*effectfile.Placeholder {
	var phs []*effectfile.Placeholder
	if u.baseEnv != "" {
		phs = append(phs, &effectfile.Placeholder{Kind: effectfile.KindEnv, Name: u.baseEnv, Text: "{env." + u.baseEnv + "}"})
	}
	for _, s := range u.segments {
		phs = append(phs, s.Placeholders()...)
	}
	for _, q := range u.query {
		phs = append(phs, q.value.Placeholders()...)
	}
	return phs
}
