package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// The observability tests: a scripted scenario that makes every outcome of
// both inboxes happen, a lease takeover, a sweeper reset, purges, and a relay
// that publishes, fails and dead-letters, all against real PostgreSQL; an
// OpenTelemetry SDK ManualReader collects the instruments and a slog handler
// captures the records.

// obsMarker is in every payload of the scenario; no log record may hold it.
const obsMarker = "PAYLOAD-MARKER-5d1c9e"

type obsBody struct {
	Note   string `json:"note"`
	Amount int64  `json:"amount"`
}

type obsResult struct {
	Charge string `json:"charge"`
}

type obsMsg = idem.Message[obsBody]

const (
	obsConsumer  = "test.obs"
	obsXConsumer = "test.obsx"
)

var (
	obsTable, obsMigration   = idemtest.TextKeyInbox(obsConsumer, "idem_test_obs", "ID", func(m obsMsg) string { return m.ID })
	obsXTable, obsXMigration = idemtest.TextKeyExternal(obsXConsumer, "idem_test_obsx", "ID", func(m obsMsg) string { return m.ID })
)

// captured is one log record with its attributes.
type captured struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
	text  string // the record as a text handler writes it, every attribute
}

// logCapture is a slog.Handler that keeps every record, at every level.
type logCapture struct {
	mu    *sync.Mutex
	recs  *[]captured
	attrs []slog.Attr
}

func newLogCapture() *logCapture { return &logCapture{mu: &sync.Mutex{}, recs: &[]captured{}} }

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	rec := captured{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	var b strings.Builder
	th := slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})
	_ = th.WithAttrs(c.attrs).Handle(context.Background(), r)
	rec.text = b.String()
	for _, a := range c.attrs {
		rec.attrs[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.recs = append(*c.recs, rec)
	return nil
}

func (c *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCapture{mu: c.mu, recs: c.recs, attrs: append(append([]slog.Attr(nil), c.attrs...), as...)}
}

func (c *logCapture) WithGroup(string) slog.Handler { return c }

func (c *logCapture) records() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]captured(nil), *c.recs...)
}

// behaviour says what the scenario's handlers do with a message id.
type behaviour struct {
	mu    sync.Mutex
	modes map[string]string
	gates map[string]chan struct{}
	began map[string]chan struct{}
}

func newBehaviour() *behaviour {
	return &behaviour{modes: map[string]string{}, gates: map[string]chan struct{}{}, began: map[string]chan struct{}{}}
}

func (b *behaviour) set(id, mode string) (began, gate chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.modes[id] = mode
	b.began[id], b.gates[id] = make(chan struct{}), make(chan struct{})
	return b.began[id], b.gates[id]
}

func (b *behaviour) get(id string) (mode string, began, gate chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.modes[id], b.began[id], b.gates[id]
}

var errServiceDown = errors.New("test: the payment service is down")

