package app

import (
	"context"
	"database/sql"
	"net/http"
	"net/smtp"
	"os/exec"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"example.com/vet/queries"
	"example.com/vet/store"
	"github.com/idemgen/idemgen/idem"
)

// Service holds handles of every kind: none of them is a handler's tx.
type Service struct {
	pool  *pgxpool.Pool
	db    *sql.DB
	q     *queries.Queries
	repo  *store.Repo
	http  *http.Client
	ch    *amqp.Channel
	nc    *nats.Conn
	js    jetstream.JetStream
	kafka *kgo.Client
}

type Order struct{ ID string }

//idem:handler consumer=scope.pool key=ID
func (s *Service) PoolExec(ctx context.Context, tx pgx.Tx, msg Order) error { // want PoolExec:`txscope\(param 0 s.pool.Exec\)`
	_, err := s.pool.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, msg.ID) // want `^outside-tx: handler PoolExec \(mode=tx\) uses s.pool \(\*pgxpool.Pool\), a database handle other than its tx, in s.pool.Exec: it runs outside the handler's transaction, so a rollback does not undo it and a redelivery runs it again; use tx instead \(queries.New\(tx\), or pass tx to the function that needs it\), or mark a deliberate use //idem:allow outside-tx <reason>$`
	return err
}

//idem:handler consumer=scope.sql key=ID
func (s *Service) SQLQueryRow(ctx context.Context, tx pgx.Tx, msg Order) error { // want SQLQueryRow:`txscope\(param 0 s.db.QueryRow\)`
	var n int
	return s.db.QueryRow(`SELECT count(*) FROM orders WHERE id = $1`, msg.ID).Scan(&n) // want `outside-tx: handler SQLQueryRow \(mode=tx\) uses s.db \(\*sql.DB\), a database handle other than its tx, in s.db.QueryRow:`
}

//idem:handler consumer=scope.queries_pool key=ID
func (s *Service) QueriesFromPool(ctx context.Context, tx pgx.Tx, msg Order) error { // want QueriesFromPool:`txscope\(param 0 q.db.Exec\)`
	return queries.New(s.pool).CreateOrder(ctx, msg.ID) // want `outside-tx: handler QueriesFromPool \(mode=tx\) calls queries.\(\*Queries\).CreateOrder here, which uses s.pool \(\*pgxpool.Pool\), a database handle other than the handler's tx, in q.db.Exec at queries/queries.go:35:12: .*; hand the handler's tx down to queries.\(\*Queries\).CreateOrder \(as an argument, or as what it is called on: queries.New\(tx\), WithTx\(tx\)\) and use it there`
}

//idem:handler consumer=scope.queries_field key=ID
func (s *Service) QueriesField(ctx context.Context, tx pgx.Tx, msg Order) error { // want QueriesField:`txscope\(param 0 q.db.Exec\)`
	return s.q.CreateOrder(ctx, msg.ID) // want `outside-tx: handler QueriesField \(mode=tx\) calls queries.\(\*Queries\).CreateOrder here, which uses s.q.db \(queries.DBTX\), a database handle other than the handler's tx, in q.db.Exec at queries/queries.go:35:12`
}

//idem:handler consumer=scope.helper key=ID
func (s *Service) SamePackageHelper(ctx context.Context, tx pgx.Tx, msg Order) error { // want SamePackageHelper:`txscope\(param 0 s.pool.Exec; param 2 tx.QueryRow\)`
	if err := tx.QueryRow(ctx, `SELECT 1`).Scan(new(int)); err != nil {
		return err
	}
	return s.audit(ctx, msg.ID) // want `outside-tx: handler SamePackageHelper \(mode=tx\) calls app.\(\*Service\).audit here, which uses s.pool \(\*pgxpool.Pool\), a database handle other than the handler's tx, in s.pool.Exec at app/scope.go:69:12`
}

func (s *Service) audit(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, id)
	return err
}

