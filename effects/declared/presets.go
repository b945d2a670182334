package declared

import (
	_ "embed"
	"fmt"
	"slices"

	"github.com/goccy/go-yaml"

	"github.com/outbox-dev/outbox/internal/effectfile"
)

//go:embed presets.yaml
var presetsYAML []byte

// PresetInfo is a preset of the catalogue.
type PresetInfo struct {
	// Name is what a declaration names it by ("stripe.refund").
	Name string
	decl effectfile.Map
}

var presets = func() []*PresetInfo {
	var doc any
	if err := yaml.UnmarshalWithOptions(presetsYAML, &doc, yaml.UseOrderedMap()); err != nil {
		panic(fmt.Sprintf("declared: the preset catalogue does not parse: %v", err))
	}
	root, _ := effectfile.Ordered(doc).(effectfile.Map)
	all, _ := root.Get("presets")
	var out []*PresetInfo
	for _, kv := range all.(effectfile.Map) {
		out = append(out, &PresetInfo{Name: kv.Key, decl: kv.Value.(effectfile.Map)})
	}
	return out
}()

// Preset returns the preset called name.
func Preset(name string) (*PresetInfo, bool) {
	i := slices.IndexFunc(presets, func(p *PresetInfo) bool { return p.Name == name })
	if i < 0 {
		return nil, false
	}
	return presets[i], true
}

// Presets returns the catalogue's presets, in the catalogue's order.
func Presets() []*PresetInfo { return slices.Clone(presets) }
