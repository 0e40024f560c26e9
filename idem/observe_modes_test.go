package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
)

// The tables of TestEveryModeObservesAlike: one consumer per mode, all keyed
// by the ID of an idem.Message, so that every record carries the same
// fields.
var (
	modesTxTable, modesTxMigration = idemtest.TextKeyInbox("test.modes.tx", "idem_test_modes_tx", "ID", func(m obsMsg) string { return m.ID })
	modesXTable, modesXMigration   = idemtest.TextKeyExternal("test.modes.external", "idem_test_modes_x", "ID", func(m obsMsg) string { return m.ID })

	modesKey = func(m obsMsg) ([]any, error) {
		if err := idemimpl.CheckString("ID", m.ID); err != nil {
			return nil, err
		}
		return []any{m.ID}, nil
	}
	modesEntityTable = idemimpl.EntityTable[obsMsg]{
		Consumer: "test.modes.entity",
		Name:     "modes_purchases",
		Columns:  []idemimpl.Column{{Field: "ID", Name: "id", Type: "text"}},
		Key:      modesKey,
	}
	modesNaturalTable = idemimpl.NaturalTable[obsMsg]{Consumer: "test.modes.natural", KeyFields: []string{"ID"}, Key: modesKey}
)

const modesEntityMigration = `-- +goose Up
CREATE TABLE modes_purchases (id text PRIMARY KEY, amount bigint NOT NULL);
ALTER TABLE modes_purchases ADD COLUMN idem_fingerprint bytea DEFAULT decode(nullif(current_setting('idem.fingerprint', true), ''), 'hex');
-- +goose Down
DROP TABLE modes_purchases;
`

// modeScript is what one mode's handler does with a message, by its amount:
// 0 commits, modeFail returns an error, modePanic panics, modeBlock waits
// for the gate (so that a concurrent copy finds the key in progress).
const (
	modeFail  = -1
	modePanic = -2
	modeBlock = -3
)

