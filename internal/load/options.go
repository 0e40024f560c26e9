package load

import (
	"fmt"
	"slices"
	"time"

	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// The options of //idem:handler.
var handlerOptions = []string{"consumer", "key", "table", "retain", "order", "version", "stable", "zero", "fixture", "mode", "lease", "columns", "constraint", "result", "partition", "time"}

// The modes of mode= (docs/directive.md, docs/natural.md).
var modes = []string{string(model.ModeTx), string(model.ModeExternal), string(model.ModeEntity), string(model.ModeNatural)}

// modeChoices explains the modes, for the message about an unknown one.
const modeChoices = "want tx (the default: the business change commits in the inbox's transaction), external (a side effect outside the database: a claim with a lease around the call), " +
	"entity (the business row the handler inserts is the marker: table= and columns=) or natural (no marker: the handler is idempotent by construction, which its generated test proves)"

// DefaultLease is how long a claim of a mode=external handler is honoured
// when the directive says nothing (lease=), and MinLease the shortest lease=
// accepted: the heartbeat extends the lease every third of it, and a lease
// under a second would be lost to a slow round trip.
const (
	DefaultLease = 5 * time.Minute
	MinLease     = time.Second
)

// options checks the directive's option names and reads the options that
// need no types: consumer=, table= and retain=.
func (c *checker) options(d directive.Directive, h *model.Handler) {
	for _, o := range d.Options {
		switch {
		case slices.Contains(handlerOptions, o.Name):
		default:
			msg := fmt.Sprintf("unknown option %s=", o.Name)
			if s := directive.Suggest(o.Name, handlerOptions); s != "" {
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

// mode reads mode= and lease=: the mode is needed before the signature is
// checked, whose form depends on it. lease= belongs to mode=external only.
// It reports false for a mode= it refused, whose signature cannot be checked.
func (c *checker) mode(d directive.Directive, h *model.Handler) bool {
	h.Mode, h.ModePos = model.ModeTx, d.Pos
	known := true
	mode, hasMode := d.Lookup("mode")
	if hasMode {
		h.ModePos = mode.ValuePos
		switch {
		case mode.Value == string(model.ModeTx):
		case mode.Value == string(model.ModeExternal):
			h.Mode, h.Lease = model.ModeExternal, DefaultLease
		case mode.Value == string(model.ModeEntity):
			h.Mode = model.ModeEntity
		case mode.Value == string(model.ModeNatural):
			h.Mode = model.ModeNatural
		default:
			known = false
			msg := fmt.Sprintf("unknown mode=%s; %s", mode.Value, modeChoices)
			if s := directive.Suggest(mode.Value, modes); s != "" {
				msg = fmt.Sprintf("unknown mode=%s (did you mean mode=%s?); %s", mode.Value, s, modeChoices)
			}
			c.errorf(mode.ValuePos, "%s", msg)
		}
	}
	c.entityOptions(d, h)
	o, ok := d.Lookup("lease")
	if !ok {
		return known
	}
	if !h.External() {
		if !hasMode || mode.Value != string(model.ModeExternal) && known {
			c.errorf(o.Pos, "lease= is for mode=external only: it bounds how long a claim of a handler that runs outside a transaction is honoured; a mode=tx handler holds its key's row lock while it runs and needs no lease. Add mode=external or remove lease=")
		}
		return known
	}
	lease, err := time.ParseDuration(o.Value)
	switch {
	case err != nil:
		c.errorf(o.ValuePos, "lease %q is not a Go duration such as 2m or 30s", o.Value)
	case lease < MinLease:
		c.errorf(o.ValuePos, "lease=%s is shorter than %s: the heartbeat extends the claim every third of its lease, and a shorter lease would be lost to a slow round trip", o.Value, MinLease)
	default:
		h.Lease = lease
	}
	return known
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
