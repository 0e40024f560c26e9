package idemimpl

import (
	"fmt"
	"strings"
	"testing"
)

// TestDeclarationRefused: a table declaration the statements cannot be
// built from is refused at construction, naming the constructor and the
// consumer.
func TestDeclarationRefused(t *testing.T) {
	key := func(int) ([]any, error) { return nil, nil }
	text := []Column{{Field: "ID", Name: "key_id", Type: "text"}}
	order := func(int) (any, int64, error) { return nil, 0, nil }
	for _, c := range []struct {
		name, want string
		build      func()
	}{
		{"no columns", "idemimpl.NewPublishingInbox (consumer c): the table declares no key columns", func() {
			NewPublishingInbox(nil, Table[int]{Consumer: "c", Name: "t", Key: key}, NoResultPublishing[int](nil))
		}},
		{"a column without a type", "idemimpl.NewInbox (consumer c): key column 1", func() {
			NewInbox(nil, Table[int]{Consumer: "c", Name: "t", Key: key, Columns: []Column{{Field: "ID", Name: "key_id"}}}, NoResult[int](nil))
		}},
		{"a guard without its table", "idemimpl.NewInbox (consumer c): a stale-message guard needs Order, Versions and EntityType", func() {
			NewInbox(nil, Table[int]{Consumer: "c", Name: "t", Key: key, Columns: text, Order: order}, NoResult[int](nil))
		}},
		{"external", "idemimpl.NewExternalInbox (consumer c): the table declares no key columns", func() {
			NewExternalInbox(nil, ExternalTable[int]{Consumer: "c", Name: "t", Key: key}, NoResultExternal[int](nil))
		}},
		{"entity", "idemimpl.NewEntityInbox (consumer c): the table declares no key columns", func() {
			NewEntityInbox(nil, EntityTable[int]{Consumer: "c", Name: "t", Key: key}, NoResult[int](nil), nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if got := fmt.Sprint(recover()); !strings.HasPrefix(got, c.want) {
					t.Errorf("panic %q, want it to start with %q", got, c.want)
				}
			}()
			c.build()
		})
	}
}

// TestStatementsBuiltOnce: every statement of a table is built when the
// inbox is constructed, with the key's columns, its casts and the numbering
// of the placeholders after the key; the variants of a nullable key match
// its NULL parts with IS NULL and number only the others.
func TestStatementsBuiltOnce(t *testing.T) {
	s := newInboxSQL("idemimpl.NewInbox", Table[int]{Consumer: "c", Name: `app."order"`, Columns: []Column{
		{Field: "A", Name: "key_a", Type: "text"},
		{Field: "B", Name: "key_b", Type: "bigint", Nullable: true},
	}}, true)
	if !strings.Contains(s.claimSQL, `INSERT INTO app."order" (key_a, key_b, fingerprint, status)`) ||
		!strings.Contains(s.claimSQL, "SELECT $1::text, $2::bigint, $3::bytea, 'running' FROM (SELECT set_config('lock_timeout', $4::text, true)") ||
		!strings.Contains(s.claimSQL, "set_config('lock_timeout', $4::text, true)") {
		t.Errorf("claim:\n%s", s.claimSQL)
	}
	if got := s.lookup[0b10]; !strings.HasSuffix(got, "WHERE key_a = $1 AND key_b IS NULL") {
		t.Errorf("lookup of (a, NULL):\n%s", got)
	}
	if got := s.markDone[0]; !strings.Contains(got, "SET status = 'done', result = $3") ||
		!strings.Contains(got, "WHERE key_a = $1 AND key_b = $2 AND current_setting('idem.lock_timeout', true) <> ''") {
		t.Errorf("markDone of (a, b):\n%s", got)
	}
	if got := s.takeOver[0b10]; !strings.Contains(got, "WHERE key_a = $1 AND key_b IS NULL AND t.status = 'running' AND t.fingerprint = $2::bytea") ||
		!strings.Contains(got, "set_config('lock_timeout', $3::text, true)") {
		t.Errorf("takeOver of (a, NULL):\n%s", got)
	}
	if s.batches() {
		t.Error("a table with a nullable key part has batch statements")
	}
	q := s.lookupKey([]any{"a", nil})
	if q.sql != s.lookup[0b10] || len(q.args) != 1 || q.args[0] != "a" {
		t.Errorf("lookupKey(a, NULL) = %q, %v", q.sql, q.args)
	}
}
