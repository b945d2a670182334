package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/effectset"
	"github.com/outbox-dev/outbox/internal/mcpserver"
	"github.com/outbox-dev/outbox/internal/upstream"
)

var (
	cmdEffects = &command{
		name: "effects",
		args: "check|list|pin",
		doc:  `Checks a file of declared HTTP effects and MCP upstreams, lists the effects a configuration enables, or pins the upstreams' tools.`,
	}
	cmdEffectsCheck = &command{
		name: "effects check",
		args: "FILE [--no-env]",
		doc: `Validates a file of declared HTTP effects (OUTBOX_EFFECTS_FILE) offline, as
serve would load it, and prints each effect's guarantee, MCP tool and args
schema. Secrets are never printed: URLs and headers are shown as declared,
{env.NAME} and all. With --no-env the {env.*} variables are not read (and a
base URL taken from one is not checked). Exits 0 when the file is valid, 1
with one line naming the file, line, effect and field otherwise.`,
	}
	cmdEffectsPin = &command{
		name: "effects pin",
		args: "[FILE]",
		doc: `Connects to every MCP upstream of the effects file (FILE, else
OUTBOX_EFFECTS_FILE), lists its tools, and writes the lock
(OUTBOX_EFFECTS_LOCK, default FILE.lock): per tool its upstream name,
description, input schema, annotations and classification (recorded under
which guarantee, or pass-through). Prints the same as a table, and warns
about every at_most_once tool without outcome rules. The only command that
needs the upstreams; serve, mcp and enqueue read the lock. Exits 1, writing
nothing, when a tool cannot be mirrored (a name taken, a schema outbox
cannot take) or a declaration does not fit the upstream's schema.`,
	}
	cmdEffectsList = &command{
		name: "effects list",
		args: "[--json]",
		doc: `Prints the effects the configuration (the environment, OUTBOX_EFFECTS_FILE
included) enables, built-in and declared: name, guarantee, dedupe window,
MCP tool and where it came from. Nothing is sent and no database is needed.`,
	}
)

func (a *app) effects(ctx context.Context, args []string) error {
	return a.subcommand(ctx, cmdEffects, args, map[string]func(context.Context, []string) error{
		"check": a.effectsCheck,
		"list":  a.effectsList,
		"pin":   a.effectsPin,
	})
}

// effectCheck is one effect as effects check prints it.
type effectCheck struct {
	Name         string          `json:"name"`
	Guarantee    string          `json:"guarantee"`
	DedupeWindow string          `json:"dedupe_window,omitempty"`
	Tool         string          `json:"tool"`
	URL          string          `json:"url"`
	Declaration  string          `json:"declaration_sha256"`
	ArgsSchema   json.RawMessage `json:"args_schema"`
}

