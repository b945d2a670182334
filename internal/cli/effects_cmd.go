package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/outbox-dev/outbox/effects"
	"github.com/outbox-dev/outbox/effects/declared"
	"github.com/outbox-dev/outbox/internal/mcpserver"
)

var (
	cmdEffects = &command{
		name: "effects",
		args: "check|list",
		doc:  `Checks a file of declared HTTP effects, or lists the effects a configuration enables.`,
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
	fs := newFlagSet(cmdEffectsCheck)
	noEnv := fs.Bool("no-env", false, "do not read the {env.*} variables")
	positional, err := a.parse(cmdEffectsCheck, fs, args, 1, 1)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(ctx, a.lookuper)
	if err != nil {
		return err
	}
	effs, err := loadDeclared(cfg, positional[0], *noEnv, nil)
	if err != nil {
		return err
	}
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
	fmt.Fprintf(a.stdout, "%s: %d effects, valid\n", positional[0], len(effs))
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
	registry, err := newEffectRegistry(cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
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
		if _, ok := e.(effects.ArgsGuaranteer); ok {
			item.Guarantee += " (depends on args)"
		}
		if e.Guarantee() == effects.GuaranteeDeduplicated {
			item.DedupeWindow = effects.DedupeWindow(e).String()
		}
		list = append(list, item)
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
