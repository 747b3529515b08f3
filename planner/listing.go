package planner

import "slices"

// Routes returns the catalog's routes: name -> generator ids in order.
func (c *Static) Routes() map[string][]string {
	out := make(map[string][]string, len(c.routes))
	for name, ids := range c.routes {
		out[name] = slices.Clone(ids)
	}
	return out
}

// SubjectsFor returns the ids of the subjects actor may use, in document
// order: the public ones and those that list the actor.
func (c *Static) SubjectsFor(actor string) []string {
	out := []string{}
	for _, id := range c.order {
		if s := c.subjects[id]; s.Public || slices.Contains(s.Actors, actor) {
			out = append(out, id)
		}
	}
	return out
}
