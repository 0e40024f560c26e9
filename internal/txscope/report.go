package txscope

import (
	"fmt"
	"go/types"
	"path/filepath"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
)

// Handler returns the findings of a handler, the function fn of p in the
// given mode: every use of a database handle but the parameters at fine
// (its tx and outbox, by index with a method's receiver first), and every
// call outside the database, in the handler or in the functions of its
// module it calls. A finding in a called function is reported at the call
// in the handler, and its message says where the use is.
func (p *Package) Handler(fn *types.Func, mode string, fine []int) []diag.Diagnostic {
	decl, ok := p.decls[fn.Origin()]
	if !ok {
		return nil
	}
	sum := summarize(p, decl, func(i int) bool { return !slices.Contains(fine, i) })
	var out []diag.Diagnostic
	for _, e := range sum.Effects {
		at := e.At
		if len(e.Via) > 0 {
			at = e.Via[0].At
		}
		out = append(out, diag.Diagnostic{Pos: at, Severity: diag.Error, Msg: p.message(fn.Name(), mode, e)})
	}
	return out
}

// message says what the handler does, where, why it is wrong, and what to
// do instead.
func (p *Package) message(handler, mode string, e Effect) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: handler %s (mode=%s) ", e.Kind, handler, mode)
	if len(e.Via) > 0 {
		fmt.Fprintf(&b, "calls %s here, which ", e.Via[0].Callee)
		for _, step := range e.Via[1:] {
			fmt.Fprintf(&b, "calls %s at %s, which ", step.Callee, p.rel(step.At))
		}
	}
	where := ""
	if len(e.Via) > 0 {
		where = " at " + p.rel(e.At)
	}
	more := ""
	if e.More > 0 {
		more = fmt.Sprintf(" (and %d more)", e.More)
	}
	switch {
	case e.Kind == ExternalCall && e.Publish:
		fmt.Fprintf(&b, "publishes with %s%s%s, outside the transaction: the message leaves even when the transaction rolls back, and again on every redelivery; "+
			"publish through the outbox instead (out *idem.Outbox after tx: the message is written in the transaction and relayed after the commit), "+
			"or mark a deliberate call //idem:allow external-call <reason>", e.Use, where, more)
	case e.Kind == ExternalCall:
		fmt.Fprintf(&b, "calls %s%s%s, an effect outside the database: a rollback does not undo it, and a redelivery does it again; "+
			"do it in a mode=external handler (which claims the key first and hands idem.KeyFrom(ctx) to the provider), fed by a message this handler publishes through the outbox, "+
			"or mark a deliberate call //idem:allow external-call <reason>", e.Use, where, more)
	default:
		handle := fmt.Sprintf("%s (%s)", e.Handle, e.Type)
		var use string
		if e.Passed {
			use = fmt.Sprintf("passes %s, a database handle other than %s tx, to %s%s%s", handle, whose(e), e.Use, where, more)
		} else {
			use = fmt.Sprintf("uses %s, a database handle other than %s tx, in %s%s%s", handle, whose(e), e.Use, where, more)
		}
		b.WriteString(use)
		fix := "use tx instead (queries.New(tx), or pass tx to the function that needs it)"
		if len(e.Via) > 0 {
			fix = fmt.Sprintf("hand the handler's tx down to %s (as an argument, or as what it is called on: queries.New(tx), WithTx(tx)) and use it there",
				e.Via[len(e.Via)-1].Callee)
		}
		fmt.Fprintf(&b, ": it runs outside the handler's transaction, so a rollback does not undo it and a redelivery runs it again; %s, "+
			"or mark a deliberate use //idem:allow outside-tx <reason>", fix)
	}
	return b.String()
}

// whose is the owner of the tx a finding is about: the handler's when it is
// reached through a call.
func whose(e Effect) string {
	if len(e.Via) > 0 {
		return "the handler's"
	}
	return "its"
}

// rel is at as a message shows it: its file relative to the module's
// directory.
func (p *Package) rel(at diag.Pos) string {
	file := at.File
	if p.root != "" {
		if r, err := filepath.Rel(p.root, file); err == nil && !strings.HasPrefix(r, "..") {
			file = filepath.ToSlash(r)
		}
	}
	return fmt.Sprintf("%s:%d:%d", file, at.Line, at.Col)
}
