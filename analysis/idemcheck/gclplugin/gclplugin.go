// Package gclplugin registers the idemcheck analyzer as a golangci-lint
// module plugin named idemcheck (docs/cli.md says what to add to
// .custom-gcl.yml and .golangci.yml).
package gclplugin

import (
	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/idemgen/idemgen/analysis/idemcheck"
)

func init() { register.Plugin("idemcheck", New) }

// New returns the plugin; it takes no settings.
func New(any) (register.LinterPlugin, error) { return plugin{}, nil }

type plugin struct{}

func (plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	return []*analysis.Analyzer{idemcheck.Analyzer}, nil
}

// GetLoadMode: the analyzer needs types.
func (plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