// TestObservabilityScenario (must-show: metrics and logs): every outcome of
// the tx inbox (processed, duplicate, key_reused, invalid_key, in_progress,
// stale, claim_lost, error — a returned error and a panic) and of the
// external inbox (the same but stale, which it has not), a lease takeover
// and a sweeper reset, purges of both inboxes and of the outbox, and a relay
// that publishes two rows, fails one into a dead row and leaves one not yet
// due. The ManualReader sees exact counts per consumer and outcome, equal
// histogram counts, the gauges; the handler captures one record per delivery,
// at its outcome's level, with consumer, key, outcome, attempt and duration,
// errors with their cause, and no record holds a byte of any payload.
func TestObservabilityScenario(t *testing.T) {
	ctx := context.Background()
	meter := obstest.New(t)
	logs := newLogCapture()
	logger := slog.New(logs)
	db := idemtest.New(t, relaytest.OutboxFS(t, map[string]string{"00100_obs.sql": obsMigration, "00101_obsx.sql": obsXMigration}))
	ticketDB := idemtest.New(t, ticketMigrations())
	opts := []idem.Option{idem.WithLogger(logger), idem.WithMeterProvider(meter)}
	msg := func(id string, amount int64, attempt int) obsMsg {
		return obsMsg{ID: id, Body: obsBody{Note: obsMarker, Amount: amount}, Attempt: attempt}
	}
	want := map[string]map[obs.Outcome]int64{obsConsumer: {}, obsXConsumer: {}, ticketTable.Consumer: {}}
	expect := func(consumer string, o obs.Outcome, err error, check func(error) bool) {
		t.Helper()
		if !check(err) {
			t.Fatalf("%s: a delivery meant to be %s returned %v", consumer, o, err)
		}
		want[consumer][o]++
	}
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	isNil := func(err error) bool { return err == nil }

	// The tx inbox.
	tb := newBehaviour()
	in := idemimpl.NewInbox(db.Pool, obsTable, func(ctx context.Context, tx pgx.Tx, m obsMsg) (obsResult, error) {
		mode, began, gate := tb.get(m.ID)
		switch mode {
		case "block":
			close(began)
			<-gate
		case "fail":
			return obsResult{}, errServiceDown
		case "panic":
			panic("test: the handler panics")
		case "escape":
			_, _ = tx.Conn().Exec(ctx, "ROLLBACK; BEGIN")
		}
		return obsResult{Charge: "ch-" + m.ID}, nil
	}, append(opts, idem.WithClaimWait(100*time.Millisecond), idem.WithPessimisticClaim())...) // a held claim: in progress
	deliver := func(m obsMsg) error { _, _, err := in.Handle(ctx, m); return err }

	expect(obsConsumer, obs.Processed, deliver(msg("m1", 10, 1)), isNil)
	expect(obsConsumer, obs.Duplicate, deliver(msg("m1", 10, 2)), isNil)
	expect(obsConsumer, obs.KeyReused, deliver(msg("m1", 11, 1)), is(idem.ErrKeyReused))
	expect(obsConsumer, obs.InvalidKey, deliver(msg("", 10, 1)), is(idem.ErrInvalidKey))
	began, gate := tb.set("m2", "block")
	first := make(chan error, 1)
	go func() { first <- deliver(msg("m2", 20, 1)) }()
	<-began
	expect(obsConsumer, obs.InProgress, deliver(msg("m2", 20, 2)), is(idem.ErrInProgress))
	close(gate)
	expect(obsConsumer, obs.Processed, <-first, isNil)
	tb.set("m3", "fail")
	expect(obsConsumer, obs.Error, deliver(msg("m3", 30, 1)), is(errServiceDown))
	tb.set("m4", "panic")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panicking handler's Handle returned")
			}
			want[obsConsumer][obs.Error]++
		}()
		_ = deliver(msg("m4", 40, 1))
	}()
	tb.set("m5", "escape")
	expect(obsConsumer, obs.ClaimLost, deliver(msg("m5", 50, 1)), func(err error) bool { return err != nil && strings.Contains(err.Error(), "another transaction") })

	// Stale: the ticket inbox's stale-message guard.
	tickets := idemimpl.NewInbox(ticketDB.Pool, ticketTable, func(ctx context.Context, tx pgx.Tx, tk ticket) (booking, error) {
		return booking{Holder: tk.Holder}, nil
	}, opts...)
	show := [16]byte{0x5e, 1}
	_, _, err := tickets.Handle(ctx, ticket{ID: [16]byte{0x71, 1}, Show: show, Version: 2, Holder: obsMarker})
	expect(ticketTable.Consumer, obs.Processed, err, isNil)
	_, _, err = tickets.Handle(ctx, ticket{ID: [16]byte{0x71, 2}, Show: show, Version: 1, Holder: obsMarker})
	expect(ticketTable.Consumer, obs.Stale, err, is(idem.ErrStale))

	// The external inbox.
	const lease = 900 * time.Millisecond
	xb := newBehaviour()
	x := idemimpl.NewExternalInbox(db.Pool, obsXTable, func(ctx context.Context, m obsMsg) (obsResult, error) {
		mode, began, gate := xb.get(m.ID)
		switch mode {
		case "block":
			close(began)
			<-gate
		case "fail":
			return obsResult{}, errServiceDown
		case "wait-cancel":
			close(began)
			<-ctx.Done()
			return obsResult{}, ctx.Err()
		}
		return obsResult{Charge: "ch-" + m.ID}, nil
	}, append(opts, idem.WithLease(lease))...)
	deliverX := func(m obsMsg) error { _, _, err := x.Handle(ctx, m); return err }

	expect(obsXConsumer, obs.Processed, deliverX(msg("x1", 10, 1)), isNil)
	expect(obsXConsumer, obs.Duplicate, deliverX(msg("x1", 10, 2)), isNil)
	expect(obsXConsumer, obs.KeyReused, deliverX(msg("x1", 11, 1)), is(idem.ErrKeyReused))
	expect(obsXConsumer, obs.InvalidKey, deliverX(msg("", 10, 1)), is(idem.ErrInvalidKey))
	began, gate = xb.set("x2", "block")
	go func() { first <- deliverX(msg("x2", 20, 1)) }()
	<-began
	expect(obsXConsumer, obs.InProgress, deliverX(msg("x2", 20, 2)), is(idem.ErrInProgress))
	close(gate)
	expect(obsXConsumer, obs.Processed, <-first, isNil)
	xb.set("x3", "fail")
	expect(obsXConsumer, obs.Error, deliverX(msg("x3", 30, 1)), is(errServiceDown))
	// x3's row as a worker that died while it ran leaves it: running, its
	// lease run out. The redelivery takes it over.
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_test_obsx SET status = 'running', fence = fence + 1, lease_until = now() - interval '1 second' WHERE key_id = 'x3'`); err != nil {
		t.Fatal(err)
	}
	xb.set("x3", "ok")
	expect(obsXConsumer, obs.Processed, deliverX(msg("x3", 30, 2)), isNil)
	// x4's claim is taken by another worker while its handler runs (the
	// fence moves on); that worker then dies, leaving the row running until
	// its lease runs out and the sweeper resets it.
	began, _ = xb.set("x4", "wait-cancel")
	go func() { first <- deliverX(msg("x4", 40, 1)) }()
	<-began
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_test_obsx SET fence = fence + 1 WHERE key_id = 'x4'`); err != nil {
		t.Fatal(err)
	}
	expect(obsXConsumer, obs.ClaimLost, <-first, is(idem.ErrClaimLost))
	relaytest.WaitFor(t, 5*lease, "the lease of x4 to run out", func() bool {
		return relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_obsx WHERE key_id = 'x4' AND status = 'running' AND lease_until < now()`) == 1
	})
	rep, err := x.Sweep(ctx)
	if err != nil || rep.Reset != 1 {
		t.Fatalf("Sweep: %+v, %v; want x4's claim reset", rep, err)
	}

	// Purges: one expired row of each inbox.
	for _, table := range []string{"idem_test_obs", "idem_test_obsx"} {
		if _, err := db.Pool.Exec(ctx, `UPDATE `+table+` SET created_at = now() - interval '31 days' WHERE key_id IN ('m1', 'x1')`); err != nil {
			t.Fatal(err)
		}
	}
	// An external row's retention counts from when it was done.
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_test_obsx SET done_at = now() - interval '31 days', updated_at = now() - interval '31 days' WHERE key_id = 'x1'`); err != nil {
		t.Fatal(err)
	}
	if n, err := in.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("Inbox.Purge: %d, %v; want 1", n, err)
	}
	if n, err := x.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("ExternalInbox.Purge: %d, %v; want 1", n, err)
	}

	// The relay: two rows published, one failing into a dead row, one not
	// due for an hour.
	rows := []relaytest.Row{
		{ID: uuid.New(), Key: "k", Destination: "obs.ok", Payload: obsMarker + "-1"},
		{ID: uuid.New(), Key: "k", Destination: "obs.ok", Payload: obsMarker + "-2"},
		{ID: uuid.New(), Key: "k", Destination: "obs.fail", Payload: obsMarker + "-3"},
		{ID: uuid.New(), Key: "k", Destination: "obs.later", Payload: obsMarker + "-4"},
	}
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := relaytest.Insert(ctx, tx, rows); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE idem_outbox SET available_at = now() + interval '1 hour', created_at = now() - interval '5 seconds' WHERE destination = 'obs.later'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("obs", 0, func(m idem.OutgoingMessage) error {
		if m.Destination == "obs.fail" {
			return errors.New("broker: rejected")
		}
		return nil
	}), relay.WithID("obs"), relay.WithMaxAttempts(1), relay.WithPollInterval(10*time.Millisecond),
		relay.WithLogger(logger), relay.WithMeterProvider(meter))
	stopRelay := relaytest.Run(t, r)
	// A published row is deleted: two rows left, the dead one and the one
	// not due.
	relaytest.WaitFor(t, 10*time.Second, "two rows published and one dead", func() bool {
		return relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int * 10 + count(*) FILTER (WHERE dead_at IS NOT NULL)::int FROM idem_outbox`) == 21
	})
	running := meter.Collect(t) // the gauges are there while the relay runs
	stopRelay()

	// The counts.
	snap := meter.Collect(t)
	total := int64(0)
	for consumer, outcomes := range want {
		for _, o := range obs.Outcomes() {
			kv := []attribute.KeyValue{obs.AttrConsumer.String(consumer), obs.AttrOutcome.String(o.String())}
			got := snap.Int(t, obs.NameDeliveries, kv...)
			hist := snap.HistogramCount(t, obs.NameHandlerDuration, kv...)
			if got != outcomes[o] || hist != uint64(outcomes[o]) {
				t.Errorf("%s{%s, %s} = %d, %s count %d; want %d", obs.NameDeliveries, consumer, o, got, obs.NameHandlerDuration, hist, outcomes[o])
			}
			total += got
			if got > 0 {
				t.Logf("%s{%s, %s} = %d", obs.NameDeliveries, consumer, o, got)
			}
		}
	}
	if n := snap.Points(obs.NameDeliveries); n != 7+7+2 {
		t.Errorf("%s has %d attribute sets; want 16 (seven outcomes of each inbox, processed and stale of the ticket inbox)", obs.NameDeliveries, n)
	}
	for _, c := range []struct {
		name string
		kv   []attribute.KeyValue
		want int64
	}{
		{obs.NameLeaseTakeovers, []attribute.KeyValue{obs.AttrConsumer.String(obsXConsumer)}, 1},
		{obs.NameSweeperResets, []attribute.KeyValue{obs.AttrConsumer.String(obsXConsumer)}, 1},
		{obs.NamePurged, []attribute.KeyValue{obs.AttrTable.String("idem_test_obs"), obs.AttrKind.String(obs.KindInbox)}, 1},
		{obs.NamePurged, []attribute.KeyValue{obs.AttrTable.String("idem_test_obsx"), obs.AttrKind.String(obs.KindExternal)}, 1},
		{obs.NameRelayPublished, []attribute.KeyValue{obs.AttrDestination.String("obs.ok")}, 2},
		{obs.NameRelayPublished, []attribute.KeyValue{obs.AttrDestination.String("obs.fail")}, 0},
		{obs.NameRelayFailures, []attribute.KeyValue{obs.AttrDestination.String("obs.fail")}, 1},
		{obs.NameRelayFailures, []attribute.KeyValue{obs.AttrDestination.String("obs.ok")}, 0},
	} {
		if got := snap.Int(t, c.name, c.kv...); got != c.want {
			t.Errorf("%s%v = %d; want %d", c.name, c.kv, got, c.want)
		} else {
			t.Logf("%s%v = %d", c.name, c.kv, got)
		}
	}
	backlog, dead := running.Int(t, obs.NameOutboxBacklog), running.Int(t, obs.NameOutboxDead)
	age, ok := running.Float(t, obs.NameOutboxOldestAge)
	t.Logf("while the relay ran: %s = %d, %s = %d, %s = %.2fs", obs.NameOutboxBacklog, backlog, obs.NameOutboxDead, dead, obs.NameOutboxOldestAge, age)
	if backlog != 1 || dead != 1 || !ok || age < 5 || age > 60 {
		t.Errorf("outbox gauges: backlog %d, dead %d, oldest age %v (present %v); want 1, 1 and about 5s", backlog, dead, age, ok)
	}
	if n := snap.Points(obs.NameOutboxBacklog); n != 0 {
		t.Errorf("the gauges are still observed after the relay stopped (%d points)", n)
	}

	// The records: one per delivery, and no payload anywhere.
	levels := map[obs.Outcome]slog.Level{obs.Processed: slog.LevelDebug, obs.Duplicate: slog.LevelDebug, obs.InProgress: slog.LevelInfo,
		obs.Stale: slog.LevelInfo, obs.InvalidKey: slog.LevelWarn, obs.ClaimLost: slog.LevelWarn, obs.KeyReused: slog.LevelError, obs.Error: slog.LevelError}
	got := map[string]map[obs.Outcome]int64{obsConsumer: {}, obsXConsumer: {}, ticketTable.Consumer: {}}
	var deliveries int64
	all := logs.records()
	for _, r := range all {
		if strings.Contains(r.text, obsMarker) {
			t.Errorf("a record holds a payload: %s", r.text)
		}
		if r.msg != obs.DeliveryMsg {
			continue
		}
		deliveries++
		consumer, outcome := r.attrs[obs.LogConsumer].String(), r.attrs[obs.LogOutcome].String()
		var o obs.Outcome
		for _, c := range obs.Outcomes() {
			if c.String() == outcome {
				o = c
			}
		}
		if got[consumer] == nil || o.String() != outcome {
			t.Errorf("a record of consumer %q outcome %q: %s", consumer, outcome, r.text)
			continue
		}
		got[consumer][o]++
		if r.level != levels[o] {
			t.Errorf("%s record at %v; want %v: %s", o, r.level, levels[o], r.text)
		}
		for _, k := range []string{obs.LogKey, obs.LogDuration} {
			if _, ok := r.attrs[k]; !ok {
				t.Errorf("a record without %s: %s", k, r.text)
			}
		}
		if d := r.attrs[obs.LogDuration]; d.Kind() != slog.KindDuration || d.Duration() <= 0 {
			t.Errorf("duration %v: %s", d, r.text)
		}
		key := r.attrs[obs.LogKey].String()
		switch {
		case o == obs.InvalidKey && key != "":
			t.Errorf("an invalid key's record has key %q", key)
		case o != obs.InvalidKey && consumer == obsConsumer && !strings.HasPrefix(key, `ID="m`):
			t.Errorf("a tx record's key %q; want ID=\"m…\"", key)
		case o != obs.InvalidKey && consumer == obsXConsumer && !strings.HasPrefix(key, `ID="x`):
			t.Errorf("an external record's key %q; want ID=\"x…\"", key)
		}
		idemKey, hasIdemKey := r.attrs[obs.LogIdemKey]
		switch {
		case consumer != obsXConsumer && hasIdemKey:
			t.Errorf("a tx record with an idempotency key: %s", r.text)
		case consumer == obsXConsumer && o != obs.InvalidKey &&
			idemKey.String() != idem.ExternalKey(obsXConsumer, []any{strings.TrimSuffix(strings.TrimPrefix(key, `ID="`), `"`)}):
			t.Errorf("an external record's idempotency key %q is not ExternalKey of %s", idemKey, key)
		}
		_, hasAttempt := r.attrs[obs.LogAttempt]
		if hasAttempt != (consumer != ticketTable.Consumer) {
			t.Errorf("attempt present %v; want it for an idem.Message only: %s", hasAttempt, r.text)
		}
		if _, claimed := r.attrs[obs.LogClaimAttempt]; claimed && consumer != obsXConsumer {
			t.Errorf("a claim attempt on a tx record: %s", r.text)
		}
		errAttr, hasErr := r.attrs[obs.LogErr]
		if hasErr != (o != obs.Processed && o != obs.Duplicate) {
			t.Errorf("err present %v for %s: %s", hasErr, o, r.text)
		}
		if o == obs.Error && !strings.Contains(errAttr.String(), "payment service is down") && !strings.Contains(errAttr.String(), "panicked") {
			t.Errorf("an error record without its cause: %s", r.text)
		}
	}
	for consumer := range want {
		for _, o := range obs.Outcomes() {
			if got[consumer][o] != want[consumer][o] {
				t.Errorf("%d records of %s %s; want %d", got[consumer][o], consumer, o, want[consumer][o])
			}
		}
	}
	if deliveries != total {
		t.Errorf("%d delivery records for %d deliveries", deliveries, total)
	}
	t.Logf("%d deliveries counted and logged (one record each), %d records in all, none with the payload marker", total, len(all))
	if testing.Verbose() {
		for _, r := range all {
			if r.msg == obs.DeliveryMsg && (r.attrs[obs.LogOutcome].String() == "claim_lost" || r.attrs[obs.LogOutcome].String() == "processed") {
				t.Logf("record: %s", strings.TrimSpace(r.text))
			}
		}
	}
}