// TestEveryModeObservesAlike (must-show: the same observability in every
// mode): each mode (tx, entity, natural, external) and the batch form
// (HandleBatch) is driven through every outcome it can have; after each
// delivery the captured log holds exactly one "idem delivery" record for it,
// at the outcome's level, with the same fields in every mode (consumer, key,
// outcome, attempt, duration, and err for a failure; mode=external adds its
// idempotency key and, once it claimed, claim_attempt), and the
// ManualReader's idem.deliveries and idem.handler.duration points per
// consumer and outcome count exactly the deliveries made.
func TestEveryModeObservesAlike(t *testing.T) {
	ctx := context.Background()
	db := idemtest.New(t, relaytest.OutboxFS(t, map[string]string{
		"00100_tx.sql": modesTxMigration, "00101_x.sql": modesXMigration, "00102_entity.sql": modesEntityMigration,
	}))
	meter := obstest.New(t)
	logs := newLogCapture()
	opts := []idem.Option{idem.WithLogger(slog.New(logs)), idem.WithMeterProvider(meter)}
	gate := make(chan struct{})
	began := make(chan struct{}, 4)
	act := func(m obsMsg) error {
		switch m.Body.Amount {
		case modeFail:
			return errServiceDown
		case modePanic:
			panic("test: the handler panics")
		case modeBlock:
			began <- struct{}{}
			<-gate
		}
		return nil
	}
	result := func(m obsMsg) obsResult { return obsResult{Charge: "ch-" + m.ID} }

	tx := idemimpl.NewInbox(db.Pool, modesTxTable, func(ctx context.Context, tx pgx.Tx, m obsMsg) (obsResult, error) {
		return result(m), act(m)
	}, append(opts, idem.WithClaimWait(50*time.Millisecond), idem.WithPessimisticClaim())...) // a held claim: in progress
	entity := idemimpl.NewEntityInbox(db.Pool, modesEntityTable, func(ctx context.Context, tx pgx.Tx, m obsMsg) (idem.None, error) {
		if err := act(m); err != nil {
			return idem.None{}, err
		}
		_, err := tx.Exec(ctx, `INSERT INTO modes_purchases (id, amount) VALUES ($1, $2)`, m.ID, m.Body.Amount)
		return idem.None{}, err
	}, nil, opts...)
	natural := idemimpl.NewNaturalInbox(db.Pool, modesNaturalTable, func(ctx context.Context, tx pgx.Tx, m obsMsg) (obsResult, error) {
		return result(m), act(m)
	}, opts...)
	external := idemimpl.NewExternalInbox(db.Pool, modesXTable, func(ctx context.Context, m obsMsg) (obsResult, error) {
		return result(m), act(m)
	}, opts...)

	type step struct {
		name    string
		deliver func() error
		want    obs.Outcome
		claimed bool // mode=external: the delivery claimed the key
	}
	msg := func(id string, amount int64) obsMsg {
		return obsMsg{ID: id, Body: obsBody{Note: obsMarker, Amount: amount}, Attempt: 1}
	}
	handle := func(h func(context.Context, obsMsg) error, m obsMsg) func() error {
		return func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = errors.New("panicked")
				}
			}()
			return h(ctx, m)
		}
	}
	inProgress := func(h func(context.Context, obsMsg) error, id string) func() error {
		return func() error {
			first := make(chan error, 1)
			go func() { first <- h(ctx, msg(id, modeBlock)) }()
			<-began
			err := h(ctx, msg(id, modeBlock))
			gate <- struct{}{}
			if ferr := <-first; ferr != nil {
				return ferr
			}
			return err
		}
	}
	of := func(handle func(context.Context, obsMsg) (obsResult, idem.Outcome, error)) func(context.Context, obsMsg) error {
		return func(ctx context.Context, m obsMsg) error { _, _, err := handle(ctx, m); return err }
	}
	txH, naturalH, externalH := of(tx.Handle), of(natural.Handle), of(external.Handle)
	entityH := func(ctx context.Context, m obsMsg) error { _, _, err := entity.Handle(ctx, m); return err }
	batchOf := func(msgs ...obsMsg) func() error {
		return func() error {
			results, err := tx.HandleBatch(ctx, msgs)
			if err != nil {
				return err
			}
			return results[len(results)-1].Err
		}
	}

	modes := []struct {
		mode     string
		consumer string
		steps    []step
	}{
		{"tx", modesTxTable.Consumer, []step{
			{"processed", handle(txH, msg("t1", 1)), obs.Processed, false},
			{"duplicate", handle(txH, msg("t1", 1)), obs.Duplicate, false},
			{"key reused", handle(txH, msg("t1", 2)), obs.KeyReused, false},
			{"invalid key", handle(txH, msg("", 1)), obs.InvalidKey, false},
			{"error", handle(txH, msg("t2", modeFail)), obs.Error, false},
			{"panic", handle(txH, msg("t3", modePanic)), obs.Error, false},
		}},
		{"batch", modesTxTable.Consumer + ".batch", nil}, // filled below: the same consumer as tx
		{"entity", modesEntityTable.Consumer, []step{
			{"processed", handle(entityH, msg("e1", 1)), obs.Processed, false},
			{"duplicate", handle(entityH, msg("e1", 1)), obs.Duplicate, false},
			{"key reused", handle(entityH, msg("e1", 2)), obs.KeyReused, false},
			{"invalid key", handle(entityH, msg("", 1)), obs.InvalidKey, false},
			{"error", handle(entityH, msg("e2", modeFail)), obs.Error, false},
			{"panic", handle(entityH, msg("e3", modePanic)), obs.Error, false},
		}},
		{"natural", modesNaturalTable.Consumer, []step{
			{"processed", handle(naturalH, msg("n1", 1)), obs.Processed, false},
			{"processed again", handle(naturalH, msg("n1", 1)), obs.Processed, false},
			{"invalid key", handle(naturalH, msg("", 1)), obs.InvalidKey, false},
			{"error", handle(naturalH, msg("n2", modeFail)), obs.Error, false},
			{"panic", handle(naturalH, msg("n3", modePanic)), obs.Error, false},
		}},
		{"external", modesXTable.Consumer, []step{
			{"processed", handle(externalH, msg("x1", 1)), obs.Processed, true},
			{"duplicate", handle(externalH, msg("x1", 1)), obs.Duplicate, false},
			{"key reused", handle(externalH, msg("x1", 2)), obs.KeyReused, false},
			{"invalid key", handle(externalH, msg("", 1)), obs.InvalidKey, false},
			{"error", handle(externalH, msg("x2", modeFail)), obs.Error, true},
			{"panic", handle(externalH, msg("x3", modePanic)), obs.Error, true},
		}},
	}
	// The tx mode's in-progress delivery, and the batch form: its records are
	// the tx consumer's (a batch is deliveries of that consumer).
	modes[0].steps = append(modes[0].steps, step{"in progress", inProgress(txH, "t4"), obs.InProgress, false})
	modes[4].steps = append(modes[4].steps, step{"in progress", inProgress(externalH, "x4"), obs.InProgress, false})
	modes[1].consumer = modesTxTable.Consumer
	modes[1].steps = []step{
		{"processed", batchOf(msg("b1", 1)), obs.Processed, false},
		{"duplicate of a processed key", batchOf(msg("b1", 1)), obs.Duplicate, false},
		{"key reused", batchOf(msg("b1", 2)), obs.KeyReused, false},
		{"invalid key", batchOf(msg("", 1)), obs.InvalidKey, false},
		{"error (the batch falls back to one transaction per message)", batchOf(msg("b2", modeFail)), obs.Error, false},
	}

	counts := map[string]map[obs.Outcome]int64{}
	for _, m := range modes {
		if counts[m.consumer] == nil {
			counts[m.consumer] = map[obs.Outcome]int64{}
		}
		for _, s := range m.steps {
			before := len(deliveryRecords(logs))
			s.deliver()
			recs := deliveryRecords(logs)[before:]
			// The in-progress step makes two deliveries: the blocked first
			// one (processed) and its concurrent copy.
			want := []obs.Outcome{s.want}
			if s.want == obs.InProgress {
				want = []obs.Outcome{obs.InProgress, obs.Processed}
			}
			if len(recs) != len(want) {
				t.Fatalf("%s, %s: %d delivery records, want %d: %+v", m.mode, s.name, len(recs), len(want), recs)
			}
			for i, rec := range recs {
				o := want[i]
				counts[m.consumer][o]++
				if got := rec.attrs["outcome"].String(); got != o.String() {
					t.Errorf("%s, %s: record %d has outcome %q, want %q", m.mode, s.name, i, got, o)
				}
				if rec.level != o.Level() {
					t.Errorf("%s, %s: logged at %v, want %v", m.mode, s.name, rec.level, o.Level())
				}
				if got := rec.attrs["consumer"].String(); got != m.consumer {
					t.Errorf("%s, %s: consumer %q, want %q", m.mode, s.name, got, m.consumer)
				}
				wantKeys := []string{"attempt", "consumer", "duration", "key", "outcome"}
				if o != obs.Processed && o != obs.Duplicate {
					wantKeys = append(wantKeys, "err")
				}
				if m.mode == "external" && o != obs.InvalidKey {
					wantKeys = append(wantKeys, "idem_key")
				}
				if m.mode == "external" && (s.claimed || (s.want == obs.InProgress && o == obs.Processed)) {
					wantKeys = append(wantKeys, "claim_attempt")
				}
				sort.Strings(wantKeys)
				if got := recordKeys(rec); !slices.Equal(got, wantKeys) {
					t.Errorf("%s, %s (%s): the record's fields are %v, want %v", m.mode, s.name, o, got, wantKeys)
				}
				if o != obs.InvalidKey && rec.attrs["key"].String() == "" {
					t.Errorf("%s, %s: the record has no key", m.mode, s.name)
				}
			}
		}
	}

	snap := meter.Collect(t)
	for consumer, byOutcome := range counts {
		for _, o := range obs.Outcomes() {
			kv := []attribute.KeyValue{obs.AttrConsumer.String(consumer), obs.AttrOutcome.String(o.String())}
			if got, want := snap.Int(t, obs.NameDeliveries, kv...), byOutcome[o]; got != want {
				t.Errorf("%s: %s{outcome=%s} = %d, want %d", consumer, obs.NameDeliveries, o, got, want)
			}
			if got, want := snap.HistogramCount(t, obs.NameHandlerDuration, kv...), uint64(byOutcome[o]); got != want {
				t.Errorf("%s: %s{outcome=%s} count = %d, want %d", consumer, obs.NameHandlerDuration, o, got, want)
			}
		}
	}
	for _, rec := range logs.records() {
		if strings.Contains(rec.text, obsMarker) {
			t.Errorf("a record holds the payload: %s", rec.text)
		}
	}
}