//idem:handler consumer=scope.other_package key=ID
func (s *Service) OtherPackageHelper(ctx context.Context, tx pgx.Tx, msg Order) error { // want OtherPackageHelper:`txscope\(outside-tx DB.Exec; param 0 db.Exec\)`
	if err := store.Save(ctx, s.pool, msg.ID); err != nil { // want `outside-tx: handler OtherPackageHelper \(mode=tx\) calls store.Save here, which uses s.pool \(\*pgxpool.Pool\), a database handle other than the handler's tx, in db.Exec at store/store.go:20:12`
		return err
	}
	if err := store.Audit(ctx, msg.ID); err != nil { // want `outside-tx: handler OtherPackageHelper \(mode=tx\) calls store.Audit here, which calls store.insertAudit at store/store.go:26:9, which uses store.DB \(\*pgxpool.Pool\), a database handle other than the handler's tx, in DB.Exec at store/store.go:30:12: .*; hand the handler's tx down to store.insertAudit `
		return err
	}
	return s.repo.Save(ctx, msg.ID) // want `outside-tx: handler OtherPackageHelper \(mode=tx\) calls store.\(\*Repo\).Save here, which uses s.repo.Pool \(\*pgxpool.Pool\), a database handle other than the handler's tx, in r.Pool.Exec at store/store.go:41:12`
}

//idem:handler consumer=scope.http key=ID
func (s *Service) HTTP(ctx context.Context, tx pgx.Tx, msg Order) error { // want HTTP:`txscope\(external-call http.Post; external-call \(\*http.Client\).Do; external-call http.Post\)`
	resp, err := http.Post("https://example.com/orders", "text/plain", strings.NewReader(msg.ID)) // want `^external-call: handler HTTP \(mode=tx\) calls http.Post, an effect outside the database: a rollback does not undo it, and a redelivery does it again; do it in a mode=external handler \(which claims the key first and hands idem.KeyFrom\(ctx\) to the provider\), fed by a message this handler publishes through the outbox, or mark a deliberate call //idem:allow external-call <reason>$`
	if err != nil {
		return err
	}
	resp.Body.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://example.com/orders/"+msg.ID, nil)
	if err != nil {
		return err
	}
	resp, err = s.http.Do(req) // want `external-call: handler HTTP \(mode=tx\) calls \(\*http.Client\).Do, an effect outside the database`
	if err != nil {
		return err
	}
	resp.Body.Close()
	return store.Notify(ctx, msg.ID) // want `external-call: handler HTTP \(mode=tx\) calls store.Notify here, which calls http.Post at store/store.go:47:15, an effect outside the database`
}

//idem:handler consumer=scope.mail key=ID
func (s *Service) Mail(ctx context.Context, tx pgx.Tx, msg Order) error { // want Mail:`txscope\(external-call smtp.SendMail; external-call exec.Command\)`
	if err := smtp.SendMail("mail.example.com:25", nil, "shop@example.com", []string{"ops@example.com"}, []byte(msg.ID)); err != nil { // want `external-call: handler Mail \(mode=tx\) calls smtp.SendMail, an effect outside the database`
		return err
	}
	return exec.Command("notify-send", msg.ID).Run() // want `external-call: handler Mail \(mode=tx\) calls exec.Command, an effect outside the database`
}

