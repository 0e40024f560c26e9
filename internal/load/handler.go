package load

import (
	"go/ast"
	"go/types"
	"time"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// DefaultRetain is how long inbox rows are kept when the directive says
// nothing: 30 days.
const DefaultRetain = 720 * time.Hour

// MaxNullable bounds the nullable parts of a key. Each null pattern needs its
// own partial unique index (2^k of them, all maintained by every claim) and
// its own variant of the lookup and completion statements.
const MaxNullable = 3

// MaxConsumer bounds the length of a consumer name, so that the default table
// name and the names derived from it fit PostgreSQL's 63-byte identifiers.
const MaxConsumer = 48

const (
	pgxPath  = "github.com/jackc/pgx/v5"
	idemPath = "github.com/idemgen/idemgen/idem"
)

// checker checks one annotated function of a package.
type checker struct {
	pkg   *packages.Package
	diags *diag.List
	ok    bool
	// tests are the package's test files, where fixtures are.
	tests *testFiles
}

func (c *checker) errorf(pos diag.Pos, format string, args ...any) {
	c.ok = false
	c.diags.Errorf(pos, format, args...)
}

func (c *checker) pos(n ast.Node) diag.Pos { return position(c.pkg.Fset, n.Pos()) }

// handler checks fd and its directive and returns the handler's model. It
// reports every problem it finds, not only the first.
func (c *checker) handler(fd *ast.FuncDecl, d directive.Directive) (model.Handler, bool) {
	c.ok = true
	h := model.Handler{Pos: c.pos(fd.Name), Func: fd.Name.Name, Retain: DefaultRetain}

	c.options(d, &h)
	modeOK := c.mode(d, &h)
	c.retainCoversLease(d, h)

	fn, _ := c.pkg.TypesInfo.Defs[fd.Name].(*types.Func)
	if fn == nil {
		c.errorf(h.Pos, "no type information for %s", fd.Name.Name)
		return h, false
	}
	sig := fn.Type().(*types.Signature)
	c.receiver(fd, sig, &h)
	if !modeOK {
		// The form of the signature is the mode's.
		return h, false
	}
	msg, msgOK := c.signature(fd, sig, &h)
	if h.Set && !c.setMode(d, h, sig) {
		return h, false
	}

	keyOpt, hasKey := d.Lookup("key")
	if !hasKey {
		c.errorf(d.Pos, "%shandler needs key=: the message fields that identify it, such as key=OrderID", directive.Prefix)
	} else if msgOK {
		h.Key = c.key(keyOpt, msg)
		c.checkNullable(keyOpt, h.Key)
		c.hygiene(d, keyOpt, h.Envelope)
	}
	if msgOK && hasKey {
		c.entityKey(d, &h)
		c.entityResult(d, &h, msg)
	}
	if msgOK {
		c.naturalChecks(&h)
	}
	if msgOK && !c.externalGuard(d, h) {
		h.Guard = c.guard(d, msg)
	}
	if msgOK && hasKey {
		c.zero(d, &h)
	}
	if msgOK {
		c.partition(d, &h, msg)
	}
	if msgOK {
		h.Vary, h.NoVary = c.vary(msg, h)
	}
	if o, ok := d.Lookup("fixture"); ok && msgOK {
		c.fixture(o, &h)
	}
	return h, c.ok
}

// retainCoversLease refuses what idem.NewJanitor would refuse at startup: a
// mode=external consumer whose retention is shorter than its lease, so that
// the janitor could purge a claim that is still running and a redelivery
// would run the handler again. Both sides may be defaults (720h, 5m).
func (c *checker) retainCoversLease(d directive.Directive, h model.Handler) {
	if !h.External() || h.Retain <= 0 || h.Lease <= 0 || h.Retain >= h.Lease {
		return
	}
	pos, what := d.Pos, "the default retention ("+h.Retain.String()+")"
	if o, ok := d.Lookup("retain"); ok {
		pos, what = o.ValuePos, "retain="+o.Value
	} else if o, ok := d.Lookup("lease"); ok {
		pos = o.ValuePos
	}
	var lease string
	if o, ok := d.Lookup("lease"); ok {
		lease = "lease=" + o.Value
	} else {
		lease = "the default lease (" + h.Lease.String() + ")"
	}
	c.errorf(pos, "%s is shorter than %s: a claim may run for its whole lease, and the janitor (idem.NewJanitor refuses this consumer) would purge it meanwhile, so that a redelivery ran the handler again; make retain= at least as long as the lease",
		what, lease)
}

// externalGuard refuses the stale-message guard (order=, version=) on a
// mode=external handler, and reports whether it did: the guard's versions are
// written in the handler's transaction, which only mode=tx has.
func (c *checker) externalGuard(d directive.Directive, h model.Handler) bool {
	if h.Mode == model.ModeTx {
		return false
	}
	why := map[model.Mode]string{
		model.ModeExternal: "a mode=external handler runs with none",
		model.ModeEntity:   "a mode=entity handler's transaction records nothing but its entity row (put a version column in the entity and guard it in the handler's UPDATE)",
		model.ModeNatural:  "a mode=natural handler records nothing (guard a version column in the handler's own upsert: ON CONFLICT ... DO UPDATE ... WHERE t.version < EXCLUDED.version)",
	}[h.Mode]
	refused := false
	for _, name := range []string{"order", "version"} {
		if o, ok := d.Lookup(name); ok {
			c.errorf(o.Pos, "%s= (the stale-message guard) is for mode=tx only: the guard records versions in the handler's transaction, and %s", name, why)
			refused = true
		}
	}
	return refused
}

// setMode refuses a set-based handler (msgs []M) in a mode other than
// mode=tx, saying why, and reports whether the mode takes it.
func (c *checker) setMode(d directive.Directive, h model.Handler, sig *types.Signature) bool {
	why := map[model.Mode]string{
		model.ModeExternal: "a mode=external handler calls a provider outside the database once per message, with that message's idempotency key (idem.KeyFrom(ctx)) and a lease of its own, so there is no batch to hand it",
		model.ModeEntity:   "in mode=entity each message's marker is the row its own handler inserts, and a unique violation of one marker would abort the whole batch's statement, so the wrapper could not tell which message was the duplicate",
		model.ModeNatural:  "a mode=natural wrapper records nothing, so it has no claim to hand the handler only the fresh messages of; its handler is idempotent one message at a time",
	}[h.Mode]
	if why == "" {
		return true
	}
	params := sig.Params()
	msgs := params.At(params.Len() - 1).Type()
	elem := msgs.(*types.Slice).Elem()
	c.errorf(h.ModePos, "%shandler mode=%s does not take a set-based handler (%s takes %s): %s; take msg %s, or use mode=tx (the default), which does",
		directive.Prefix, h.Mode, h.Func, c.typeString(msgs), why, c.typeString(elem))
	return false
}
