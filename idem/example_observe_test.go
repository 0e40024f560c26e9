package idem_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/relay"
)

// ExampleWithMeterProvider wires an inbox and a relay to a logger and an
// OpenTelemetry SDK MeterProvider (docs/observability.md). The reader here is
// a ManualReader; a service gives the provider its exporter's reader instead:
// prometheus.New() from go.opentelemetry.io/otel/exporters/prometheus, or
// sdkmetric.NewPeriodicReader over an OTLP exporter. A generated wrapper
// takes the same idem options as NewInbox.
func ExampleWithMeterProvider() {
	ctx := context.Background()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = mp.Shutdown(ctx) }()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		logger.Error("connect", "err", err)
		return
	}
	defer pool.Close()

	type orderPlaced struct {
		OrderID string `json:"order_id"`
	}
	table, _ := idemtest.TextKeyInbox("shop.orders", "idem_shop_orders", "OrderID", func(m orderPlaced) string { return m.OrderID })
	inbox := idemimpl.NewInbox(pool, table, func(ctx context.Context, tx pgx.Tx, m orderPlaced) (idem.None, error) {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, m.OrderID)
		return idem.None{}, err
	}, idem.WithLogger(logger), idem.WithMeterProvider(mp))

	r := relay.New(pool, idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
		return make([]error, len(msgs)) // a broker adapter's publisher in a service
	}), relay.WithLogger(logger), relay.WithMeterProvider(mp))

	_, _ = inbox, r // inbox.Handle(ctx, msg) per delivery; go r.Run(ctx)
}