//idem:handler consumer=scope.brokers key=ID
func (s *Service) Brokers(ctx context.Context, tx pgx.Tx, msg Order) error { // want Brokers:`txscope\(external-call \(\*amqp091.Channel\).PublishWithContext; external-call \(\*nats.Conn\).Publish; external-call jetstream.Publisher.Publish; external-call \(\*kgo.Client\).ProduceSync\)`
	if err := s.ch.PublishWithContext(ctx, "orders", "created", false, false, amqp.Publishing{Body: []byte(msg.ID)}); err != nil { // want `^external-call: handler Brokers \(mode=tx\) publishes with \(\*amqp091.Channel\).PublishWithContext, outside the transaction: the message leaves even when the transaction rolls back, and again on every redelivery; publish through the outbox instead \(out \*idem.Outbox after tx: the message is written in the transaction and relayed after the commit\), or mark a deliberate call //idem:allow external-call <reason>$`
		return err
	}
	if err := s.nc.Publish("orders.created", []byte(msg.ID)); err != nil { // want `external-call: handler Brokers \(mode=tx\) publishes with \(\*nats.Conn\).Publish, outside the transaction`
		return err
	}
	if _, err := s.js.Publish(ctx, "orders.created", []byte(msg.ID)); err != nil { // want `external-call: handler Brokers \(mode=tx\) publishes with jetstream.Publisher.Publish, outside the transaction`
		return err
	}
	return s.kafka.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte(msg.ID)}).FirstErr() // want `external-call: handler Brokers \(mode=tx\) publishes with \(\*kgo.Client\).ProduceSync, outside the transaction`
}

//idem:handler consumer=scope.entity key=ID mode=entity table=orders columns=id
func (s *Service) Entity(ctx context.Context, tx pgx.Tx, msg Order) error { // want Entity:`txscope\(param 0 s.pool.Exec\)`
	_, err := s.pool.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, msg.ID) // want `outside-tx: handler Entity \(mode=entity\) uses s.pool \(\*pgxpool.Pool\), a database handle other than its tx, in s.pool.Exec`
	return err
}

// TxOnly writes through its tx only, in every way that keeps it, and
// through the pool where an //idem:allow comment says why.
//
//idem:handler consumer=scope.tx_only key=ID
func (s *Service) TxOnly(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg Order) error { // want TxOnly:`txscope\(param 2 q.db.Exec\)`
	if err := queries.New(tx).CreateOrder(ctx, msg.ID); err != nil {
		return err
	}
	if err := s.q.WithTx(tx).CreateOrder(ctx, msg.ID); err != nil {
		return err
	}
	q := queries.New(tx)
	if err := q.CreateOrder(ctx, msg.ID); err != nil {
		return err
	}
	if err := store.Save(ctx, tx, msg.ID); err != nil {
		return err
	}
	if err := s.save(ctx, tx, msg.ID); err != nil {
		return err
	}
	if err := store.Allowed(ctx, msg.ID); err != nil {
		return err
	}
	//idem:allow outside-tx the audit row must outlive a rollback of the handler
	if _, err := s.pool.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, msg.ID); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, msg.ID); err != nil { //idem:allow outside-tx the same, on the line itself
		return err
	}
	return out.Publish("orders.created", msg)
}

func (s *Service) save(ctx context.Context, db queries.DBTX, id string) error {
	return queries.New(db).CreateOrder(ctx, id)
}

// Report reads through the pool outside any handler: nothing to report.
func (s *Service) Report(ctx context.Context) (int, error) { // want Report:`txscope\(param 0 s.pool.QueryRow\)`
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	return n, err
}

// Charge calls a provider over HTTP, which is what mode=external is for.
//
//idem:handler consumer=scope.charge key=ID mode=external
func (s *Service) Charge(ctx context.Context, msg Order) error { // want Charge:`txscope\(external-call \(\*http.Client\).Post\)`
	key, _ := idem.KeyFrom(ctx)
	resp, err := s.http.Post("https://psp.example.com/charges", "text/plain", strings.NewReader(key))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

//idem:handler consumer=scope.no_reason key=ID
func (s *Service) NoReason(ctx context.Context, tx pgx.Tx, msg Order) error { // want NoReason:`txscope\(param 0 s.pool.Exec\)`
	//idem:allow outside-tx // want `^//idem:allow outside-tx needs a reason after the check's name, such as //idem:allow outside-tx the audit row must outlive a rollback: the next reader must learn why this is deliberate; without one the comment allows nothing$`
	_, err := s.pool.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, msg.ID) // want `outside-tx: handler NoReason \(mode=tx\) uses s.pool`
	return err
}
