package app

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/vet/queries"
	"github.com/idemgen/idemgen/idem"
)

// defaultPool is a package variable: a handle of its own to any function.
var defaultPool *pgxpool.Pool

// Store is an interface that is not a database handle: a call through it
// cannot be followed, and is not reported.
type Store interface {
	Save(ctx context.Context, id string) error
}

// Edge holds a pool it embeds, and a Store.
type Edge struct {
	*pgxpool.Pool
	store Store
}

//idem:handler consumer=edge.closure key=ID
func (e *Edge) Closure(ctx context.Context, tx pgx.Tx, msg Order) error { // want Closure:`txscope\(param 0 e.Pool.Exec\)`
	done := make(chan error, 1)
	go func() {
		_, err := e.Pool.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, msg.ID) // want `outside-tx: handler Closure \(mode=tx\) uses e.Pool \(\*pgxpool.Pool\)`
		done <- err
	}()
	return <-done
}

// OwnTx begins a transaction of its own on the pool its receiver embeds:
// that is the use, and the statements in it are not reported again.
//
//idem:handler consumer=edge.own_tx key=ID
func (e *Edge) OwnTx(ctx context.Context, tx pgx.Tx, msg Order) error { // want OwnTx:`txscope\(param 0 e.Begin\)`
	other, err := e.Begin(ctx) // want `outside-tx: handler OwnTx \(mode=tx\) uses e.Pool \(\*pgxpool.Pool\), a database handle other than its tx, in e.Begin:`
	if err != nil {
		return err
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, msg.ID); err != nil {
		return err
	}
	return other.Commit(ctx)
}

func execute[T queries.DBTX](ctx context.Context, db T, id string) error {
	_, err := db.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id)
	return err
}

//idem:handler consumer=edge.generic key=ID
func (e *Edge) Generic(ctx context.Context, tx pgx.Tx, msg Order) error { // want Generic:`txscope\(param 0 db.Exec; param 2 db.Exec\)`
	if err := execute(ctx, tx, msg.ID); err != nil {
		return err
	}
	return execute(ctx, e.Pool, msg.ID) // want `outside-tx: handler Generic \(mode=tx\) calls app.execute here, which uses e.Pool \(\*pgxpool.Pool\), a database handle other than the handler's tx, in db.Exec at app/edge.go:55:12`
}

func (e *Edge) retry(ctx context.Context, n int, id string) error {
	if n > 0 {
		return e.retry(ctx, n-1, id)
	}
	_, err := defaultPool.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id)
	return err
}

//idem:handler consumer=edge.recursive key=ID
func (e *Edge) Recursive(ctx context.Context, tx pgx.Tx, msg Order) error { // want Recursive:`txscope\(outside-tx defaultPool.Exec\)`
	return e.retry(ctx, 3, msg.ID) // want `outside-tx: handler Recursive \(mode=tx\) calls app.\(\*Edge\).retry here, which uses app.defaultPool \(\*pgxpool.Pool\), a database handle other than the handler's tx, in defaultPool.Exec at app/edge.go:71:12`
}

//idem:handler consumer=edge.interface key=ID
func (e *Edge) Interface(ctx context.Context, tx pgx.Tx, msg Order) error {
	return e.store.Save(ctx, msg.ID)
}

//idem:handler consumer=edge.flow key=ID
func (e *Edge) Flow(ctx context.Context, tx pgx.Tx, msg Order) error { // want Flow:`txscope\(param 0 db.Exec; param 2 db.Exec\)`
	var db queries.DBTX = tx
	if msg.ID == "" {
		db = e.Pool
	}
	_, err := db.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, msg.ID) // want `outside-tx: handler Flow \(mode=tx\) uses e.Pool \(\*pgxpool.Pool\), a database handle other than its tx, in db.Exec`
	return err
}

//idem:handler consumer=edge.opened key=ID
func (e *Edge) Opened(ctx context.Context, tx pgx.Tx, msg Order) error { // want Opened:`txscope\(outside-tx p.Exec; outside-tx pgx.BeginFunc\)`
	p, err := pgxpool.New(ctx, "postgres:///shop")
	if err != nil {
		return err
	}
	if _, err := p.Exec(ctx, `SELECT 1`); err != nil { // want `outside-tx: handler Opened \(mode=tx\) uses pgxpool.New\(ctx, "postgres:///shop"\) \(\*pgxpool.Pool\), a database handle other than its tx, in p.Exec`
		return err
	}
	return pgx.BeginFunc(ctx, p, func(pgx.Tx) error { return nil }) // want `outside-tx: handler Opened \(mode=tx\) passes pgxpool.New\(ctx, "postgres:///shop"\) \(\*pgxpool.Pool\), a database handle other than its tx, to pgx.BeginFunc`
}

//idem:handler consumer=edge.method_value key=ID
func (e *Edge) MethodValue(ctx context.Context, tx pgx.Tx, msg Order) error { // want MethodValue:`txscope\(param 0 e.Pool.Exec; param 2 tx.Conn\)`
	conn := tx.Conn()
	if _, err := conn.Exec(ctx, `SELECT 1`); err != nil {
		return err
	}
	exec := e.Pool.Exec // want `outside-tx: handler MethodValue \(mode=tx\) uses e.Pool \(\*pgxpool.Pool\), a database handle other than its tx, in e.Pool.Exec`
	_, err := exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, msg.ID)
	return err
}

//idem:handler consumer=edge.allowed key=ID
func (s *Service) Allowed(ctx context.Context, tx pgx.Tx, msg Order) error { // want Allowed:`txscope\(param 2 tx.Exec\)`
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, msg.ID); err != nil {
		return err
	}
	//idem:allow outside-tx the audit row must outlive a rollback of the handler
	if err := s.audit(ctx, msg.ID); err != nil {
		return err
	}
	//idem:allow external-call the cache purge is harmless to repeat
	_, err := s.http.Post("https://cache.example.com/purge", "text/plain", nil)
	return err
}

//idem:handler consumer=edge.bad_allow key=ID
func (s *Service) BadAllow(ctx context.Context, tx pgx.Tx, msg Order) error { // want BadAllow:`txscope\(external-call \(\*http.Client\).Post\)`
	//idem:allow outside-txn the audit row must outlive a rollback // want `^//idem:allow outside-txn: there is no check outside-txn \(did you mean outside-tx\?\); the checks are outside-tx and external-call$`
	//idem:allow // want `^//idem:allow needs the name of a check and a reason: //idem:allow outside-tx <reason> or //idem:allow external-call <reason>$`
	_, err := s.http.Post("https://cache.example.com/purge", "text/plain", nil) // want `external-call: handler BadAllow \(mode=tx\) calls \(\*http.Client\).Post`
	return err
}

// OtherModule runs a janitor, whose code is of another module and not
// followed: a method of it on a value that holds a handle uses the handle.
//
//idem:handler consumer=edge.other_module key=ID
func (e *Edge) OtherModule(ctx context.Context, tx pgx.Tx, msg Order) error { // want OtherModule:`txscope\(param 0 j.RunOnce\)`
	j, err := idem.NewJanitor(e.Pool, nil)
	if err != nil {
		return err
	}
	_, err = j.RunOnce(ctx) // want `outside-tx: handler OtherModule \(mode=tx\) uses e.Pool \(\*pgxpool.Pool\), a database handle other than its tx, in j.RunOnce`
	return err
}
