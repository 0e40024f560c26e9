package billing

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
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
