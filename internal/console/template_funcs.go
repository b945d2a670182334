package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// intentURL is the intent page's path. A key is one path segment, escaped;
// "." and ".." are escaped whole, since a router would clean them away.
func intentURL(namespace, key string) string {
	return Prefix + "/intents/" + pathSegment(namespace) + "/" + pathSegment(key)
}

func pathSegment(s string) string {
	if strings.Trim(s, ".") == "" {
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

var funcs = template.FuncMap{
	"intentURL": intentURL,
	"time": func(t any) string {
		switch t := t.(type) {
		case time.Time:
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		case *time.Time:
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return fmt.Sprint(t)
	},
	"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago":      func(t time.Time) string { return duration(time.Since(t)) + " ago" },
	"duration": duration,
	"durationp": func(d *time.Duration) string {
		if d == nil {
			return ""
		}
		return duration(*d)
	},
	"states": func() []string {
		out := make([]string, len(states))
		for i, s := range states {
			out[i] = string(s)
		}
		return out
	},
	"stateLabel": func(s any) string { return strings.ReplaceAll(fmt.Sprint(s), "_", " ") },
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	"riverJob": func(prefix string, id int64) string { return prefix + "/jobs/" + strconv.FormatInt(id, 10) },
}

// duration is d rounded for a person: "3h 12m", "4m 05s", "12s".
func duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// indent is a JSON document indented, numbers as written.
func indent(doc json.RawMessage) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(doc)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(doc)
	}
	return string(out)
}
