package idemtest

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

type sampleLine struct {
	SKU      string
	Quantity int32
	Tags     map[string]bool
}

type sampleMsg struct {
	OrderID  uuid.UUID
	Customer string
	Amount   int64
	Ratio    float64
	Express  bool
	PlacedAt time.Time
	Within   time.Duration
	Lines    []sampleLine
	Billing  *struct{ City string }
	Extra    json.RawMessage
	Raw      []byte
	Ref      *int64
	Next     *sampleMsg
	note     string
}

// TestSample: every exported field is set, the same way every time, and
// the value survives a JSON round trip (the kill scenarios hand the message
// to a child process as JSON).
func TestSample(t *testing.T) {
	m := Sample[sampleMsg]()
	if !reflect.DeepEqual(m, Sample[sampleMsg]()) {
		t.Fatal("two samples differ")
	}
	var zero []string
	v := reflect.ValueOf(m)
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() && f.Name != "Next" && v.Field(i).IsZero() {
			zero = append(zero, f.Name)
		}
	}
	if len(zero) > 0 {
		t.Errorf("fields left zero: %v", zero)
	}
	if m.Next != nil && m.Next.Next != nil {
		t.Errorf("a type inside itself is filled again: %+v", m.Next)
	}
	if m.Customer != "sample-customer" || m.Amount != 100 || !m.Express || m.Lines[0].SKU != "sample-sku" || m.Lines[0].Quantity != 100 ||
		!m.PlacedAt.Equal(SampleTime) || m.Within != time.Second || m.Billing.City != "sample-city" || *m.Ref != 100 || m.note != "" {
		t.Errorf("sample: %+v", m)
	}
	if m.OrderID.Version() != 4 || m.OrderID.Variant() != uuid.RFC4122 {
		t.Errorf("OrderID %s is not a valid version 4 UUID", m.OrderID)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back sampleMsg
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, m) {
		t.Errorf("JSON round trip: %v\n%+v\n%+v", err, back, m)
	}
}

func TestKebab(t *testing.T) {
	for in, want := range map[string]string{"OrderID": "order-id", "ID": "id", "HTTPServer": "http-server", "sku": "sku", "CustomerName": "customer-name"} {
		if got := kebab(in); got != want {
			t.Errorf("kebab(%q) = %q, want %q", in, got, want)
		}
	}
}

// dbtx is sqlc's interface for pgx.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

type queries struct{ db dbtx }

type paymentsAPI interface {
	Call(ctx context.Context, key string, payload []byte) (string, error)
}

type service struct {
	Pool     *pgxpool.Pool
	db       idem.DB
	q        *queries
	deps     struct{ tx dbtx }
	payments paymentsAPI
	name     string
	unused   *struct{ n int }
}

// TestSampleReceiver: the fields of database handle types get the
// scenario's pool, exported or not, nested or behind a nil pointer to a
// struct; a field of an interface the Provider satisfies gets the provider;
// the others stay as they were.
func TestSampleReceiver(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres:///nowhere?host=/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p := NewProvider()
	s := sampleReceiver[*service](t, &DB{Pool: pool}, p)
	if s.Pool != pool || s.db != pool || s.q == nil || s.q.db != pool || s.deps.tx != pool || s.payments != p {
		t.Errorf("receiver: %+v", s)
	}
	if s.name != "" || s.unused != nil {
		t.Errorf("fields without a handle changed: %+v", s)
	}
	if v := sampleReceiver[service](t, &DB{Pool: pool}, nil); v.Pool != pool || v.payments != nil {
		t.Errorf("value receiver: %+v", v)
	}
	if sampleReceiver[NoReceiver](t, &DB{Pool: pool}, p) != (NoReceiver{}) {
		t.Error("NoReceiver changed")
	}
}

// TestDiff: the differences name the table, the column and both values,
// or both row counts, and leave out the columns the judge does not compare.
func TestDiff(t *testing.T) {
	one := state{
		"accounts": {columns: []string{"id", "balance", "updated_at"}, rows: [][]string{{"a", "100", "t1"}}},
		"orders":   {columns: []string{"id"}, rows: [][]string{{"o-1"}}},
	}
	got := state{
		"accounts": {columns: []string{"id", "balance", "updated_at"}, rows: [][]string{{"a", "800", "t2"}}},
		"orders":   {columns: []string{"id"}, rows: [][]string{{"o-1"}, {"o-1"}}},
	}
	other := state{
		"accounts": {columns: []string{"id", "balance", "updated_at"}, rows: [][]string{{"a", "100", "t3"}}},
		"orders":   {columns: []string{"id"}, rows: [][]string{{"o-1"}}},
	}
	j := learnJudge(nil, [2]state{one, other})
	d := j.diff(got, one, "one delivery leaves")
	want := []string{"balance = 800 in accounts where one delivery leaves 100", "2 rows in orders where one delivery leaves 1"}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(d, "\n"), strings.Join(want, "\n"))
	}
	if d := j.diff(other, one, "one delivery leaves"); d != nil {
		t.Errorf("updated_at differs between two runs, yet it is compared: %v", d)
	}
	if d := j.diff(state{}, one, "the state before it had"); len(d) != 2 || d[1] != "no row in orders where the state before it had 1" {
		t.Errorf("diff with an empty state: %v", d)
	}
}

// TestFixtureAdvice: the fixture to write is spelt as the test's package
// spells its types.
func TestFixtureAdvice(t *testing.T) {
	c := caller{pkgPath: "github.com/idemgen/idemgen/idem/idemtest", test: "TestChargeIdem"}
	got := fixtureAdvice[*service, idem.Message[sampleLine]](c, "Fixture", "db *idemtest.DB")
	for _, want := range []string{
		"func chargeFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*service, idem.Message[sampleLine]]",
		"in a _test.go file of package idemtest, and add fixture=chargeFixture to the //idem:handler directive of Charge",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("advice lacks %q:\n%s", want, got)
		}
	}
}
