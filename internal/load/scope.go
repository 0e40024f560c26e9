package load

import (
	"go/types"
	"slices"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/txscope"
)

// scopeProgram returns, by package, the txscope Program over the packages
// type-checked from source: those of the handlers, and the packages of
// their module they import, whose functions the check follows. It reports
// their malformed //idem:allow comments.
func scopeProgram(checked []*packages.Package, diags *diag.List) map[*packages.Package]*txscope.Package {
	prog := txscope.NewProgram(nil)
	scopes := map[*packages.Package]*txscope.Package{}
	for _, pkg := range checked {
		if pkg.Types == nil || pkg.TypesInfo == nil {
			continue
		}
		module := ""
		if pkg.Module != nil {
			module = pkg.Module.Path
		}
		scope := prog.Add(pkg.Fset, pkg.Types, pkg.TypesInfo, pkg.Syntax, module)
		diags.Add(scope.AllowDiags()...)
		scopes[pkg] = scope
	}
	return scopes
}

// checkScope reports what the handler of d does outside its transaction:
// the uses of a database handle other than its tx (outside-tx) and the
// calls outside the database (external-call), in every mode but external,
// whose handler runs with no transaction and calls out on purpose. It
// reports whether it found nothing.
func checkScope(pkg *packages.Package, scope *txscope.Package, d annotated, diags *diag.List) bool {
	mode := model.ModeTx
	if o, ok := d.directive.Lookup("mode"); ok {
		if !slices.Contains(modes, o.Value) {
			return true // reported; the mode decides what is checked
		}
		mode = model.Mode(o.Value)
	}
	if mode == model.ModeExternal {
		return true
	}
	fn, _ := pkg.TypesInfo.Defs[d.decl.Name].(*types.Func)
	if fn == nil {
		return true
	}
	sig := fn.Type().(*types.Signature)
	first := 0
	if sig.Recv() != nil {
		first = 1
	}
	var fine []int
	hasTx := false
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		if p, ok := types.Unalias(t).(*types.Pointer); ok && isNamed(p.Elem(), idemPath, "Outbox") {
			fine = append(fine, first+i)
		}
		if isNamed(t, pgxPath, "Tx") {
			fine, hasTx = append(fine, first+i), true
		}
	}
	if !hasTx {
		return true // the signature's error says what to take
	}
	found := scope.Handler(fn, string(mode), fine)
	diags.Add(found...)
	return len(found) == 0
}
