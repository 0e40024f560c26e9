package billing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// consumeCharges is the wiring docs/rabbitmq.md shows: a generated wrapper
// is an idem.Handler of its message, so a broker adapter takes it as it is,
// whatever its result type.
func consumeCharges(ctx context.Context, pool *pgxpool.Pool, svc *Service, url string) error {
	top := rabbitmq.Topology{Queue: "billing.charge"}
	return rabbitmq.Consume(ctx, url, top, NewChargeIdem(pool, svc), consumer.WithWorkers(8))
}

// TestWrappersAreHandlers pins the docs' wiring at compile time, and checks
// that every wrapper of the package is an idem.Handler of its message.
func TestWrappersAreHandlers(t *testing.T) {
	_ = consumeCharges
	var _ idem.Handler[OrderPlaced] = NewChargeIdem(nil, &Service{})
	var _ idem.Handler[*PaymentReceived] = NewBookPaymentIdem(nil, &Service{})
	var _ idem.Handler[OpenAccountRequested] = NewOpenAccountIdem(nil)
}

// TestConsumeChargesStopsWithoutMigrations runs the docs' wiring against a
// schema without the billing migrations. The consumer calls the generated
// wrapper's Check when it starts, so Run returns at once with the migration
// to apply, before it connects to RabbitMQ or consumes anything.
func TestConsumeChargesStopsWithoutMigrations(t *testing.T) {
	db := idemtest.New(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	err := consumeCharges(ctx, db.Pool, &Service{}, "amqp://guest:guest@127.0.0.1:5672/")
	const want = "rabbitmq: consumer of billing.charge: idem: consumer billing.charge: table idem_billing_charge does not exist: apply migrations/00003_idem_billing_charge.sql"
	if !errors.Is(err, idem.ErrNotMigrated) || err.Error() != want || time.Since(began) > 5*time.Second {
		t.Fatalf("Run = %v after %v\nwant at once: %s", err, time.Since(began), want)
	}
}
