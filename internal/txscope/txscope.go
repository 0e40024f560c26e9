// Package txscope checks that a handler's database work stays in its
// transaction, and that it has no effect outside the database.
//
// A handler of mode=tx, entity or natural commits its business change with
// the inbox row in the one transaction it is given: a statement through
// another handle (the service's pool, a sqlc Queries built from it) commits
// on its own, is not rolled back with the handler, and runs again on every
// redelivery. So does a call outside the database (HTTP, mail, a process, a
// broker's publish). The check follows the handler into the functions and
// methods of its module, with a Summary per function: what it does with
// handles whatever its arguments, which of its parameters it uses as a
// handle (judged at each call by the argument given), and which reach its
// results (queries.New(tx) is as good as tx).
//
// Values are followed by what they are built from, per function and without
// regard to the order of statements. A call through an interface that is
// not a database handle cannot be followed, and is not reported.
package txscope

import (
	"github.com/idemgen/idemgen/internal/diag"
)

// Kind names a check, as //idem:allow names it.
type Kind string

const (
	// OutsideTx is the use of a database handle other than the handler's tx.
	OutsideTx Kind = "outside-tx"
	// ExternalCall is a call with an effect outside the database.
	ExternalCall Kind = "external-call"
)

// Summary is what a function does, as its callers see it.
type Summary struct {
	// Effects happen whatever the arguments: a handle of the function's own
	// (a package variable, a pool it opens) used, or a call outside the
	// database. Each call of the function that leads to effects of one kind
	// is one Effect, counting the others in More.
	Effects []Effect
	// Params are the parameters the function uses as database handles, by
	// index: the first use of each. A caller that passes a handle other
	// than its tx there uses it.
	Params []ParamUse
	// Results are the parameters whose handles reach the results, so that
	// the result of queries.New(tx) is as good as tx.
	Results []int
	// ResultHandle is a handle of the function's own that reaches its
	// results, or nil.
	ResultHandle *Effect
}

// Empty reports whether s has nothing to tell a caller.
func (s *Summary) Empty() bool {
	return len(s.Effects) == 0 && len(s.Params) == 0 && len(s.Results) == 0 && s.ResultHandle == nil
}

// ParamUse is the first use of a parameter as a database handle.
type ParamUse struct {
	// Index counts the parameters from 0, a method's receiver first.
	Index int
	Effect
}

// Effect is one use of a database handle, or one call outside the database.
type Effect struct {
	Kind Kind
	// Use is what is done, as written where it is done: s.pool.Exec,
	// pgxscan.Select (a handle passed to it), http.Post.
	Use string
	// Handle and Type are the handle used, as the function that holds
	// the Effect got it: s.pool, *pgxpool.Pool (outside-tx only).
	Handle, Type string
	// Path is, for a use of a parameter, the fields of the parameter that
	// lead to the handle (".pool" of s.pool, "" for the parameter itself).
	Path string
	// Passed says that the handle was passed to Use, a function not
	// followed, rather than Use called on it.
	Passed bool
	// Publish marks an external call that publishes to a broker.
	Publish bool
	// At is where Use is.
	At diag.Pos
	// Via are the calls from the function down to At, outermost first.
	Via []Step
	// More counts the further effects of this kind reached through
	// Via[0].
	More int
}

// Step is one call on the way from a function to an Effect.
type Step struct {
	Callee string // as a stack trace names it: store.Save, queries.(*Queries).CreateOrder
	At     diag.Pos
}
