package migrate

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/model"
)

var entities = EntityKind{Create: func(m model.EntityMarker) []byte { return []byte("-- add column to " + m.Table + "\n") }}

// TestEntityRoundTrip: a rendered entity migration reads back as its
// consumer and table, under a name after the table.
func TestEntityRoundTrip(t *testing.T) {
	m := model.EntityMarker{Consumer: "shop.order", Table: "app.orders"}
	name, content, err := entities.Render(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if name != "idem_app_orders_fingerprint" {
		t.Errorf("name %q", name)
	}
	consumer, state, ok, err := entities.Read(content)
	if !ok || err != nil || consumer != "shop.order" || state.(model.EntityMarker) != m {
		t.Fatalf("Read: %q %v %v %v", consumer, state, ok, err)
	}
	if _, _, ok, _ := (InboxKind{}).Read(content); ok {
		t.Error("an entity migration reads as an inbox migration")
	}
	if _, _, err := entities.Render(m, m); err == nil {
		t.Error("Render made a second migration of an entity chain")
	}
}

// TestEntityEvolve: the same table needs nothing; another table is refused,
// saying why.
func TestEntityEvolve(t *testing.T) {
	a := model.EntityMarker{Consumer: "shop.order", Table: "orders"}
	if steps, err := entities.Evolve(nil, a); err != nil || len(steps) != 1 {
		t.Fatalf("new consumer: %v %v", steps, err)
	}
	if steps, err := entities.Evolve(a, a); err != nil || len(steps) != 0 {
		t.Fatalf("unchanged: %v %v", steps, err)
	}
	b := a
	b.Table = "purchases"
	if _, err := entities.Evolve(a, b); err == nil || !strings.Contains(err.Error(), "new consumer name") {
		t.Fatalf("changed table: %v", err)
	}
}

// TestEntityDamagedHeader: a schema line that is not one is reported.
func TestEntityDamagedHeader(t *testing.T) {
	_, _, ok, err := entities.Read([]byte(Header + "\n" + EntityMarker + "a.b\n-- nothing\n"))
	if !ok || err == nil {
		t.Fatalf("ok %v err %v", ok, err)
	}
}