// deliveryRecords are the captured "idem delivery" records.
func deliveryRecords(c *logCapture) []captured {
	var out []captured
	for _, r := range c.records() {
		if r.msg == obs.DeliveryMsg {
			out = append(out, r)
		}
	}
	return out
}

// recordKeys are the names of a record's attributes, sorted.
func recordKeys(r captured) []string {
	keys := make([]string, 0, len(r.attrs))
	for k := range r.attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestConstructorsRefuseOptionsOfOtherModes: an option a mode does not
// honour is refused at construction, the panic naming the constructor, the
// consumer and the option.
func TestConstructorsRefuseOptionsOfOtherModes(t *testing.T) {
	noop := func(context.Context, pgx.Tx, obsMsg) (obsResult, error) { return obsResult{}, nil }
	for _, c := range []struct {
		name string
		make func()
		want []string
	}{
		{"tx with a lease", func() { idemimpl.NewInbox(nil, modesTxTable, noop, idem.WithLease(time.Second)) },
			[]string{"idemimpl.NewInbox", "test.modes.tx", "idem.WithLease", "mode=tx"}},
		{"entity with a claim wait", func() {
			idemimpl.NewEntityInbox(nil, modesEntityTable, func(context.Context, pgx.Tx, obsMsg) (idem.None, error) { return idem.None{}, nil }, nil, idem.WithClaimWait(time.Second))
		}, []string{"idemimpl.NewEntityInbox", "test.modes.entity", "idem.WithClaimWait", "mode=entity"}},
		{"natural with WithoutNotify and a batch cap", func() {
			idemimpl.NewNaturalInbox(nil, modesNaturalTable, noop, idem.WithoutNotify(), idem.WithBatchCap(3))
		}, []string{"idemimpl.NewNaturalInbox", "idem.WithoutNotify and idem.WithBatchCap", "mode=natural"}},
		{"external with an isolation level", func() {
			idemimpl.NewExternalInbox(nil, modesXTable, func(context.Context, obsMsg) (obsResult, error) { return obsResult{}, nil }, idem.WithIsolation(pgx.Serializable))
		}, []string{"idemimpl.NewExternalInbox", "test.modes.external", "idem.WithIsolation", "mode=external"}},
		{"a publishing inbox with a claim wait out of range", func() {
			idemimpl.NewPublishingInbox(nil, modesTxTable, func(context.Context, pgx.Tx, *idem.Outbox, obsMsg) (obsResult, error) { return obsResult{}, nil }, idem.WithClaimWait(1000*time.Hour))
		}, []string{"idemimpl.NewPublishingInbox", "idem.WithClaimWait(1000h0m0s) is out of range"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				p := recover()
				msg, _ := p.(string)
				if msg == "" {
					t.Fatalf("no panic (recovered %v)", p)
				}
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("the panic %q does not name %q", msg, w)
					}
				}
			}()
			c.make()
		})
	}
	// Every option of its own mode is accepted.
	idemimpl.NewInbox(nil, modesTxTable, noop, idem.WithIsolation(pgx.ReadCommitted), idem.WithClaimWait(time.Second),
		idem.WithBeforeCommit(func(context.Context, pgx.Tx) error { return nil }), idem.WithoutNotify(), idem.WithBatchCap(5),
		idem.WithLogger(nil), idem.WithMeterProvider(nil))
	idemimpl.NewExternalInbox(nil, modesXTable, func(context.Context, obsMsg) (obsResult, error) { return obsResult{}, nil },
		idem.WithLease(time.Minute), idem.WithStuckAttempts(2), idem.WithBeforeComplete(func(context.Context) error { return nil }),
		idem.WithLogger(nil), idem.WithMeterProvider(nil))
}
