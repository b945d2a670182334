package cli

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sethvargo/go-envconfig"
)

// nonEmptyLookuper reports variables set to the empty string as unset.
type nonEmptyLookuper struct{ envconfig.Lookuper }

func (l nonEmptyLookuper) Lookup(key string) (string, bool) {
	v, ok := l.Lookuper.Lookup(key)
	return v, ok && v != ""
}

// loadConfig reads and checks the configuration. A bad value is reported as
// a *ConfigError.
func loadConfig(ctx context.Context, lookuper envconfig.Lookuper) (*Config, error) {
	lookuper = nonEmptyLookuper{lookuper}
	last := &lastKeyLookuper{Lookuper: lookuper}
	var cfg Config
	if err := envconfig.ProcessWith(ctx, &envconfig.Config{Target: &cfg, Lookuper: last}); err != nil {
		// go-envconfig's errors may quote the value, a secret perhaps; name
		// the variable instead, and quote the value only when it is not a
		// secret.
		if field, ok := fieldOfVar(last.key); ok {
			return nil, invalid(lookuper, field)
		}
		return nil, fmt.Errorf("error reading configuration: %w", err)
	}
	if err := cfg.validate(lookuper); err != nil {
		return nil, err
	}
	cfg.lookuper = lookuper
	return &cfg, nil
}

// lastKeyLookuper remembers the last variable looked up. go-envconfig looks
// each field's variable up just before decoding it, and stops at the first
// failure, so when decoding fails the last variable is the one at fault:
// known without reading the library's error text.
type lastKeyLookuper struct {
	envconfig.Lookuper
	key string
}

func (l *lastKeyLookuper) Lookup(key string) (string, bool) {
	l.key = key
	return l.Lookuper.Lookup(key)
}

// fieldOfVar returns the Config field read from the variable name.
func fieldOfVar(name string) (string, bool) {
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		if field := typ.Field(i).Name; envName(field) == name {
			return field, true
		}
	}
	return "", false
}

// invalid is the *ConfigError for the field's variable as the lookuper has
// it.
func invalid(lookuper envconfig.Lookuper, field string) error {
	name := envName(field)
	msg := "expected " + fieldTag(field, "expect")
	if value, ok := lookuper.Lookup(name); ok && fieldTag(field, "secret") != "true" {
		msg += fmt.Sprintf(", got %q", value)
	}
	return &ConfigError{Var: name, Message: msg}
}

// fieldTag returns the tag key of Config's field.
func fieldTag(field, key string) string {
	f, ok := reflect.TypeFor[Config]().FieldByName(field)
	if !ok {
		panic("cli: no Config field " + field)
	}
	return f.Tag.Get(key)
}

// envName returns the variable of Config's field, and envDefault its
// default.
func envName(field string) string {
	name, _, _ := strings.Cut(fieldTag(field, "env"), ",")
	return name
}

func envDefault(field string) string {
	_, opts, _ := strings.Cut(fieldTag(field, "env"), ",")
	_, def, _ := strings.Cut(opts, "default=")
	return def
}

// writeEnvHelp lists the variables, their defaults and meaning.
func writeEnvHelp(w io.Writer) {
	t := reflect.TypeFor[Config]()
	fields := make([]reflect.StructField, t.NumField())
	for i := range fields {
		fields[i] = t.Field(i)
	}
	slices.SortFunc(fields, func(a, b reflect.StructField) int {
		return strings.Compare(envName(a.Name), envName(b.Name))
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fields {
		if envName(f.Name) == "" {
			// The unexported fields: what the variables parse into, and
			// what a command sets itself; no variable of their own.
			continue
		}
		def := envDefault(f.Name)
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", envName(f.Name), def, f.Tag.Get("help"))
	}
	tw.Flush() //nolint:errcheck // the writer's errors are its own
}
