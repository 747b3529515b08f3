package main

import (
	"studio/generator"
	"studio/metrics"
)

// generators builds the catalog's generators, the remote ones reporting
// their provider calls to the metrics, and logs each remote generator
// (the name of its key variable, never the key).
func (m *Main) generators(d *deps) (*generator.Registry, *metrics.Generators, error) {
	specs := d.catalog.Specs()
	var remote []string
	for _, s := range specs {
		if s.Kind != generator.KindEmbedded {
			remote = append(remote, s.ID)
			m.Logger.Info("remote generator", "generator", s.ID, "kind", s.Kind, "base_url", s.BaseURL,
				"model", s.Model, "workflow", s.Workflow, "api_key_env", s.APIKeyEnv)
		}
	}
	var opts generator.Options
	var gm *metrics.Generators
	if d.metrics != nil {
		var err error
		gm, err = d.metrics.Generators(remote, generator.ErrorClasses(), generator.DiscardReasons())
		if err != nil {
			return nil, nil, err
		}
		opts.Observe = gm.Call
	}
	reg, err := generator.NewRegistryWith(opts, specs...)
	return reg, gm, err
}