func (a *app) effectsCheck(ctx context.Context, args []string) error {
	fset := newFlagSet(cmdEffectsCheck)
	noEnv := fset.Bool("no-env", false, "do not read the {env.*} variables")
	positional, err := a.parse(cmdEffectsCheck, fset, args, 1, 1)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(ctx, a.lookuper)
	if err != nil {
		return err
	}
	file, err := effectset.LoadFile(effectSetConfig(cfg, nil, nil), positional[0], *noEnv, nil)
	if err != nil {
		return err
	}
	effs := file.Effects
	for _, e := range effs {
		out := effectCheck{Name: e.Name(), Guarantee: string(e.Guarantee()), Tool: e.Tool(), URL: e.URLTemplate(),
			Declaration: e.DeclarationSHA256(), ArgsSchema: e.ArgsSchema()}
		if e.Guarantee() == effects.GuaranteeDeduplicated {
			out.DedupeWindow = e.DedupeWindow().String()
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s\n", b)
	}
	if len(file.Upstreams) == 0 {
		fmt.Fprintf(a.stdout, "%s: %d effects, valid\n", positional[0], len(effs))
		return nil
	}
	// Against the lock, when there is one: markers, key_arg and look-ups
	// against the pinned schemas.
	lockPath := effectset.LockPath(cfg.EffectsLock, positional[0])
	lock, err := upstream.ReadLock(lockPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(a.stdout, "%s: %d effects, %d upstreams, valid offline (no lock %s: outboxd effects pin writes it)\n", positional[0], len(effs), len(file.Upstreams), lockPath)
		return nil
	case err != nil:
		return err
	}
	if _, problems := upstream.Repin(file, lock, effectset.TakenNames()); len(problems) > 0 {
		return fmt.Errorf("%s against %s:\n  %s", positional[0], lockPath, strings.Join(problems, "\n  "))
	}
	catalog, err := upstream.Bind(file, lock, &upstream.BindConfig{EffectsPath: positional[0], LockPath: lockPath})
	if err != nil {
		return err
	}
	defer catalog.Close()
	for _, r := range cfg.ApprovalRules() {
		for _, t := range catalog.Recorded {
			if t.Name() != r.Effect {
				continue
			}
			numeric := r.Op == ">" || r.Op == ">=" || r.Op == "<" || r.Op == "<="
			if err := t.CheckApprovalRule(r.Arg, numeric); err != nil {
				return &ConfigError{Var: envName("Approval"), Message: "rule " + r.String() + ": " + err.Error()}
			}
		}
	}
	for _, t := range catalog.Recorded {
		b, err := json.MarshalIndent(effectCheck{Name: t.Name(), Guarantee: string(t.Guarantee()), Tool: t.Tool(),
			URL: "mcp: " + t.UpstreamName() + "/" + t.UpstreamTool(), Declaration: t.DeclarationSHA256(), ArgsSchema: t.ArgsSchema()}, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s\n", b)
	}
	fmt.Fprintf(a.stdout, "%s: %d effects, %d upstreams (%d recorded tools, %d pass-through), valid against %s\n",
		positional[0], len(effs), len(file.Upstreams), len(catalog.Recorded), len(catalog.Passthrough), lockPath)
	return nil
}

func (a *app) effectsPin(ctx context.Context, args []string) error {
	fset := newFlagSet(cmdEffectsPin)
	positional, err := a.parse(cmdEffectsPin, fset, args, 0, 1)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(ctx, a.lookuper)
	if err != nil {
		return err
	}
	path := cfg.EffectsFile
	if len(positional) == 1 {
		path = positional[0]
	}
	if path == "" {
		return &usageError{cmd: cmdEffectsPin.name, msg: "no effects file: name one, or set OUTBOX_EFFECTS_FILE"}
	}
	file, err := effectset.LoadFile(effectSetConfig(cfg, nil, nil), path, false, nil)
	if err != nil {
		return err
	}
	if len(file.Upstreams) == 0 {
		return fmt.Errorf("%s declares no upstreams: nothing to pin", path)
	}
	lock, problems, err := upstream.PinFile(ctx, file, effectset.TakenNames(), version())
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tTOOL\tMIRRORED\tCLASS\tGUARANTEE")
	for _, u := range file.Upstreams {
		for _, lt := range lock.Upstreams[u.Name()].Tools {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.Name(), lt.Name, orDash(lt.Mirrored), lt.Class, orDash(string(lt.Guarantee)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range file.Upstreams {
		for _, lt := range lock.Upstreams[u.Name()].Tools {
			if lt.Class == upstream.ClassRecorded && lt.Guarantee == effects.GuaranteeAtMostOnce && !u.HasOutcomeRules(lt.Name) {
				fmt.Fprintf(a.stderr, "warning: upstream %s tool %s is at_most_once without outcome rules: every isError answer and every lost answer ends unknown for an operator\n", u.Name(), lt.Name)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("nothing pinned:\n  %s", strings.Join(problems, "\n  "))
	}
	lockPath := effectset.LockPath(cfg.EffectsLock, path)
	if err := upstream.WriteLock(lockPath, lock); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "pinned %d upstreams into %s\n", len(file.Upstreams), lockPath)
	return nil
}

// effectListed is one effect as effects list prints it.
type effectListed struct {
	Name         string `json:"name"`
	Guarantee    string `json:"guarantee"`
	DedupeWindow string `json:"dedupe_window,omitempty"`
	Tool         string `json:"tool,omitempty"`
	Source       string `json:"source"`
}

func (a *app) effectsList(ctx context.Context, args []string) error {
	fs := newFlagSet(cmdEffectsList)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if _, err := a.parse(cmdEffectsList, fs, args, 0, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(ctx, a.lookuper)
	if err != nil {
		return err
	}
	// No database: the sandbox's noop effects record what they do in one,
	// but listing them needs none.
	set, err := newEffectSet(ctx, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer set.Close()
	registry := set.Registry
	tools, err := mcpserver.ToolsFor(registry)
	if err != nil {
		return err
	}
	toolOf := map[string]string{}
	for _, t := range tools {
		toolOf[t.Effect] = t.Name
	}
	list := []effectListed{}
	for _, name := range registry.Names() {
		e, _ := registry.Get(name)
		item := effectListed{Name: name, Guarantee: string(e.Guarantee()), Tool: toolOf[name], Source: "built-in"}
		if _, ok := e.(*declared.Effect); ok {
			item.Source = "declared"
		}
		if t, ok := e.(*upstream.Tool); ok {
			item.Source = "upstream " + t.UpstreamName() + " (" + t.UpstreamTool() + ", recorded)"
		}
		if _, ok := e.(effects.ArgsGuaranteer); ok {
			item.Guarantee += " (depends on args)"
		}
		if e.Guarantee() == effects.GuaranteeDeduplicated {
			item.DedupeWindow = effects.DedupeWindow(e).String()
		}
		list = append(list, item)
	}
	for _, p := range set.Passthrough() {
		list = append(list, effectListed{Name: p.Name(), Guarantee: "pass-through", Tool: p.Name(), Source: "upstream " + p.UpstreamName() + " (pass-through)"})
	}
	if *asJSON {
		return json.NewEncoder(a.stdout).Encode(map[string]any{"effects": list})
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EFFECT\tGUARANTEE\tWINDOW\tMCP TOOL\tSOURCE")
	for _, item := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", item.Name, item.Guarantee, orDash(item.DedupeWindow), orDash(item.Tool), item.Source)
	}
	if len(list) == 0 {
		fmt.Fprintln(tw, "(none: configure a provider, OUTBOX_EFFECTS_FILE or OUTBOX_SANDBOX=true)")
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
