package load

import (
	"go/types"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/model"
)

// modelType converts t to the model's type expression.
func (c *checker) modelType(t types.Type, pos diag.Pos) (model.Type, bool) {
	switch t := types.Unalias(t).(type) {
	case *types.Basic:
		return model.Type{Kind: model.Basic, Name: t.Name()}, true
	case *types.Named:
		obj := t.Obj()
		mt := model.Type{Kind: model.Named, Name: obj.Name()}
		if obj.Pkg() != nil {
			if !obj.Exported() && obj.Pkg() != c.pkg.Types {
				c.errorf(pos, "type %s is unexported in package %s and cannot be named in generated code", obj.Name(), obj.Pkg().Path())
				return mt, false
			}
			mt.PkgPath, mt.PkgName = obj.Pkg().Path(), obj.Pkg().Name()
		}
		for i := range t.TypeArgs().Len() {
			a, ok := c.modelType(t.TypeArgs().At(i), pos)
			if !ok {
				return mt, false
			}
			mt.Args = append(mt.Args, a)
		}
		return mt, true
	case *types.Pointer:
		return c.elemType(model.Pointer, t.Elem(), pos)
	case *types.Slice:
		return c.elemType(model.Slice, t.Elem(), pos)
	case *types.Array:
		mt, ok := c.elemType(model.Array, t.Elem(), pos)
		mt.Len = t.Len()
		return mt, ok
	case *types.Map:
		key, ok := c.modelType(t.Key(), pos)
		if !ok {
			return key, false
		}
		mt, ok := c.elemType(model.Map, t.Elem(), pos)
		mt.Key = &key
		return mt, ok
	}
	c.errorf(pos, "type %s cannot be named in generated code; declare a named type for it", c.typeString(t))
	return model.Type{}, false
}

// elemType is a pointer, slice, array or map type of elem.
func (c *checker) elemType(kind model.TypeKind, elem types.Type, pos diag.Pos) (model.Type, bool) {
	e, ok := c.modelType(elem, pos)
	return model.Type{Kind: kind, Elem: &e}, ok
}

// typeString spells t as the package's own code would: local names bare,
// others qualified by package name.
func (c *checker) typeString(t types.Type) string {
	return types.TypeString(t, c.qualifier)
}

func (c *checker) qualifier(p *types.Package) string {
	if p == c.pkg.Types {
		return ""
	}
	return p.Name()
}

// typeName spells a model type as messages name it: pkg.Name or Name.
func typeName(t model.Type) string {
	if t.PkgName != "" {
		return t.PkgName + "." + t.Name
	}
	return t.Name
}

// hasMethod reports whether t or *t has a method called name.
func hasMethod(t types.Type, name string) bool {
	if _, isPtr := t.(*types.Pointer); !isPtr {
		t = types.NewPointer(t)
	}
	return types.NewMethodSet(t).Lookup(nil, name) != nil
}

// isNamed reports whether t is the named type pkgPath.name.
func isNamed(t types.Type, pkgPath, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == pkgPath && n.Obj().Name() == name
}
