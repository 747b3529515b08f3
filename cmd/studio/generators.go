package main

import "studio/generator"

// generatorOptions are what the catalog's generators are built with: the
// remote ones report their provider calls to the metrics. It logs each
// remote generator (the name of its key variable, never the key).
func (m *Main) generatorOptions(d *deps) generator.Options {
	var remote []string
	for _, s := range d.catalog.Specs() {
		if s.Kind != generator.KindEmbedded {
			remote = append(remote, s.ID)
			m.Logger.Info("remote generator", "generator", s.ID, "kind", s.Kind, "base_url", s.BaseURL,
				"model", s.Model, "workflow", s.Workflow, "api_key_env", s.APIKeyEnv)
		}
	}
	var opts generator.Options
	if d.metrics != nil {
		// Registered once per process: startWorkers runs once.
		if gm, err := d.metrics.Generators(remote, generator.ErrorClasses()); err == nil {
			opts.Observe = gm.Call
		} else {
			m.Logger.Warn("generator metrics not registered", "err", err)
		}
	}
	return opts
}
