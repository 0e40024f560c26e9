package gclplugin

import (
	"testing"

	"github.com/golangci/plugin-module-register/register"

	"github.com/idemgen/idemgen/analysis/idemcheck"
)

// TestRegistered: golangci-lint finds the plugin by its name, and it gives
// the analyzer with type information.
func TestRegistered(t *testing.T) {
	newPlugin, err := register.GetPlugin("idemcheck")
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlugin(nil)
	if err != nil {
		t.Fatal(err)
	}
	as, err := p.BuildAnalyzers()
	if err != nil || len(as) != 1 || as[0] != idemcheck.Analyzer || p.GetLoadMode() != register.LoadModeTypesInfo {
		t.Errorf("analyzers %v, %v, load mode %q", as, err, p.GetLoadMode())
	}
}
