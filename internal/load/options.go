package load

import (
	"fmt"
	"slices"
	"time"

	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// The options of //idem:handler. Those in laterOptions belong to the design
// but are not implemented by this version; they are refused with that
// explanation rather than as unknown.
var (
	handlerOptions = []string{"consumer", "key", "table", "retain", "order", "version", "stable", "zero", "fixture"}
	laterOptions   = []string{"mode", "lease"}
)

// options checks the directive's option names and reads the options that
// need no types: consumer=, table= and retain=.
func (c *checker) options(d directive.Directive, h *model.Handler) {
	for _, o := range d.Options {
		switch {
		case slices.Contains(handlerOptions, o.Name):
		case o.Name == "mode":
			// Checked with the signature (mode).
		case slices.Contains(laterOptions, o.Name):
			c.errorf(o.Pos, "option %s= is not supported by this version of idemgen", o.Name)
		default:
			msg := fmt.Sprintf("unknown option %s=", o.Name)
			if s := directive.Suggest(o.Name, append(handlerOptions, laterOptions...)); s != "" {
				msg += fmt.Sprintf(" (did you mean %s=?)", s)
			}
			c.errorf(o.Pos, "%s", msg)
		}
	}

	if o, ok := d.Lookup("consumer"); !ok {
		c.errorf(d.Pos, "%shandler needs consumer=: a stable name such as billing.charge", directive.Prefix)
	} else if problem := consumerProblem(o.Value); problem != "" {
		c.errorf(o.ValuePos, "%s", problem)
	} else {
		h.Consumer, h.Table = o.Value, defaultTable(o.Value)
	}
	if o, ok := d.Lookup("table"); ok {
		if problem := tableProblem(o.Value); problem != "" {
			c.errorf(o.ValuePos, "%s", problem)
		} else {
			h.Table = o.Value
		}
	}
	if o, ok := d.Lookup("retain"); ok {
		r, err := time.ParseDuration(o.Value)
		switch {
		case err != nil:
			c.errorf(o.ValuePos, "retain %q is not a Go duration such as 720h", o.Value)
		case r <= 0:
			c.errorf(o.ValuePos, "retain must be positive, not %s", o.Value)
		default:
			h.Retain = r
		}
	}
}

// mode refuses mode=, which this version does not implement; to a handler
// that takes an *idem.Outbox, a mode other than tx is refused for what it
// is: its outgoing messages are written in the handler's transaction, which
// only mode=tx has.
func (c *checker) mode(d directive.Directive, h *model.Handler) {
	o, ok := d.Lookup("mode")
	if !ok {
		return
	}
	if h.Outbox && o.Value != "tx" {
		c.errorf(o.ValuePos, "handler %s takes an *idem.Outbox, which mode=%s does not support: outgoing messages are written in the handler's transaction, and only mode=tx (the default) gives it one", h.Func, o.Value)
		return
	}
	c.errorf(o.Pos, "option %s= is not supported by this version of idemgen", o.Name)
}

// zero reads zero=, the integer key parts (and order= entity) for which 0 is
// a real value. The others reject 0, which is what an unset field holds.
func (c *checker) zero(d directive.Directive, h *model.Handler) {
	o, ok := d.Lookup("zero")
	if !ok {
		return
	}
	parts := map[string]*model.KeyPart{}
	for i := range h.Key {
		parts[h.Key[i].Path] = &h.Key[i]
	}
	if h.Guard != nil {
		parts[h.Guard.Entity.Path] = &h.Guard.Entity
	}
	for _, item := range o.List() {
		path, pos := item.Text, item.Pos
		part, ok := parts[path]
		switch {
		case path == "":
			c.errorf(pos, "zero= has an empty field path")
		case !ok:
			c.errorf(pos, "zero=%s names no key part: zero= lists the integer parts of key= (or the order= field) for which 0 is a real value", path)
		case part.Kind != model.KeyInt:
			c.errorf(pos, "zero=%s names a key part of type %s; zero= is for integer parts, for which 0 is otherwise refused as unset", path, typeName(part.Type))
		case part.AllowZero:
			c.errorf(pos, "zero=%s is listed twice", path)
		default:
			part.AllowZero = true
		}
	}
}
