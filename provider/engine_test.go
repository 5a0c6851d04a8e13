package provider

import "github.com/durafeed/durafeed/engine"

// ev is the provider's event-driven engine, for the tests that read its
// diagnostics; nil in polling mode.
func (p *Provider) ev() *engine.Engine {
	e, _ := p.d.(*engine.Engine)
	return e
}
